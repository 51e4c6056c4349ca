package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
)

// runTB lets tests/framework, which is written for tests, start a cluster
// from a command: it implements the testing.TB methods the framework
// calls. Fatal ends the calling goroutine (as in a test) after recording
// the failure; the embedded nil interface only supplies testing.TB's
// unexported method, so a method the framework starts to call and this
// type lacks panics at once instead of misbehaving.
type runTB struct {
	testing.TB
	name string
	logf func(string, ...any)

	mu       sync.Mutex
	failed   bool
	msg      string
	cleanups []func()
	dirs     []string
}

func newRunTB(name string, logf func(string, ...any)) *runTB {
	return &runTB{name: name, logf: logf}
}

func (t *runTB) Helper()      {}
func (t *runTB) Name() string { return t.name }

func (t *runTB) Log(args ...any) { t.logf("%s", fmt.Sprint(args...)) }

func (t *runTB) Logf(format string, args ...any) { t.logf(format, args...) }

func (t *runTB) Error(args ...any) { t.fail(fmt.Sprint(args...)) }

func (t *runTB) Errorf(format string, args ...any) { t.fail(fmt.Sprintf(format, args...)) }

func (t *runTB) Fail() { t.fail("failed") }

func (t *runTB) FailNow() {
	t.fail("failed")
	runtime.Goexit()
}

func (t *runTB) Fatal(args ...any) {
	t.fail(fmt.Sprint(args...))
	runtime.Goexit()
}

func (t *runTB) Fatalf(format string, args ...any) {
	t.fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (t *runTB) fail(msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
	if t.msg == "" {
		t.msg = msg
	}
	t.logf("error: %s", msg)
}

func (t *runTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *runTB) failure() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.msg
}

func (t *runTB) Context() context.Context { return context.Background() }

func (t *runTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// TempDir returns a new directory, removed after the cleanups ran.
func (t *runTB) TempDir() string {
	dir, err := os.MkdirTemp("", "imchaos-")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.mu.Lock()
	t.dirs = append(t.dirs, dir)
	t.mu.Unlock()
	return dir
}

// cleanup runs the registered cleanups, last first, as a test's end
// does, then removes the temporary directories.
func (t *runTB) cleanup() {
	t.mu.Lock()
	fs, dirs := t.cleanups, t.dirs
	t.cleanups, t.dirs = nil, nil
	t.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}
