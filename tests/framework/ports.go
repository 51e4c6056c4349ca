package framework

import (
	"net"
	"sync"
	"testing"
)

var (
	portsMu sync.Mutex
	handed  = map[int]bool{}
)

// FreePort returns a loopback TCP port that was free a moment ago and that
// this test process has not handed out before, so two processes of one
// cluster never race for the same port.
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for i := 0; i < 100; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handed[port] {
			handed[port] = true
			return port
		}
	}
	t.Fatal("no fresh free port")
	return 0
}
