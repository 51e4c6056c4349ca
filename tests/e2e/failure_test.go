package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/tests/framework"
)

// Redis fails between the commit and the enqueue: no SEND_ACK; the retry
// of the same client_msg_id after Redis is back yields the same row and the
// message is pushed.
func TestEnqueueFailureThenRetry(t *testing.T) {
	c := framework.NewCluster(t, framework.Options{Gates: 2})
	ctx := ctxT(t, 2*time.Minute)
	sender := c.Login(t, 0, 6001, "s")
	peer := c.Login(t, 1, 6002, "p")
	logicAdmin := c.Logics[0].AdminAddr

	t.Run("enqueue made to fail", func(t *testing.T) {
		if err := framework.Failpoint(logicAdmin, "logic/send/beforeEnqueue", "error"); err != nil {
			t.Fatal(err)
		}
		req := sendTo(6002, "fp-1", text(t, "survives a failed enqueue"))
		reply, err := sender.Request(ctx, protocol.CmdSendMessage, req)
		if err != nil {
			t.Fatal(err)
		}
		if reply.Command != protocol.CmdSendMessage || reply.Envelope.Code != errcode.Busy {
			t.Fatalf("answer cmd %d code %s, want 4 / 50301", reply.Command, reply.Envelope.Code)
		}
		if n := c.CountRows("SELECT COUNT(*) FROM t_messages WHERE sender_id = 6001 AND client_msg_id = 'fp-1'"); n != 1 {
			t.Fatalf("the commit happened before the enqueue: want 1 row, have %d", n)
		}
		if _, err := nextMessage(peer, 500*time.Millisecond); err == nil {
			t.Fatal("a message that was never enqueued was pushed")
		}
		if err := framework.Failpoint(logicAdmin, "logic/send/beforeEnqueue", "off"); err != nil {
			t.Fatal(err)
		}
		ack, err := sender.Send(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var id int64
		if err := c.DB().QueryRow("SELECT id FROM t_messages WHERE sender_id = 6001 AND client_msg_id = 'fp-1'").Scan(&id); err != nil || id != ack.MsgID.Int64() {
			t.Fatalf("retry acked %s, row has %d (%v)", ack.MsgID, id, err)
		}
		if m, err := nextMessage(peer, 10*time.Second); err != nil || m.MsgID != ack.MsgID {
			t.Fatalf("peer: %+v %v", m, err)
		}
	})

	t.Run("redis stopped after commit", func(t *testing.T) {
		// Hold the send right after its commit, stop Redis in that window.
		if err := framework.Failpoint(logicAdmin, "logic/send/afterCommit", "sleep(1500)"); err != nil {
			t.Fatal(err)
		}
		req := sendTo(6002, "stop-1", text(t, "survives a Redis restart"))
		type answer struct {
			code errcode.Code
			cmd  uint16
			err  error
		}
		done := make(chan answer, 1)
		go func() {
			reply, err := sender.Request(ctx, protocol.CmdSendMessage, req)
			done <- answer{reply.Envelope.Code, reply.Command, err}
		}()
		time.Sleep(500 * time.Millisecond)
		if err := c.Redis.Stop(); err != nil {
			t.Fatal(err)
		}
		var a answer
		select {
		case a = <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("no answer within 20s to the SEND held at logic/send/afterCommit while Redis is stopped")
		}
		if a.err != nil {
			t.Fatal(a.err)
		}
		if a.code == errcode.OK || a.cmd == protocol.CmdSendAck {
			t.Fatal("SEND_ACK although the enqueue could not have succeeded")
		}
		if n := c.CountRows("SELECT COUNT(*) FROM t_messages WHERE sender_id = 6001 AND client_msg_id = 'stop-1'"); n != 1 {
			t.Fatalf("want the committed row, have %d", n)
		}
		if err := framework.Failpoint(logicAdmin, "logic/send/afterCommit", "off"); err != nil {
			t.Fatal(err)
		}
		if err := c.Redis.Start(); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var ack protocol.SendAck
		var err error
		for rctx.Err() == nil { // the client retries until Redis is reachable again
			if ack, err = sender.Send(rctx, req); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := c.CountRows("SELECT COUNT(*) FROM t_messages WHERE sender_id = 6001 AND client_msg_id = 'stop-1'"); n != 1 {
			t.Fatalf("retry duplicated the row: %d", n)
		}
		if m, err := nextMessage(peer, 15*time.Second); err != nil || m.MsgID != ack.MsgID {
			t.Fatalf("peer: %+v %v", m, err)
		}
	})
}

// A second AUTH of the same user and device on the other gate kicks the
// first connection: KICK, then close. The new connection gets the pushes.
func TestSameDeviceKick(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2})
	ctx := ctxT(t, time.Minute)
	old := c.Login(t, 0, 7001, "phone")
	other := c.Login(t, 0, 7001, "tablet")
	fresh := c.Login(t, 1, 7001, "phone")

	f, err := framework.NextPush(old, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if f.Command != protocol.CmdKick {
		t.Fatalf("old connection got command %d, want KICK", f.Command)
	}
	var kick protocol.Kick
	env, err := f.Envelope()
	if err != nil || env.Code != errcode.OK {
		t.Fatalf("kick envelope %+v %v", env, err)
	}
	if err := json.Unmarshal(env.Data, &kick); err != nil || kick.Reason == "" {
		t.Fatalf("kick reason %+v %v", kick, err)
	}
	select {
	case <-old.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("kicked connection not closed")
	}
	// The other device stays; the new phone connection gets messages.
	peer := c.Login(t, 0, 7002, "peer")
	ack, err := peer.Send(ctx, sendTo(7001, "after-kick", text(t, "to the new phone")))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := nextMessage(fresh, 10*time.Second); err != nil || m.MsgID != ack.MsgID {
		t.Fatalf("new phone connection: %+v %v", m, err)
	}
	if m, err := nextMessage(other, 10*time.Second); err != nil || m.MsgID != ack.MsgID {
		t.Fatalf("tablet: %+v %v", m, err)
	}
	// The kick is in the phone's mailbox (device-scoped), for a device that
	// was offline when it happened.
	page, err := fresh.SyncInbox(ctx, "0", "0", 50)
	if err != nil {
		t.Fatal(err)
	}
	kicks := 0
	for _, e := range page.Events {
		if e.EventType == client.EventKick {
			kicks++
		}
	}
	if kicks != 1 {
		t.Fatalf("phone mailbox has %d KICK events, want 1: %+v", kicks, page.Events)
	}
	if page, err := other.SyncInbox(ctx, "0", "0", 50); err != nil || len(page.Events) != 0 {
		t.Fatalf("tablet mailbox: %+v %v, want no events", page.Events, err)
	}
	// The route of the phone names the new connection on gate-2.
	r := c.Redis.Client()
	defer r.Close()
	v, err := r.HGet(ctx, "im:route:{7001}", "phone").Result()
	if err != nil || len(v) < 6 || v[:6] != "gate-2" {
		t.Fatalf("route of the phone = %q (%v), want gate-2|…", v, err)
	}
}
