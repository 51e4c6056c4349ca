//go:build !linux

package testredis

import "syscall"

// dieWithParent has no parent-death signal to set outside Linux: there the
// private server outlives a test binary until it is stopped by hand.
func dieWithParent() *syscall.SysProcAttr { return nil }
