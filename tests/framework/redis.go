package framework

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a private redis-server for one test cluster. It keeps an
// append-only file so a stop and start keeps its data, as a production
// Redis with persistence would.
type Redis struct {
	Addr string
	proc *Process
}

// StartRedis starts a private Redis on a free loopback port.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (make test installs it): %v", err)
	}
	port := FreePort(t)
	dir := t.TempDir()
	r := &Redis{Addr: "127.0.0.1:" + strconv.Itoa(port)}
	r.proc = NewProcess(t, "redis", bin, []string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always",
		"--loglevel", "warning",
	}, nil)
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.proc.Kill() })
	return r
}

// Start (re)starts the server and waits until it answers PING.
func (r *Redis) Start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := r.proc.Launch(); err != nil {
		return err
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	for ctx.Err() == nil {
		if c.Ping(ctx).Err() == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("redis on %s did not start:\n%s", r.Addr, r.proc.Tail(20))
}

// Stop shuts the server down (its data stays on disk).
func (r *Redis) Stop() error { return r.proc.Stop() }

// Client returns a client of this server; the test closes it.
func (r *Redis) Client() *redis.Client { return redis.NewClient(&redis.Options{Addr: r.Addr}) }
