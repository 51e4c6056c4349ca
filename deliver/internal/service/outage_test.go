package service

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// privateRedis starts a throw-away redis-server, so the test can make Redis
// unreachable without touching the shared one.
func privateRedis(t *testing.T) (*redis.Client, *exec.Cmd) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		// Failing, not skipping: a skipped outage test passes in CI
		// without checking anything.
		t.Fatalf("redis-server not found in PATH (make services / deploy/dev/services.sh installs it as root): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	eventually(t, 5*time.Second, "private redis up", func() bool { return rdb.Ping(context.Background()).Err() == nil })
	return rdb, cmd
}

// Redis frozen past the lease TTL, then flushed: every job whose enqueue
// succeeded (logic's SEND_ACK point) reaches the processor, exactly the
// enqueued ids and no other, whatever the outage did to leases and groups.
func TestRedisOutageLosesNothing(t *testing.T) {
	rdb, srv := privateRedis(t)
	ctx := context.Background()
	rec := newRecorder()
	in := start(t, rdb, "d1", rec)
	enqueued := map[int64]bool{}
	enqueueRound := func(base int64) {
		for _, conv := range convPerPartition() {
			enqueue(t, rdb, conv, base+conv, `{}`)
			enqueued[base+conv] = true
		}
	}
	enqueueRound(100)
	eventually(t, 5*time.Second, "the first round's ids", func() bool { return len(rec.missing(enqueued)) == 0 })

	// Freeze Redis past the lease TTL: every call times out.
	if err := srv.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, "not ready", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		return in.svc.Ready(cctx) != nil
	})
	time.Sleep(2 * leaseTTL)
	if err := srv.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	enqueueRound(200)
	eventually(t, 10*time.Second, "every id enqueued before and after the outage", func() bool { return len(rec.missing(enqueued)) == 0 })
	eventually(t, 5*time.Second, "no pending", func() bool { return pending(t, rdb) == 0 })
	if err := in.svc.Ready(ctx); err != nil {
		t.Fatalf("not ready after recovery: %v", err)
	}

	// Redis comes back empty: streams and groups are recreated and jobs
	// queued afterwards are still delivered.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	enqueueRound(300)
	eventually(t, 10*time.Second, "every id enqueued after a flush", func() bool { return len(rec.missing(enqueued)) == 0 })
	if extra := rec.extra(enqueued); len(extra) > 0 {
		t.Fatalf("processed ids nobody enqueued: %v", extra)
	}
}
