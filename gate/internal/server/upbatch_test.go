package server

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/pkg/batch"
	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// recordingStream is the client side of a Gateway stream that records
// what the send loop sends.
type recordingStream struct {
	grpc.BidiStreamingClient[logicv1.GateFrame, logicv1.LogicFrame]
	sent []*logicv1.GateFrame
}

func (r *recordingStream) Send(f *logicv1.GateFrame) error {
	r.sent = append(r.sent, f)
	return nil
}

// req and closedItem build queue items whose names tell them apart:
// "r<conn>.<request id>" and "c<conn>".
func req(conn, id uint64, bodySize int) upItem {
	return upItem{req: &logicv1.Request{ConnId: conn, Command: uint32(protocol.CmdSendMessage), RequestId: id, Body: bytes.Repeat([]byte("x"), bodySize)}}
}

func closedItem(conn uint64) upItem {
	return upItem{closed: &logicv1.Closed{ConnId: conn, Reason: "gone"}}
}

func itemName(it upItem) string {
	if it.req != nil {
		return fmt.Sprintf("r%d.%d", it.req.ConnId, it.req.RequestId)
	}
	return fmt.Sprintf("c%d", it.closed.ConnId)
}

// frameShape names a sent frame: "R:<item>" and "C:<item>" for a lone
// Request or Closed, "B:<item>,<item>,…" for a batch.
func frameShape(t *testing.T, f *logicv1.GateFrame) string {
	t.Helper()
	switch k := f.Kind.(type) {
	case *logicv1.GateFrame_Request:
		return "R:" + itemName(upItem{req: k.Request})
	case *logicv1.GateFrame_Closed:
		return "C:" + itemName(upItem{closed: k.Closed})
	case *logicv1.GateFrame_Batch:
		if len(k.Batch.Events) < 2 {
			t.Errorf("a batch of %d events: a lone item must go as itself", len(k.Batch.Events))
		}
		if n := proto.Size(f); n > batch.StreamBytes+16 {
			t.Errorf("a batch of %d bytes, over the %d bound", n, batch.StreamBytes)
		}
		names := make([]string, len(k.Batch.Events))
		for i, ev := range k.Batch.Events {
			names[i] = itemName(upItem{req: ev.GetRequest(), closed: ev.GetClosed()})
		}
		return "B:" + strings.Join(names, ",")
	}
	t.Fatalf("unexpected frame %v", f)
	return ""
}

func TestSendQueuedBatches(t *testing.T) {
	many := func(n int) []upItem {
		out := make([]upItem, n)
		for i := range out {
			out[i] = req(1, uint64(i+1), 10)
		}
		return out
	}
	names := func(from, to int) string {
		var b strings.Builder
		for i := from; i <= to; i++ {
			if i > from {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "r1.%d", i)
		}
		return b.String()
	}
	tests := []struct {
		name    string
		batches bool // logic said Welcome
		first   upItem
		queued  []upItem
		want    []string
		left    int // items still queued after one sendQueued
	}{
		{name: "lone request goes at once, as itself", batches: true, first: req(1, 1, 10), want: []string{"R:r1.1"}},
		{name: "lone closed goes as itself", batches: true, first: closedItem(1), want: []string{"C:c1"}},
		{name: "drains what is queued in queue order, Closed in place", batches: true,
			first: req(1, 1, 10), queued: []upItem{req(2, 1, 10), req(1, 2, 10), closedItem(1), req(2, 2, 10)},
			want: []string{"B:r1.1,r2.1,r1.2,c1,r2.2"}},
		{name: "logic without Welcome gets one item per frame, the rest next turn", batches: false,
			first: req(1, 1, 10), queued: []upItem{closedItem(1), req(2, 1, 10)},
			want: []string{"R:r1.1"}, left: 2},
		{name: "count bound leaves the rest for the next turn", batches: true,
			first: req(1, 1, 10), queued: many(batch.StreamItems + 5)[1:],
			want: []string{"B:" + names(1, batch.StreamItems)}, left: 5},
		{name: "bytes bound starts a new frame", batches: true,
			first: req(1, 1, 100<<10), queued: []upItem{req(1, 2, 100<<10), req(1, 3, 100<<10), req(1, 4, 10)},
			want: []string{"B:r1.1,r1.2", "B:r1.3,r1.4"}},
		{name: "oversized item goes alone, order kept", batches: true,
			first: req(1, 1, 10), queued: []upItem{req(1, 2, 300<<10), req(1, 3, 10), req(1, 4, 10)},
			want: []string{"R:r1.1", "R:r1.2", "B:r1.3,r1.4"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &Metrics{}
			st := &stream{u: &Upstream{metrics: m}, sendq: make(chan upItem, 256)}
			st.batches.Store(tc.batches)
			for _, it := range tc.queued {
				st.sendq <- it
			}
			cs := &recordingStream{}
			if err := st.sendQueued(cs, tc.first); err != nil {
				t.Fatal(err)
			}
			got := make([]string, len(cs.sent))
			for i, f := range cs.sent {
				got[i] = frameShape(t, f)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("frames\n%v\nwant\n%v", got, tc.want)
			}
			if len(st.sendq) != tc.left {
				t.Fatalf("%d items left queued, want %d", len(st.sendq), tc.left)
			}
			if m.UpstreamFrames.Load() != uint64(len(tc.want)) || m.UpstreamItems.Load() != uint64(1+len(tc.queued)-tc.left) {
				t.Fatalf("metrics: %d frames %d items", m.UpstreamFrames.Load(), m.UpstreamItems.Load())
			}
			for i, it := range st.buf[:cap(st.buf)] {
				if it != (upItem{}) {
					t.Fatalf("send buffer keeps item %d after sending", i)
				}
			}
		})
	}
}

