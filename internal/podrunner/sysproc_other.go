//go:build unix && !linux

package podrunner

import "syscall"

// sysProcAttr puts a container's process in a process group of its own.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
