// Package cluster runs the system under test: a fresh MySQL database, a
// Redis database of its own, logic, deliver and gates from bin/, on free
// loopback ports, with the benchmark's own config.
package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// readyLine is what every process logs once it serves (docs/internals.md).
const readyLine = `"msg":"ready to serve"`

// Proc is one child process; it can be stopped and started again.
type Proc struct {
	Name, Bin string
	Args, Env []string
	LogPath   string

	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{}
}

// Start runs the process and waits for its ready line.
func (p *Proc) Start(ctx context.Context) error {
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("cluster: %s log: %w", p.Name, err)
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		_ = logf.Close()
		return fmt.Errorf("cluster: %s: %w", p.Name, err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("cluster: start %s: %w", p.Name, err)
	}
	ready := make(chan struct{})
	exit := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		seen := false
		for sc.Scan() {
			line := sc.Text()
			_, _ = io.WriteString(logf, line+"\n")
			if !seen && strings.Contains(line, readyLine) {
				seen = true
				close(ready)
			}
		}
		_, _ = io.Copy(logf, out)
		_ = cmd.Wait()
		_ = logf.Close()
		close(exit)
	}()
	p.mu.Lock()
	p.cmd, p.exit = cmd, exit
	p.mu.Unlock()
	t := time.NewTimer(60 * time.Second)
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-exit:
		return fmt.Errorf("cluster: %s exited before ready; see %s", p.Name, p.LogPath)
	case <-t.C:
		_ = p.Stop(syscall.SIGKILL)
		return fmt.Errorf("cluster: %s not ready after 60s; see %s", p.Name, p.LogPath)
	case <-ctx.Done():
		_ = p.Stop(syscall.SIGKILL)
		return fmt.Errorf("cluster: start %s: %w", p.Name, ctx.Err())
	}
}

// Pid is the running process's id (0 when stopped).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Signal sends sig without waiting.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return errors.New("cluster: not running")
	}
	return cmd.Process.Signal(sig)
}

// Wait waits for the process to exit or ctx to end.
func (p *Proc) Wait(ctx context.Context) error {
	p.mu.Lock()
	exit := p.exit
	p.mu.Unlock()
	if exit == nil {
		return nil
	}
	select {
	case <-exit:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop sends sig, waits up to 15 s, then kills.
func (p *Proc) Stop(sig syscall.Signal) error {
	p.mu.Lock()
	cmd, exit := p.cmd, p.exit
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exit:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exit
	}
	p.mu.Lock()
	p.cmd = nil
	p.mu.Unlock()
	return nil
}

// FreePort returns a loopback TCP port nobody listens on right now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("cluster: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
