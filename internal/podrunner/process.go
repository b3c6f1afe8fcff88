package podrunner

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Termination messages from logs: the end of the log of the run that failed, at most
// logTailLines lines and logTailBytes bytes of it, as kubelet takes them.
const (
	logTailLines = 80
	logTailBytes = 2048
)

// process is a container's running program, the leader of a process group of its own
// so that signals reach its children too. Its stdout and stderr go to its log.
type process struct {
	cmd    *exec.Cmd
	log    *containerLog
	exited chan struct{} // closed once the process has exited, its group is killed and its log closed
}

// startProcess starts l's program with its output in a new log at l's log path, the
// log there before kept as the previous run's.
func startProcess(l *launch) (*process, error) {
	log, err := createLog(l.logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(l.path, l.args...)
	cmd.Env, cmd.Dir = l.env, l.dir
	cmd.SysProcAttr = sysProcAttr()
	outputs, childEnds, err := pipeOutput(cmd)
	if err != nil {
		log.close()
		return nil, err
	}
	err = cmd.Start()
	closeAll(childEnds) // the child has its own descriptors
	if err != nil {
		closeAll(outputs)
		log.close()
		return nil, err
	}
	var copying sync.WaitGroup
	copying.Go(func() { log.copyFrom("stdout", outputs[0]) })
	copying.Go(func() { log.copyFrom("stderr", outputs[1]) })
	p := &process{cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		// Whatever the program left behind in its group goes with it, and its output ends.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for _, r := range outputs {
			_ = r.SetReadDeadline(time.Now().Add(drainTimeout))
		}
		copying.Wait()
		closeAll(outputs)
		log.close()
		close(p.exited)
	}()
	return p, nil
}

// pipeOutput connects cmd's stdout and stderr to pipes and returns their read ends,
// stdout's first, and the ends cmd's process gets.
func pipeOutput(cmd *exec.Cmd) (outputs, childEnds []*os.File, err error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll([]*os.File{outR, outW})
		return nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	return []*os.File{outR, errR}, []*os.File{outW, errW}, nil
}

// closeAll closes files.
func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
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

// logTail returns the end of the exited process's log as a termination message: its
// last lines, at most logTailLines and logTailBytes of them, without timestamps.
func (p *process) logTail() string {
	f, err := os.Open(p.log.path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var b bytes.Buffer
	if err := printLog(context.Background(), &b, f, &corev1.PodLogOptions{TailLines: ptr.To[int64](logTailLines)}, nil); err != nil {
		return ""
	}
	tail := b.Bytes()
	if len(tail) > logTailBytes {
		tail = tail[len(tail)-logTailBytes:]
		if nl := bytes.IndexByte(tail, '\n'); nl >= 0 {
			tail = tail[nl+1:] // whole lines only
		}
	}
	return strings.TrimSpace(string(tail))
}
