package podrunner

import "syscall"

// sysProcAttr puts a container's process in a process group of its own and has the
// kernel kill it if the runner dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
