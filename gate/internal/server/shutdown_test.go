package server

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// cmdSlow is a command the slow fake logic answers after slowAnswer.
const (
	cmdSlow    uint16 = 98
	slowAnswer        = 300 * time.Millisecond
)

// slowLogic is fakeLogic whose answers to cmdSlow leave after slowAnswer.
type slowLogic struct{ *fakeLogic }

// slowStream delays cmdSlow answers; its own mutex keeps the delayed
// sends from overlapping the others.
type slowStream struct {
	logicv1.Gateway_ConnectServer
	mu sync.Mutex
}

func (s *slowStream) Send(f *logicv1.LogicFrame) error {
	if r := f.GetResponse(); r != nil && uint16(r.Command) == cmdSlow {
		go func() {
			time.Sleep(slowAnswer)
			s.mu.Lock()
			defer s.mu.Unlock()
			_ = s.Gateway_ConnectServer.Send(f)
		}()
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Gateway_ConnectServer.Send(f)
}

func (l slowLogic) Connect(ss logicv1.Gateway_ConnectServer) error {
	return l.fakeLogic.Connect(&slowStream{Gateway_ConnectServer: ss})
}

func startSlowLogic(t *testing.T) (*fakeLogic, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := newFakeLogic()
	gs := grpc.NewServer(clusterauth.NewGuard(testSecret).ServerOptions()...)
	logicv1.RegisterGatewayServer(gs, slowLogic{fl})
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return fl, ln.Addr().String()
}

// startShutdownGate is startGate with a kick window and a drain timeout.
func startShutdownGate(t *testing.T, logicAddr string, window, drain time.Duration) *Server {
	t.Helper()
	cfg := testGateConfig(logicAddr)
	cfg.ShutdownKickWindow = window
	return startGateDraining(t, cfg, drain)
}

// expectShutdownKick reads one frame and checks it is KICK server_shutdown.
func (c *client) expectShutdownKick() {
	c.t.Helper()
	a := c.read()
	var data protocol.Kick
	_ = json.Unmarshal(a.env.Data, &data)
	if a.Command != protocol.CmdKick || a.RequestID != 0 || data.Reason != ShutdownKickReason {
		c.t.Fatalf("want KICK %s, got %+v data %s", ShutdownKickReason, a.Header, a.env.Data)
	}
}

func TestShutdownKicksEveryConnectionSpreadOverTheWindowThenCloses(t *testing.T) {
	fl, addr := startLogic(t)
	const n, window = 8, 800 * time.Millisecond
	s := startShutdownGate(t, addr, window, 200*time.Millisecond)
	clients := make([]*client, n)
	for i := range clients {
		clients[i] = dial(t, s)
		clients[i].auth(int64(100+i), "dev-s")
	}

	start := time.Now()
	done := make(chan time.Duration, 1)
	go func() {
		_ = s.Shutdown(context.Background())
		done <- time.Since(start)
	}()
	var mu sync.Mutex
	var first, last time.Time
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// client.read fails the test from this goroutine only through
			// t.Fatalf, which is fine for reads that must not fail.
			c.expectShutdownKick()
			at := time.Now()
			c.expectClosed()
			mu.Lock()
			if first.IsZero() || at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if spread := last.Sub(first); spread < window/2 {
		t.Fatalf("the %d KICKs came within %v, want them spread over about %v", n, spread, window)
	}
	if s.Ready() == nil {
		t.Fatal("ready while shutting down")
	}
	select {
	case took := <-done:
		if took > s.ShutdownBound() {
			t.Fatalf("shutdown took %v, bound %v", took, s.ShutdownBound())
		}
	case <-time.After(s.ShutdownBound() + safety):
		t.Fatal("shutdown never returned")
	}
	for range n {
		select {
		case cl := <-fl.closed:
			if cl.Reason != "kicked: "+ShutdownKickReason {
				t.Fatalf("closed reason %q", cl.Reason)
			}
		case <-time.After(safety):
			t.Fatal("logic did not get Closed for every kicked connection")
		}
	}
}

func TestShutdownKickFollowsTheAnswerAlreadyWithLogic(t *testing.T) {
	fl, addr := startSlowLogic(t)
	s := startShutdownGate(t, addr, 0, 2*time.Second)
	c := dial(t, s)
	c.auth(7, "dev-slow-answer")
	c.send(cmdSlow, 5, 5, []byte(`{"n":1}`))
	deadline := time.Now().Add(safety)
	for fl.lastRequest(cmdSlow) == nil {
		if time.Now().After(deadline) {
			t.Fatal("logic never got the request")
		}
		time.Sleep(5 * time.Millisecond)
	}

	go func() { _ = s.Shutdown(context.Background()) }()
	// The answer logic sends after the shutdown began still comes first,
	// then the KICK, then the close.
	c.expect(cmdSlow, 5, 5, errcode.OK)
	c.expectShutdownKick()
	c.expectClosed()
}

func TestShutdownRefusesNewRequestsOfALeavingConnection(t *testing.T) {
	_, addr := startLogic(t)
	s := startShutdownGate(t, addr, time.Hour, time.Second)
	c := dial(t, s)
	c.auth(9, "dev-leaving")
	var conn *Conn
	s.table.Range(func(c *Conn) bool { conn = c; return false })
	conn.leaving.Store(true)
	c.send(protocol.CmdSyncInbox, 2, 2, []byte(`{}`))
	c.expect(protocol.CmdSyncInbox, 2, 2, errcode.Busy)
	if n := conn.awaiting.Load(); n != 0 {
		t.Fatalf("awaiting %d after a refused request", n)
	}
}
