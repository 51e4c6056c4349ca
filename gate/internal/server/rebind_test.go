package server

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// collectBindings reads Rebind frames until want bindings arrived, and
// checks every one came on stream.
func collectBindings(t *testing.T, fl *fakeLogic, stream, want int) map[uint64]*logicv1.Session {
	t.Helper()
	got := map[uint64]*logicv1.Session{}
	deadline := time.After(safety)
	for len(got) < want {
		select {
		case rb := <-fl.rebinds:
			if rb.stream != stream {
				t.Fatalf("rebind on stream %d, want %d (the one that asked)", rb.stream, stream)
			}
			for _, b := range rb.rebind.GetBindings() {
				if _, dup := got[b.GetConnId()]; dup {
					t.Fatalf("conn %d reported twice in one pass", b.GetConnId())
				}
				got[b.GetConnId()] = b.GetSession()
			}
		case <-deadline:
			t.Fatalf("got %d bindings, want %d", len(got), want)
		}
	}
	select {
	case rb := <-fl.rebinds:
		t.Fatalf("unexpected extra rebind %v", rb.rebind)
	case <-time.After(100 * time.Millisecond):
	}
	return got
}

func TestResyncRebindsAuthenticatedConnections(t *testing.T) {
	fl, addr := startLogic(t)
	s := startGate(t, testGateConfig(addr))
	devices := map[string]int64{"dev-r1": 1, "dev-r2": 2, "dev-r3": 2}
	clients := map[string]*client{}
	for dev, uid := range devices {
		c := dial(t, s)
		c.auth(uid, dev)
		clients[dev] = c
	}
	unauth := dial(t, s) // connected, never authenticated: not a route
	unauth.send(protocol.CmdHeartbeat, 1, 1, nil)
	unauth.expectHeartbeat(1, 1)

	fl.resync(t, 0)
	got := collectBindings(t, fl, 0, len(devices))
	for dev, uid := range devices {
		sess, ok := got[fl.connID(t, dev)]
		if !ok || sess.GetUserId() != uid || sess.GetDeviceId() != dev || sess.GetPlatform() != "test" || sess.GetSinceMs() == 0 {
			t.Fatalf("binding of %s: %v", dev, sess)
		}
	}

	// Requests keep flowing while and after a resync.
	c := clients["dev-r1"]
	c.send(protocol.CmdGenerateMsgID, 2, 2, []byte(`{}`))
	c.expect(protocol.CmdGenerateMsgID, 2, 2, errcode.OK)

	// A closed connection is no longer reported.
	_ = clients["dev-r3"].nc.Close()
	select {
	case <-fl.closed:
	case <-time.After(safety):
		t.Fatal("no Closed for dev-r3")
	}
	fl.resync(t, 0)
	if got := collectBindings(t, fl, 0, 2); got[fl.connID(t, "dev-r3")] != nil {
		t.Fatal("closed connection rebound")
	}
}

// bindingSource is a responder with a fixed set of bindings.
type bindingSource struct{ n int }

func (*bindingSource) onResponse(context.Context, *logicv1.Response, *pendingReq) {}
func (*bindingSource) onBusy(context.Context, *pendingReq)                        {}
func (b *bindingSource) rangeBindings(fn func(*logicv1.Binding) bool) {
	for i := range b.n {
		if !fn(&logicv1.Binding{ConnId: uint64(i + 1), Session: &logicv1.Session{UserId: int64(i + 1)}}) {
			return
		}
	}
}

func testStream(n int) *stream {
	u := &Upstream{log: zap.NewNop(), metrics: NewMetrics(prometheus.NewRegistry()), handler: &bindingSource{n: n}}
	return &stream{u: u, addr: "test"}
}

func TestRebindBatches(t *testing.T) {
	for _, n := range []int{0, 1, RebindBatch, RebindBatch + 1, 3*RebindBatch + 17} {
		st := testStream(n)
		out := make(chan *logicv1.GateFrame)
		var sizes []int
		var ids []uint64
		done := make(chan struct{})
		go func() {
			defer close(done)
			for f := range out {
				bs := f.GetRebind().GetBindings()
				sizes = append(sizes, len(bs))
				for _, b := range bs {
					ids = append(ids, b.GetConnId())
				}
			}
		}()
		sent, ok := st.rebind(context.Background(), out)
		close(out)
		<-done
		if !ok || sent != n || len(ids) != n {
			t.Fatalf("n=%d: sent %d ok %v ids %d", n, sent, ok, len(ids))
		}
		for i, sz := range sizes {
			if sz == 0 || sz > RebindBatch || (i < len(sizes)-1 && sz != RebindBatch) {
				t.Fatalf("n=%d: batch sizes %v", n, sizes)
			}
		}
		if !slices.IsSorted(ids) {
			t.Fatalf("n=%d: bindings out of order", n)
		}
	}
}

func TestRebindGivesUpWhenStreamEnds(t *testing.T) {
	st := testStream(10 * RebindBatch)
	out := make(chan *logicv1.GateFrame)
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		sent int
		ok   bool
	}
	res := make(chan result, 1)
	go func() {
		sent, ok := st.rebind(ctx, out)
		res <- result{sent, ok}
	}()
	select {
	case <-out: // the send loop takes one frame, then the stream dies
	case <-time.After(safety):
		cancel()
		t.Fatalf("rebind sent no frame within %v", safety)
	}
	cancel()
	select {
	case r := <-res:
		if r.ok || r.sent != RebindBatch {
			t.Fatalf("sent %d ok %v, want %d false", r.sent, r.ok, RebindBatch)
		}
	case <-time.After(safety):
		t.Fatal("rebind kept waiting on a dead stream")
	}
}

func TestSignalCommandsForwardedAndPushed(t *testing.T) {
	fl, addr := startLogic(t)
	s := startGate(t, testGateConfig(addr))
	pc := pushClient(t, s)
	c := dial(t, s)
	c.auth(7, "dev-s")

	// READ, RECALL, SYNC_*, DELETE and CONVERSATION_SETTINGS go to logic
	// with the session.
	for i, cmd := range []uint16{8, 9, 10, 12, 15, 16} {
		req := uint64(10 + i)
		c.send(cmd, req, uint32(req), []byte(`{"conversation_id":"1"}`))
		c.expect(cmd, req, uint32(req), errcode.OK)
		r := fl.lastRequest(cmd)
		if r == nil || r.GetSession().GetUserId() != 7 || string(r.GetBody()) != `{"conversation_id":"1"}` {
			t.Fatalf("command %d forwarded as %v", cmd, r)
		}
	}

	// Signal pushes pass through Push like MESSAGE.
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()
	target := &gatev1.Target{ConnId: fl.connID(t, "dev-s"), UserId: 7, DeviceId: "dev-s"}
	var last uint32
	for _, cmd := range []uint16{8, 9, 15, 16} {
		body := envelope.OK("AAAAAAAAAAA", []byte(`{"conversation_id":"1","msg_id":"2"}`))
		r, err := pc.Push(ctx, &gatev1.PushRequest{Targets: []*gatev1.Target{target}, Command: uint32(cmd), Body: body})
		if err != nil || r.GetDelivered() != 1 {
			t.Fatalf("push %d: %v %v", cmd, r, err)
		}
		a := c.read()
		if a.Command != cmd || a.RequestID != 0 || a.SequenceID <= last || !reflect.DeepEqual(string(a.env.Data), `{"conversation_id":"1","msg_id":"2"}`) {
			t.Fatalf("push frame %+v data %s", a.Header, a.env.Data)
		}
		last = a.SequenceID
	}
}
