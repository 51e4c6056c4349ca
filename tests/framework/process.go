// Package framework runs the real binaries for end-to-end tests, the way
// etcd's tests/framework/e2e does: it builds (or finds) them, starts each as
// a child process with its own config and ports, waits for its ready line,
// and can stop, kill -9 and restart it and read its logs.
package framework

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ReadyLine is the message every process logs once it serves.
const ReadyLine = `"msg":"ready to serve"`

// Process is one running (or stopped) binary.
type Process struct {
	Name string
	bin  string
	args []string
	env  []string
	t    testing.TB

	mu      sync.Mutex
	cmd     *exec.Cmd
	logs    bytes.Buffer
	waitErr chan error
	notify  chan struct{} // closed and replaced whenever a log line arrives
}

// NewProcess prepares a process; Start runs it.
func NewProcess(t testing.TB, name, bin string, args, env []string) *Process {
	return &Process{Name: name, bin: bin, args: args, env: env, t: t, notify: make(chan struct{})}
}

// Start runs the process and waits for its ready line.
func (p *Process) Start(ctx context.Context) error {
	mark, err := p.Launch()
	if err != nil {
		return err
	}
	return p.waitFor(ctx, ReadyLine, mark, 60*time.Second)
}

// SetEnv adds environment for every later run (a later entry of the same
// name wins), e.g. a new database address after a failover.
func (p *Process) SetEnv(kv ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.env = append(append([]string(nil), p.env...), kv...)
}

// Launch runs the process without waiting for anything. It returns the log
// offset where this run's output begins.
func (p *Process) Launch() (int, error) { return p.LaunchWithEnv() }

// LaunchWithEnv is Launch with extra environment for this run only, e.g.
// SPARK_FAILPOINTS armed before the process's first instruction, for a
// seam it may reach before its admin port could arm it. Later runs do not
// carry it.
func (p *Process) LaunchWithEnv(extra ...string) (int, error) {
	p.mu.Lock()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(append(inheritedEnv(), p.env...), extra...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		p.mu.Unlock()
		return 0, err
	}
	cmd.Stderr = cmd.Stdout
	fmt.Fprintf(&p.logs, "=== start %s %s\n", p.Name, strings.Join(p.args, " "))
	mark := p.logs.Len()
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		return 0, fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.cmd = cmd
	p.waitErr = make(chan error, 1)
	p.mu.Unlock()

	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.Write(sc.Bytes())
			p.logs.WriteByte('\n')
			close(p.notify)
			p.notify = make(chan struct{})
			p.mu.Unlock()
		}
		close(done)
	}()
	go func() {
		<-done
		p.waitErr <- cmd.Wait()
	}()
	return mark, nil
}

// WaitLog waits until a log line since the last start contains s.
func (p *Process) WaitLog(ctx context.Context, s string, timeout time.Duration) error {
	p.mu.Lock()
	mark := strings.LastIndex(p.logs.String(), "=== start ")
	p.mu.Unlock()
	return p.waitFor(ctx, s, mark, timeout)
}

func (p *Process) waitFor(ctx context.Context, s string, from int, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		found := strings.Contains(p.logs.String()[from:], s)
		ch := p.notify
		exited := p.cmd != nil && p.cmd.ProcessState != nil
		p.mu.Unlock()
		if found {
			return nil
		}
		if exited {
			return fmt.Errorf("%s exited before logging %q:\n%s", p.Name, s, p.Tail(30))
		}
		select {
		case <-ch:
		case err := <-p.waitErr:
			p.waitErr <- err
			p.mu.Lock()
			found = strings.Contains(p.logs.String()[from:], s)
			p.mu.Unlock()
			if found {
				return nil
			}
			return fmt.Errorf("%s exited (%v) before logging %q:\n%s", p.Name, err, s, p.Tail(30))
		case <-deadline.C:
			return fmt.Errorf("%s: no %q within %v:\n%s", p.Name, s, timeout, p.Tail(30))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// inheritedEnv is the test's environment without IM_* variables, so a
// developer's shell (or make's services.env) cannot redirect a test cluster
// to other servers: each process gets its settings from its config file and
// the env the framework sets.
func inheritedEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IM_") {
			out = append(out, kv)
		}
	}
	return out
}

// RSS returns the process's resident memory in bytes, from /proc.
func (p *Process) RSS() (int64, error) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return 0, fmt.Errorf("%s is not running", p.Name)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("rss of %s: %w", p.Name, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("rss of %s: %q: %w", p.Name, line, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("rss of %s: no VmRSS line", p.Name)
}

// Stop sends SIGTERM and waits (then SIGKILL after 15 s).
func (p *Process) Stop() error { return p.signal(syscall.SIGTERM, 15*time.Second) }

// Kill sends SIGKILL, as a crash would.
func (p *Process) Kill() error { return p.signal(syscall.SIGKILL, 10*time.Second) }

func (p *Process) signal(sig syscall.Signal, wait time.Duration) error {
	p.mu.Lock()
	cmd, ch := p.cmd, p.waitErr
	p.mu.Unlock()
	if cmd == nil || ch == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case err := <-ch:
		p.mu.Lock()
		p.cmd, p.waitErr = nil, nil
		p.mu.Unlock()
		if sig == syscall.SIGKILL {
			return nil
		}
		return err
	case <-time.After(wait):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-ch
		p.mu.Lock()
		p.cmd, p.waitErr = nil, nil
		p.mu.Unlock()
		return fmt.Errorf("%s did not exit within %v after %v", p.Name, wait, sig)
	}
}

// WaitExit waits until the process exits by itself (an armed "exit"
// failpoint, a crash) and fails if it still runs after within. It does not
// signal the process.
func (p *Process) WaitExit(within time.Duration) error {
	p.mu.Lock()
	ch := p.waitErr
	p.mu.Unlock()
	if ch == nil {
		return nil // never started, or already stopped
	}
	select {
	case err := <-ch:
		ch <- err // kept for Stop, Kill and waitFor, which read it too
		return nil
	case <-time.After(within):
		return fmt.Errorf("%s still running %v later, want it exited:\n%s", p.Name, within, p.Tail(20))
	}
}

// Running reports whether the process is alive.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && p.cmd.ProcessState == nil
}

// Logs returns everything the process printed, across restarts.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Tail returns the last n lines of the logs.
func (p *Process) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Logs(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
