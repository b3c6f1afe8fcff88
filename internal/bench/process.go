package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is a child process in its own process group, with its output in a log file. stop
// ends the whole group, so grandchildren (go test's test binary) go too.
type process struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
}

// startProcess starts bin with args, its stdout and stderr appended to logPath.
func startProcess(name, logPath string, env []string, bin string, args ...string) (*process, error) {
	return startProcessIn("", name, logPath, env, bin, args...)
}

// startProcessIn is startProcess with the working directory dir ("" for the current one).
func startProcessIn(dir, name, logPath string, env []string, bin string, args ...string) (*process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	// Its own process group, so that stop reaches grandchildren and a Ctrl-C on the terminal
	// reaches only the benchmark, which then stops its children in order. Pdeathsig ends
	// the child should the benchmark itself be killed without a chance to clean up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait blocks until the process ends or ctx ends; in the latter case it stops the process.
func (p *process) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		p.stop()
		return ctx.Err()
	}
}

// stop sends SIGTERM to the process group and SIGKILL after 10 s, and waits for the end.
func (p *process) stop() {
	if p == nil || p.exited() {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Anything left in the group (a grandchild that ignored SIGTERM) goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// runProcess runs bin to completion (or until ctx ends), logging to logPath.
func runProcess(ctx context.Context, name, logPath string, env []string, bin string, args ...string) error {
	p, err := startProcess(name, logPath, env, bin, args...)
	if err != nil {
		return err
	}
	if err := p.wait(ctx); err != nil {
		return fmt.Errorf("%s (log: %s): %w", name, logPath, err)
	}
	return nil
}
