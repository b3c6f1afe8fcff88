package podrunner

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// logTailBytes bounds the end of a container's log kept as its termination message.
const logTailBytes = 2048

// process is a container's running program, the leader of a process group of its own
// so that signals reach its children too.
type process struct {
	cmd      *exec.Cmd
	logPath  string
	logStart int64         // where this process's output starts in its log
	exited   chan struct{} // closed once the process has exited and its group is killed
}

// startProcess starts l's program with its output appended to l's log file.
func startProcess(l *launch) (*process, error) {
	logFile, err := os.OpenFile(l.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor
	fmt.Fprintf(logFile, "--- pod-runner %s: starting %s %s\n", time.Now().Format(time.RFC3339), l.path, strings.Join(l.args, " "))
	logStart, err := logFile.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(l.path, l.args...)
	cmd.Env, cmd.Dir = l.env, l.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, logPath: l.logPath, logStart: logStart, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		// Whatever the program left behind in its group goes with it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		close(p.exited)
	}()
	return p, nil
}

// pid returns the process's ID.
func (p *process) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM to the process group, SIGKILL after grace, and returns once the
// process has exited.
func (p *process) stop(grace time.Duration) {
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return
	case <-t.C:
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.exited
}

// termination describes how the exited process ended, as kubelet reports a container
// that terminated: exit code 128+n for a process killed by signal n.
func (p *process) termination(startedAt, finishedAt metav1.Time) *corev1.ContainerStateTerminated {
	t := &corev1.ContainerStateTerminated{StartedAt: startedAt, FinishedAt: finishedAt, Reason: "Completed"}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Signal = int32(ws.Signal())
		t.ExitCode = 128 + t.Signal
	} else {
		t.ExitCode = int32(p.cmd.ProcessState.ExitCode())
	}
	if t.ExitCode != 0 {
		t.Reason = "Error"
	}
	return t
}

// logTail returns the last lines the exited process wrote to its log, at most
// logTailBytes of them.
func (p *process) logTail() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	from := max(p.logStart, fi.Size()-logTailBytes)
	tail, err := io.ReadAll(io.NewSectionReader(f, from, fi.Size()-from))
	if err != nil {
		return ""
	}
	if from > p.logStart {
		if nl := bytes.IndexByte(tail, '\n'); nl >= 0 {
			tail = tail[nl+1:] // whole lines only
		}
	}
	return strings.TrimSpace(string(tail))
}
