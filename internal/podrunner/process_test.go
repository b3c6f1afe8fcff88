package podrunner

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// shell starts sh -c script in dir, its output in dir/c.log.
func shell(t *testing.T, dir, script string) *process {
	t.Helper()
	p, err := startProcess(&launch{path: "/bin/sh", args: []string{"-c", script}, dir: dir, logPath: filepath.Join(dir, "c.log"),
		env: []string{"PATH=" + os.Getenv("PATH"), "GREETING=hello"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(0) })
	return p
}

// waitExit waits for p to exit.
func waitExit(t *testing.T, p *process) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not exit")
	}
}

// childPID reads the PID a script wrote to dir/child.
func childPID(t *testing.T, dir string) int {
	t.Helper()
	var pid int
	testenv.WaitUntil(t, 5*time.Second, "the script writes its child's PID", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "child"))
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

// gone reports whether process pid has exited: it does not exist, or it is a zombie
// its new parent has not reaped yet.
func gone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state ...: comm may hold spaces, the state follows its ')'.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}

func TestProcessRunsInItsDirWithItsEnvironmentAndLog(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("RUNNER_ONLY", "leak")
	p := shell(t, dir, `echo "$GREETING from $(pwd) [$RUNNER_ONLY]"`)
	waitExit(t, p)
	log, err := os.ReadFile(filepath.Join(dir, "c.log"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "hello from " + dir + " []"; !strings.Contains(string(log), want) {
		t.Errorf("log = %q, want it to contain %q", log, want)
	}
	if term := p.termination(t0, t1); term.ExitCode != 0 || term.Reason != "Completed" || term.Signal != 0 {
		t.Errorf("termination = %+v, want Completed with code 0", term)
	}
}

func TestProcessOutputGoesToItsLogByStream(t *testing.T) {
	dir := t.TempDir()
	p := shell(t, dir, `echo out; echo err >&2; printf "no newline"`)
	waitExit(t, p)
	got := map[string]string{}
	for _, e := range readEntries(t, filepath.Join(dir, "c.log")) {
		got[string(e.text)] = e.stream
	}
	if want := map[string]string{"out": "stdout", "err": "stderr", "no newline": "stdout"}; !maps.Equal(got, want) {
		t.Errorf("log lines (text: stream) = %v, want %v", got, want)
	}
}

func TestExitedIsNotHeldBackByADescendantOutsideTheGroup(t *testing.T) {
	dir := t.TempDir()
	// The descendant writes its PID once it has left the group, and the process waits
	// for that, so that killing the group cannot take the descendant too.
	p := shell(t, dir, `setsid sh -c 'echo $$ > child; exec sleep 60' & until [ -s child ]; do sleep 0.01; done; echo done`)
	child := childPID(t, dir)
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	// Held back, the exit would wait for the descendant's 60 s sleep: waitExit gives up
	// long before.
	waitExit(t, p)
	if gone(child) {
		t.Error("the descendant outside the group is gone: the test did not test it")
	}
	if e := readEntries(t, filepath.Join(dir, "c.log")); len(e) != 1 || string(e[0].text) != "done" {
		t.Errorf("log = %+v, want the line the process wrote", e)
	}
}

func TestStopTerminatesTheWholeGroup(t *testing.T) {
	dir := t.TempDir()
	p := shell(t, dir, `sleep 60 & echo $! > child; wait`)
	child := childPID(t, dir)
	p.stop(5 * time.Second)
	if term := p.termination(t0, t1); term.ExitCode != 128+int32(syscall.SIGTERM) || term.Signal != int32(syscall.SIGTERM) || term.Reason != "Error" {
		t.Errorf("termination = %+v, want killed by SIGTERM (143)", term)
	}
	testenv.WaitUntil(t, 5*time.Second, "the child is gone", func() bool { return gone(child) })
}

func TestStopKillsAProcessThatIgnoresSIGTERM(t *testing.T) {
	dir := t.TempDir()
	p := shell(t, dir, `trap "" TERM; sleep 60 & echo $! > child; wait`)
	child := childPID(t, dir)
	start := time.Now()
	p.stop(200 * time.Millisecond)
	// Not a timing measurement: SIGKILL must not come before the grace period ends (an
	// order of events), and stop must return (a hang would end at the test's timeout).
	if elapsed := time.Since(start); elapsed < 200*time.Millisecond {
		t.Errorf("stop returned after %v, before the 200ms grace period ended", elapsed)
	}
	if term := p.termination(t0, t1); term.ExitCode != 137 || term.Signal != int32(syscall.SIGKILL) {
		t.Errorf("termination = %+v, want killed by SIGKILL (137)", term)
	}
	testenv.WaitUntil(t, 5*time.Second, "the child is gone", func() bool { return gone(child) })
}

func TestExitKillsWhatTheProcessLeftBehind(t *testing.T) {
	dir := t.TempDir()
	p := shell(t, dir, `sleep 60 & echo $! > child; exit 3`)
	child := childPID(t, dir)
	waitExit(t, p)
	if term := p.termination(t0, t1); term.ExitCode != 3 || term.Reason != "Error" {
		t.Errorf("termination = %+v, want code 3, Error", term)
	}
	testenv.WaitUntil(t, 5*time.Second, "the orphan is gone", func() bool { return gone(child) })
}

func TestLogTailIsThisRunsOutputInWholeLines(t *testing.T) {
	dir := t.TempDir()
	waitExit(t, shell(t, dir, `echo "earlier run"`))
	p := shell(t, dir, `i=0; while [ $i -lt 300 ]; do echo "line $i"; i=$((i+1)); done; exit 1`)
	waitExit(t, p)
	tail := p.logTail()
	if strings.Contains(tail, "earlier run") || strings.Contains(tail, "stdout") {
		t.Errorf("tail %q holds more than this run's output", tail)
	}
	if !strings.HasSuffix(tail, "line 299") || len(tail) > logTailBytes || !strings.HasPrefix(tail, "line ") {
		t.Errorf("tail = %q (%d bytes), want whole lines ending with line 299, at most %d bytes", tail, len(tail), logTailBytes)
	}

	if e := readEntries(t, filepath.Join(dir, "c.log.1")); len(e) != 1 || string(e[0].text) != "earlier run" {
		t.Errorf("previous log = %+v, want the earlier run's line", e)
	}

	short := shell(t, dir, `echo "only line"; exit 1`)
	waitExit(t, short)
	if got := short.logTail(); got != "only line" {
		t.Errorf("tail = %q, want %q", got, "only line")
	}
}

func TestStartProcessFailsForAMissingBinary(t *testing.T) {
	dir := t.TempDir()
	if p, err := startProcess(&launch{path: filepath.Join(dir, "missing"), dir: dir, logPath: filepath.Join(dir, "c.log")}); err == nil {
		p.stop(0)
		t.Error("a missing binary started")
	}
}
