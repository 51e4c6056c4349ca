package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/rediskey"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// batchGate is a gate that offered batches: it reads answers whether they
// come alone or in LogicBatch frames, one at a time.
type batchGate struct {
	*gateStream
	held []*logicv1.Response
	// batches counts the LogicBatch frames received.
	batches int
}

func (g *batchGate) next() *logicv1.Response {
	g.t.Helper()
	for len(g.held) == 0 {
		f, err := g.s.Recv()
		if err != nil {
			g.t.Fatal(err)
		}
		switch k := f.Kind.(type) {
		case *logicv1.LogicFrame_Response:
			g.held = append(g.held, k.Response)
		case *logicv1.LogicFrame_Batch:
			g.batches++
			g.held = append(g.held, k.Batch.Responses...)
		default:
			g.t.Fatalf("unexpected frame %v", f)
		}
	}
	r := g.held[0]
	g.held = g.held[1:]
	return r
}

func batchOf(events ...*logicv1.GateEvent) *logicv1.GateFrame {
	return &logicv1.GateFrame{Kind: &logicv1.GateFrame_Batch{Batch: &logicv1.GateBatch{Events: events}}}
}

func reqEvent(r *logicv1.Request) *logicv1.GateEvent {
	return &logicv1.GateEvent{Kind: &logicv1.GateEvent_Request{Request: r}}
}

func closedEvent(c *logicv1.Closed) *logicv1.GateEvent {
	return &logicv1.GateEvent{Kind: &logicv1.GateEvent_Closed{Closed: c}}
}

// TestConnectStreamBatches: a gate whose Hello offers batches gets Welcome
// first; the Requests and Closed events of a GateBatch are handled exactly
// as if each came alone, in the batch's order per connection. (The old,
// one-per-frame stream is TestConnectStream, whose Hello offers none: it
// would fail on a Welcome or a LogicBatch.)
func TestConnectStreamBatches(t *testing.T) {
	e := newEnv(t, 36)
	_, pushAddr := startFakePush(t)
	_, cc := startLogic(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := logicv1.NewGatewayClient(cc).Connect(withSecret(ctx))
	if err != nil {
		t.Fatal(err)
	}
	g := &batchGate{gateStream: &gateStream{t: t, s: raw}}
	gateID := testenv.RandomName("gate-b-")
	g.send(&logicv1.GateFrame{Kind: &logicv1.GateFrame_Hello{Hello: &logicv1.Hello{GateId: gateID, PushAddr: pushAddr, Batches: true}}})
	f, err := raw.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !f.GetWelcome().GetBatches() {
		t.Fatalf("first frame %v, want Welcome{batches}", f)
	}

	// Two AUTHs in one batch.
	a, b := testenv.RandomUserID(), testenv.RandomUserID()
	g.send(batchOf(
		reqEvent(&logicv1.Request{ConnId: 1, Command: 1, RequestId: 1, Body: authBody(mint(t, secret, a, "", time.Hour, time.Now()), "phone")}),
		reqEvent(&logicv1.Request{ConnId: 2, Command: 1, RequestId: 1, Body: authBody(mint(t, secret, b, "", time.Hour, time.Now()), "web")}),
	))
	sessions := map[uint64]*logicv1.Session{}
	for range 2 {
		r := g.next()
		if d := decode(t, r.Body); d.Code != errcode.OK || r.Bind == nil {
			t.Fatalf("AUTH on %d: %s %s", r.ConnId, d.Code, d.Msg)
		}
		sessions[r.ConnId] = r.Bind
	}
	if len(sessions) != 2 {
		t.Fatalf("AUTH answers for %v", sessions)
	}

	// Back-to-back sends of both connections in one batch, then conn 1's
	// Closed and one more request of conn 1 behind it: each connection's
	// answers come in its order with increasing MsgIds, and the Closed is
	// handled after conn 1's sends and before its last request.
	const n = 20
	var events []*logicv1.GateEvent
	for i := range n {
		conn := uint64(1 + i%2)
		to := b
		if conn == 2 {
			to = a
		}
		body, _ := json.Marshal(map[string]any{"to_user_id": fmt.Sprint(to), "client_msg_id": fmt.Sprint("bm", i), "message_type": 1, "content": map[string]any{"t": 1, "text": "hi"}})
		events = append(events, reqEvent(&logicv1.Request{ConnId: conn, Session: sessions[conn], Command: 4, RequestId: uint64(100 + i), Body: body}))
	}
	events = append(events,
		closedEvent(&logicv1.Closed{ConnId: 1, Session: sessions[1], Reason: "gone"}),
		reqEvent(&logicv1.Request{ConnId: 1, Session: sessions[1], Command: 3, RequestId: 999}))
	g.send(batchOf(events...))
	lastID := map[uint64]int64{}
	lastReq := map[uint64]uint64{}
	for range n + 1 {
		r := g.next()
		if r.RequestId == 999 {
			// Conn 1's Closed was handled before this answer: its route is gone.
			if v, _ := e.rdb.HGet(ctx, rediskey.Route(a), "phone").Result(); v != "" {
				t.Fatalf("route of the closed connection %q, want none", v)
			}
			continue
		}
		d := decode(t, r.Body)
		if r.Command != 5 || d.Code != errcode.OK {
			t.Fatalf("send %d: command %d code %s %s", r.RequestId, r.Command, d.Code, d.Msg)
		}
		if r.RequestId <= lastReq[r.ConnId] {
			t.Fatalf("conn %d: answer to %d after %d", r.ConnId, r.RequestId, lastReq[r.ConnId])
		}
		lastReq[r.ConnId] = r.RequestId
		var ack struct {
			MsgID json.Number `json:"msg_id"`
		}
		if err := json.Unmarshal(d.Data, &ack); err != nil {
			t.Fatalf("ack %s", d.Data)
		}
		id, _ := ack.MsgID.Int64()
		if id <= lastID[r.ConnId] {
			t.Fatalf("conn %d: msg id %d after %d", r.ConnId, id, lastID[r.ConnId])
		}
		lastID[r.ConnId] = id
	}
	t.Logf("answers came in %d LogicBatch frames", g.batches)
	if lastReq[1] != 100+n-2 || lastReq[2] != 100+n-1 {
		t.Fatalf("last answers %v", lastReq)
	}
}
