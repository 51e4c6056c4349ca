package gateway_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/auth"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// TestKickEventSyncAndResync: a replaced connection gets a KICK mailbox
// event that SYNC_INBOX returns (answered as 11); SYNC_MESSAGES of a
// stranger's conversation is 40301 on command 12; after Redis lost the
// gate key the refresh sends Resync, and Rebind restores routes without
// overwriting newer ones.
func TestKickEventSyncAndResync(t *testing.T) {
	e := newEnv(t, 34)
	e.reg.Refresh = 100 * time.Millisecond
	_, pushAddr := startFakePush(t)
	_, cc := startLogic(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := logicv1.NewGatewayClient(cc).Connect(withSecret(ctx))
	if err != nil {
		t.Fatal(err)
	}
	g := &gateStream{t: t, s: raw}
	gateID := testenv.RandomName("gate-r-")
	g.send(&logicv1.GateFrame{Kind: &logicv1.GateFrame_Hello{Hello: &logicv1.Hello{GateId: gateID, PushAddr: pushAddr}}})

	a, b := testenv.RandomUserID(), testenv.RandomUserID()
	authOn := func(conn uint64, uid int64, dev string) *logicv1.Session {
		t.Helper()
		g.request(&logicv1.Request{ConnId: conn, Command: 1, RequestId: conn, Body: authBody(mint(t, secret, uid, "", time.Hour, time.Now()), dev)})
		resp := g.recv()
		if r := decode(t, resp.Body); r.Code != errcode.OK || resp.Bind == nil {
			t.Fatalf("AUTH on %d: %s %s", conn, r.Code, r.Msg)
		}
		return resp.Bind
	}
	authOn(1, a, "phone")
	s2 := authOn(2, a, "phone") // replaces conn 1: KICK event for "phone"

	g.request(&logicv1.Request{ConnId: 2, Session: s2, Command: uint32(protocol.CmdSyncInbox), RequestId: 9, Body: []byte(`{"dialog_cursor":"0","mailbox_seq":"0"}`)})
	resp := g.recv()
	r := decode(t, resp.Body)
	var data protocol.SyncInboxReply
	if err := json.Unmarshal(r.Data, &data); err != nil || r.Code != errcode.OK || resp.Command != uint32(protocol.CmdSyncInboxFinish) {
		t.Fatalf("sync inbox: command %d code %s data %s", resp.Command, r.Code, r.Data)
	}
	var kp protocol.KickPayload
	if len(data.Events) != 1 || data.Events[0].EventType != protocol.EventKick || json.Unmarshal(data.Events[0].Payload, &kp) != nil ||
		kp.Reason != auth.KickReason || data.MailboxSeq != 1 {
		t.Fatalf("events %s", r.Data)
	}
	g.request(&logicv1.Request{ConnId: 2, Session: s2, Command: uint32(protocol.CmdSyncMessages), RequestId: 10, Body: []byte(`{"conversation_id":"42"}`)})
	resp = g.recv()
	if r := decode(t, resp.Body); r.Code != errcode.Forbidden || resp.Command != uint32(protocol.CmdSyncMessages) {
		t.Fatalf("sync messages of a stranger: command %d code %s", resp.Command, r.Code)
	}

	// Redis loses the gate key and the routes; meanwhile b logged in anew
	// elsewhere.
	e.rdb.Del(ctx, rediskey.Gate(gateID), rediskey.Route(a))
	newer := route.Entry{GateID: "other-gate", ConnID: 99, SinceMs: time.Now().UnixMilli()}.String()
	e.rdb.HSet(ctx, rediskey.Route(b), "web", newer)
	f, err := raw.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if f.GetResync() == nil {
		t.Fatalf("expected Resync, got %v", f)
	}
	sb := &logicv1.Session{UserId: b, DeviceId: "web", SinceMs: 1}
	g.send(&logicv1.GateFrame{Kind: &logicv1.GateFrame_Rebind{Rebind: &logicv1.Rebind{Bindings: []*logicv1.Binding{
		{ConnId: 2, Session: s2}, {ConnId: 7, Session: sb},
	}}}})
	want := route.Entry{GateID: gateID, ConnID: 2, SinceMs: s2.SinceMs}.String()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, _ := e.rdb.HGet(ctx, rediskey.Route(a), "phone").Result()
		if got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("route not restored: %q, want %q", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got, _ := e.rdb.HGet(ctx, rediskey.Route(b), "web").Result(); got != newer {
		t.Fatalf("rebind overwrote a newer route: %q", got)
	}
	if n, _ := e.rdb.Exists(ctx, rediskey.Gate(gateID)).Result(); n != 1 {
		t.Fatal("gate key not rewritten")
	}
}