// TestUpItemSizeIsExact checks the byte bound counts what goes on the
// wire: a batch encodes to exactly the sum of its items' sizes.
func TestUpItemSizeIsExact(t *testing.T) {
	items := []upItem{
		req(1, 1, 0), req(1<<40, 1<<50, 200), closedItem(3), req(2, 2, 70<<10),
		{req: &logicv1.Request{ConnId: 9, Session: &logicv1.Session{UserId: 5, DeviceId: "phone", Platform: "ios", SinceMs: 1}, RealIp: "10.0.0.1", Body: []byte("{}")}},
	}
	sum := 0
	for _, it := range items {
		sum += upItemSize(it)
	}
	f := gateFrame(items)
	if got := proto.Size(f.GetBatch()); got != sum {
		t.Fatalf("GateBatch encodes to %d bytes, items sum to %d", got, sum)
	}
}

// The rest of the gate's tests talk to a fake logic that never sends
// Welcome, so they also show the gate works unbatched with a logic that
// predates batches. TestLogicBatchesAnswered runs the batched path: a logic
// that answers several requests in one LogicBatch.
func TestLogicBatchesAnswered(t *testing.T) {
	const conns, pipelined = 6, 12
	fl := newFakeLogic()
	bl := &batchingLogic{fakeLogic: fl, flushAt: conns}
	cfg := testGateConfig(startGatewayServer(t, bl))
	cfg.StreamsPerLogic = 1 // every request on the stream whose batches are counted
	s := startGate(t, cfg)

	// Every AUTH is answered only once all are in, in one LogicBatch.
	clients := make([]*client, conns)
	for i := range clients {
		clients[i] = dial(t, s)
		clients[i].send(protocol.CmdAuth, 1, 1, []byte(fmt.Sprintf(`{"token":"user:%d","device_id":"dev-b%d","platform":"test"}`, i+1, i)))
	}
	for _, c := range clients {
		c.expect(protocol.CmdAuth, 1, 1, errcode.OK)
	}
	// Pipelined requests of one connection come back in order.
	bl.setFlushAt(pipelined)
	c := clients[0]
	for i := range pipelined {
		c.send(protocol.CmdGenerateMsgID, uint64(100+i), uint32(i), []byte(`{}`))
	}
	for i := range pipelined {
		c.expect(protocol.CmdGenerateMsgID, uint64(100+i), uint32(i), errcode.OK)
	}
	if got := bl.batchesSent(); got != 2 {
		t.Fatalf("logic sent %d LogicBatch frames, want 2", got)
	}
	if !s.up.streams[0].batches.Load() {
		t.Fatal("the gate did not take Welcome: it would never send batches")
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if len(fl.hellos) == 0 || !fl.hellos[0].GetBatches() {
		t.Fatal("Hello did not offer batches")
	}
}

// batchingLogic runs fakeLogic's answers over a stream that speaks
// batches: it sends Welcome, unpacks GateBatch frames into the Requests and
// Closed events fakeLogic reads, and holds Responses until flushAt of them
// can go in one LogicBatch.
type batchingLogic struct {
	*fakeLogic
	mu      sync.Mutex
	flushAt int
	batches int
}

func (b *batchingLogic) setFlushAt(n int) {
	b.mu.Lock()
	b.flushAt = n
	b.mu.Unlock()
}

func (b *batchingLogic) batchesSent() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.batches
}

