package testredis

import "syscall"

// dieWithParent has the kernel kill the child when the thread that
// started it (locked for the binary's life) ends, i.e. with the binary.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
