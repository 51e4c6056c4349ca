// Package testredis gives unit tests a Redis of their own: Open starts one
// private redis-server per test binary (one package's tests) on loopback,
// so packages that `go test` runs in parallel never share a keyspace, and
// no table of DB numbers has to be kept in step (decision 82). Cluster-mode
// checks start a private 3-master Redis Cluster per test instead
// (StartCluster, OpenCluster in cluster.go). End-to-end tests (tests/e2e)
// and the bench start their own redis-server per cluster.
//
// A missing or failing redis-server fails the test, never skips it: a test
// that skips when its service is missing passes in CI without checking
// anything (make services installs redis-server).
package testredis

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// private is the test binary's redis-server, started by the first Open.
// It is the package's only state: a test binary runs one package.
var private struct {
	once sync.Once
	addr string
	err  error
}

// Open returns a client of the test binary's private Redis, closed when
// the test ends. The server starts empty with the first Open of the
// binary and lives as long as the binary, so the package's tests share it
// (they use random ids, or flush it themselves) and a test holding two
// clients sees its own keys through both. A redis-server that is missing
// or does not start fails the test.
func Open(t testing.TB) *redis.Client {
	t.Helper()
	private.once.Do(func() { private.addr, private.err = startPrivate() })
	if private.err != nil {
		t.Fatalf("test Redis: %v", private.err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: private.addr})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		t.Fatalf("test Redis unreachable at %s: %v", private.addr, err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// startPrivate starts a redis-server on a free loopback port that dies
// with the test binary, and waits until it answers. A port taken between
// FreePorts and the server's bind is retried on another.
func startPrivate() (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found (make services installs it): %w", err)
	}
	var last error
	for range 3 {
		ports, err := FreePorts(1)
		if err != nil {
			return "", err
		}
		addr := "127.0.0.1:" + strconv.Itoa(ports[0])
		exited, err := startServer(bin, ports[0])
		if err != nil {
			return "", err
		}
		if last = waitPing(addr, 10*time.Second); last == nil {
			return addr, nil
		}
		select {
		case out := <-exited:
			last = fmt.Errorf("redis-server on %s exited: %s", addr, bytes.TrimSpace(out))
		default:
		}
	}
	return "", last
}

// startServer starts redis-server on port and returns a channel that
// yields its output if it exits. Nothing stops it explicitly: there is no
// hook at a test binary's exit, so it is started with a parent-death
// signal (where the OS has one) from a goroutine that keeps its OS thread
// for the life of the binary, since the signal follows the thread that
// started the child, not the process.
func startServer(bin string, port int) (<-chan []byte, error) {
	started := make(chan error, 1)
	exited := make(chan []byte, 1)
	go func() {
		// Never unlocked: the thread ends only when the server has exited.
		runtime.LockOSThread()
		var out bytes.Buffer
		cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--dir", os.TempDir(), "--save", "", "--appendonly", "no", "--loglevel", "warning")
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = dieWithParent()
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("start redis-server: %w", err)
			return
		}
		started <- nil
		_ = cmd.Wait()
		exited <- out.Bytes()
	}()
	return exited, <-started
}