func (b *batchingLogic) Connect(ss logicv1.Gateway_ConnectServer) error {
	return b.fakeLogic.Connect(&batchingServerStream{Gateway_ConnectServer: ss, l: b})
}

type batchingServerStream struct {
	logicv1.Gateway_ConnectServer
	l       *batchingLogic
	pending []*logicv1.GateFrame
	held    []*logicv1.Response
}

func (s *batchingServerStream) Recv() (*logicv1.GateFrame, error) {
	for len(s.pending) == 0 {
		f, err := s.Gateway_ConnectServer.Recv()
		if err != nil {
			return nil, err
		}
		switch k := f.Kind.(type) {
		case *logicv1.GateFrame_Hello:
			if k.Hello.GetBatches() {
				if err := s.Gateway_ConnectServer.Send(&logicv1.LogicFrame{Kind: &logicv1.LogicFrame_Welcome{Welcome: &logicv1.Welcome{Batches: true}}}); err != nil {
					return nil, err
				}
			}
			return f, nil
		case *logicv1.GateFrame_Batch:
			for _, ev := range k.Batch.GetEvents() {
				if r := ev.GetRequest(); r != nil {
					s.pending = append(s.pending, &logicv1.GateFrame{Kind: &logicv1.GateFrame_Request{Request: r}})
				} else {
					s.pending = append(s.pending, &logicv1.GateFrame{Kind: &logicv1.GateFrame_Closed{Closed: ev.GetClosed()}})
				}
			}
		default:
			return f, nil
		}
	}
	f := s.pending[0]
	s.pending = s.pending[1:]
	return f, nil
}

// Send is called only from fakeLogic's Connect loop (under its stream's
// mutex), so held needs no lock of its own.
func (s *batchingServerStream) Send(f *logicv1.LogicFrame) error {
	r := f.GetResponse()
	if r == nil {
		return s.Gateway_ConnectServer.Send(f)
	}
	s.held = append(s.held, r)
	s.l.mu.Lock()
	full := len(s.held) >= s.l.flushAt
	if full {
		s.l.batches++
	}
	s.l.mu.Unlock()
	if !full {
		return nil
	}
	out := &logicv1.LogicFrame{Kind: &logicv1.LogicFrame_Batch{Batch: &logicv1.LogicBatch{Responses: s.held}}}
	s.held = nil
	return s.Gateway_ConnectServer.Send(out)
}

// startGatewayServer serves gw on a local port and returns its address.
func startGatewayServer(t *testing.T, gw logicv1.GatewayServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(clusterauth.NewGuard(testSecret).ServerOptions()...)
	logicv1.RegisterGatewayServer(gs, gw)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// TestLogicWithoutWelcomeGetsOneItemPerFrame: a logic that predates batches
// (fakeLogic ignores GateBatch frames) still gets every pipelined request.
func TestLogicWithoutWelcomeGetsOneItemPerFrame(t *testing.T) {
	fl, addr := startLogic(t)
	cfg := testGateConfig(addr)
	cfg.StreamsPerLogic = 1
	s := startGate(t, cfg)
	c := dial(t, s)
	c.auth(7, "dev-old")
	const pipelined = 20
	for i := range pipelined {
		c.send(protocol.CmdGenerateMsgID, uint64(100+i), uint32(i), []byte(`{}`))
	}
	for i := range pipelined {
		c.expect(protocol.CmdGenerateMsgID, uint64(100+i), uint32(i), errcode.OK)
	}
	if s.up.streams[0].batches.Load() {
		t.Fatal("batching on without logic's Welcome")
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if len(fl.requests) != 1+pipelined {
		t.Fatalf("logic saw %d requests, want %d", len(fl.requests), 1+pipelined)
	}
}
