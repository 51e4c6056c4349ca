// Package gatetest holds deliver's test fakes: a gate Push server that
// records every Push and answers with the targets it was told are missing
// or dropped (Push and PushBatch), and a logic Internal server that records mailbox events.
package gatetest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sparkim/spark/deliver/internal/gateclient"
	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/testredis"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// Gate is a fake gate.
type Gate struct {
	gatev1.UnimplementedPushServer
	ID   string
	Addr string

	mu      sync.Mutex
	pushes  []*gatev1.PushRequest
	batches []*gatev1.PushBatchRequest
	missing map[uint64]bool
	dropped map[uint64]bool
	fail    bool
	notify  chan struct{}
}

// Start serves a fake gate on 127.0.0.1:0, requiring secret, and registers
// it in Redis under id. It stops when the test ends.
func Start(t testing.TB, rdb redis.Cmdable, id, secret string) *Gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &Gate{ID: id, Addr: ln.Addr().String(), missing: map[uint64]bool{}, dropped: map[uint64]bool{}, notify: make(chan struct{}, 1024)}
	srv := grpc.NewServer(clusterauth.NewGuard(secret).ServerOptions()...)
	gatev1.RegisterPushServer(srv, g)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	if err := rdb.HSet(ctx, rediskey.Gate(id), "push_addr", g.Addr, "started_at", time.Now().UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	return g
}

// SetMissing makes the gate report conn as missing.
func (g *Gate) SetMissing(conn uint64) {
	g.mu.Lock()
	g.missing[conn] = true
	g.mu.Unlock()
}

// SetDropped makes the gate report conn as dropped (outbound queue full).
func (g *Gate) SetDropped(conn uint64) {
	g.mu.Lock()
	g.dropped[conn] = true
	g.mu.Unlock()
}

// SetFail makes every Push fail with Unavailable (after recording it).
func (g *Gate) SetFail(fail bool) {
	g.mu.Lock()
	g.fail = fail
	g.mu.Unlock()
}

// Push records the request.
func (g *Gate) Push(_ context.Context, req *gatev1.PushRequest) (*gatev1.PushReply, error) {
	g.mu.Lock()
	reply, err := g.pushLocked(req)
	g.mu.Unlock()
	g.notifyPush()
	return reply, err
}

// PushBatch records the batch and each of its items as a push, and answers
// every item like Push.
func (g *Gate) PushBatch(_ context.Context, req *gatev1.PushBatchRequest) (*gatev1.PushBatchReply, error) {
	g.mu.Lock()
	g.batches = append(g.batches, req)
	out := &gatev1.PushBatchReply{}
	var err error
	for _, item := range req.GetItems() {
		var r *gatev1.PushReply
		if r, err = g.pushLocked(item); err != nil {
			out = nil
			continue
		}
		if out != nil {
			out.Replies = append(out.Replies, r)
		}
	}
	g.mu.Unlock()
	g.notifyPush()
	return out, err
}

func (g *Gate) pushLocked(req *gatev1.PushRequest) (*gatev1.PushReply, error) {
	g.pushes = append(g.pushes, req)
	if g.fail {
		return nil, status.Error(codes.Unavailable, "gatetest: failing")
	}
	reply := &gatev1.PushReply{}
	for _, t := range req.GetTargets() {
		switch {
		case g.missing[t.GetConnId()]:
			reply.Missing = append(reply.Missing, t)
		case g.dropped[t.GetConnId()]:
			reply.Dropped = append(reply.Dropped, t)
		default:
			reply.Delivered++
		}
	}
	return reply, nil
}

func (g *Gate) notifyPush() {
	select {
	case g.notify <- struct{}{}:
	default:
	}
}

// Batches returns the recorded PushBatch requests.
func (g *Gate) Batches() []*gatev1.PushBatchRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*gatev1.PushBatchRequest(nil), g.batches...)
}

// Pushes returns the recorded requests.
func (g *Gate) Pushes() []*gatev1.PushRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*gatev1.PushRequest(nil), g.pushes...)
}

// WaitPushes waits until at least n pushes arrived or d passed.
func (g *Gate) WaitPushes(n int, d time.Duration) []*gatev1.PushRequest {
	deadline := time.After(d)
	for {
		if ps := g.Pushes(); len(ps) >= n {
			return ps
		}
		select {
		case <-g.notify:
		case <-deadline:
			return g.Pushes()
		}
	}
}

// Logic is a fake logic Internal server.
type Logic struct {
	logicv1.UnimplementedInternalServer
	Addr string

	mu    sync.Mutex
	calls []*logicv1.AppendMailboxRequest
	seq   map[int64]int64
	fail  bool
}

// StartLogic serves a fake Internal on 127.0.0.1:0, requiring secret. It
// stops when the test ends.
func StartLogic(t testing.TB, secret string) *Logic {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Logic{Addr: ln.Addr().String(), seq: map[int64]int64{}}
	srv := grpc.NewServer(clusterauth.NewGuard(secret).ServerOptions()...)
	logicv1.RegisterInternalServer(srv, l)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return l
}

// SetFail makes every AppendMailbox fail with Unavailable (after recording it).
func (l *Logic) SetFail(fail bool) {
	l.mu.Lock()
	l.fail = fail
	l.mu.Unlock()
}

// AppendMailbox records the request and assigns per-user seqs.
func (l *Logic) AppendMailbox(_ context.Context, req *logicv1.AppendMailboxRequest) (*logicv1.AppendMailboxReply, error) {
	l.mu.Lock()
	l.calls = append(l.calls, req)
	fail := l.fail
	reply := &logicv1.AppendMailboxReply{}
	if !fail {
		for _, e := range req.GetEvents() {
			l.seq[e.GetUserId()]++
			reply.Seqs = append(reply.Seqs, l.seq[e.GetUserId()])
		}
	}
	l.mu.Unlock()
	if fail {
		return nil, status.Error(codes.Unavailable, "gatetest: logic failing")
	}
	return reply, nil
}

// Calls returns the recorded requests.
func (l *Logic) Calls() []*logicv1.AppendMailboxRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*logicv1.AppendMailboxRequest(nil), l.calls...)
}

// Redis returns a client of the test binary's private Redis
// (testredis.Open), flushed at every call so each test starts from empty
// streams. A Redis that does not start fails the test.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	rdb := testredis.Open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatalf("flush test Redis at %s: %v", rdb.Options().Addr, err)
	}
	return rdb
}

// Pool returns a gate client pool over rdb for the gates Start runs with
// secret, trusting resolved addresses for a minute, closed when the test
// ends.
func Pool(t testing.TB, rdb redis.Cmdable, secret string) *gateclient.Pool {
	t.Helper()
	pool, err := gateclient.New(rdb, secret, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	return pool
}
