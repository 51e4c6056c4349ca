package framework

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
)

// CommandTB lets this framework, which is written for tests, start
// servers and clusters from a command (imchaos, imgalera): it implements
// the testing.TB methods the framework calls. Fatal ends the calling goroutine (as in a test) after recording
// the failure; the embedded nil interface only supplies testing.TB's
// unexported method, so a method the framework starts to call and this
// type lacks panics at once instead of misbehaving.
type CommandTB struct {
	testing.TB
	name string
	logf func(string, ...any)

	mu       sync.Mutex
	failed   bool
	msg      string
	cleanups []func()
	dirs     []string
}

// NewCommandTB returns a CommandTB named name that logs with logf.
func NewCommandTB(name string, logf func(string, ...any)) *CommandTB {
	return &CommandTB{name: name, logf: logf}
}

func (t *CommandTB) Helper()      {}
func (t *CommandTB) Name() string { return t.name }

func (t *CommandTB) Log(args ...any) { t.logf("%s", fmt.Sprint(args...)) }

func (t *CommandTB) Logf(format string, args ...any) { t.logf(format, args...) }

func (t *CommandTB) Error(args ...any) { t.fail(fmt.Sprint(args...)) }

func (t *CommandTB) Errorf(format string, args ...any) { t.fail(fmt.Sprintf(format, args...)) }

func (t *CommandTB) Fail() { t.fail("failed") }

func (t *CommandTB) FailNow() {
	t.fail("failed")
	runtime.Goexit()
}

func (t *CommandTB) Fatal(args ...any) {
	t.fail(fmt.Sprint(args...))
	runtime.Goexit()
}

func (t *CommandTB) Fatalf(format string, args ...any) {
	t.fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (t *CommandTB) fail(msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
	if t.msg == "" {
		t.msg = msg
	}
	t.logf("error: %s", msg)
}

func (t *CommandTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

// Failure is the first failure's message.
func (t *CommandTB) Failure() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.msg
}

func (t *CommandTB) Context() context.Context { return context.Background() }

func (t *CommandTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// TempDir returns a new directory, removed after the cleanups ran.
func (t *CommandTB) TempDir() string {
	dir, err := os.MkdirTemp("", t.name+"-")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.mu.Lock()
	t.dirs = append(t.dirs, dir)
	t.mu.Unlock()
	return dir
}

// RunCleanups runs the registered cleanups, last first, as a test's end
// does, then removes the temporary directories.
func (t *CommandTB) RunCleanups() {
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
