package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/tests/framework"
)

// Users on two different gates exchange 200 messages each way: each side
// receives every message exactly once, in MsgId order, and every SEND_ACK
// names a committed row.
func TestExchangeAcrossGates(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2})
	const n = 200
	users := []int64{1001, 1002}
	conns := []*client.Conn{c.Login(t, 0, 1001, "phone-a"), c.Login(t, 1, 1002, "phone-b")}
	ctx := ctxT(t, 2*time.Minute)

	acks := make([][]protocol.SendAck, 2)
	got := make([][]protocol.Message, 2)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(2)
		go func() { // sender i
			defer wg.Done()
			for k := 0; k < n; k++ {
				ack, err := conns[i].Send(ctx, sendTo(users[1-i], fmt.Sprintf("m-%d-%d", i, k), text(t, fmt.Sprintf("hello %d from %d", k, i))))
				if err != nil {
					errs[i] = fmt.Errorf("sender %d message %d: %w", i, k, err)
					return
				}
				acks[i] = append(acks[i], ack)
			}
		}()
		go func() { // receiver i
			defer wg.Done()
			got[i], errs[2+i] = collect(conns[i], n, 90*time.Second)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for recv := range conns {
		sender := 1 - recv
		for k, ack := range acks[sender] {
			m := got[recv][k]
			if m.MsgID != ack.MsgID || m.ClientMsgID != fmt.Sprintf("m-%d-%d", sender, k) {
				t.Fatalf("receiver %d message %d: msg_id %s client_msg_id %q, want %s (lost, duplicated or reordered)",
					recv, k, m.MsgID, m.ClientMsgID, ack.MsgID)
			}
			if k > 0 && m.MsgID <= got[recv][k-1].MsgID {
				t.Fatalf("receiver %d: msg_id %s after %s", recv, m.MsgID, got[recv][k-1].MsgID)
			}
			if m.SenderID.Int64() != users[sender] || m.ConversationType != protocol.ConversationP2P || m.CreatedAt == 0 {
				t.Fatalf("receiver %d: bad message %+v", recv, m)
			}
		}
	}
	// Nothing more arrives: no duplicates, no echo of one's own messages.
	time.Sleep(500 * time.Millisecond)
	noMessage(t, conns[0], "user 1001 after the exchange")
	noMessage(t, conns[1], "user 1002 after the exchange")

	conv := acks[0][0].ConversationID
	for i := range acks {
		for _, ack := range acks[i] {
			if ack.ConversationID != conv {
				t.Fatalf("two conversations for one pair: %s and %s", conv, ack.ConversationID)
			}
			if c.CountRows("SELECT COUNT(*) FROM t_messages WHERE id = ? AND conversation_id = ?", ack.MsgID.Int64(), conv.Int64()) != 1 {
				t.Fatalf("SEND_ACK msg_id %s is not a row of t_messages", ack.MsgID)
			}
		}
	}
	if rows := c.CountRows("SELECT COUNT(*) FROM t_messages WHERE conversation_id = ?", conv.Int64()); rows != 2*n {
		t.Fatalf("%d rows, want %d", rows, 2*n)
	}
}

// A user with two devices: the sending device gets SEND_ACK but no MESSAGE
// for its own message; the other device and the peer get the MESSAGE.
func TestSenderOtherDevices(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2})
	ctx := ctxT(t, time.Minute)
	phone := c.Login(t, 0, 2001, "phone")
	laptop := c.Login(t, 1, 2001, "laptop")
	peer := c.Login(t, 1, 2002, "peer")

	ack, err := phone.Send(ctx, sendTo(2002, "own-1", text(t, "from my phone")))
	if err != nil {
		t.Fatal(err)
	}
	for name, conn := range map[string]*client.Conn{"laptop": laptop, "peer": peer} {
		m, err := nextMessage(conn, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m.MsgID != ack.MsgID || m.SenderID.Int64() != 2001 {
			t.Fatalf("%s got %+v, want msg %s", name, m, ack.MsgID)
		}
	}
	// The peer answers; the phone's next MESSAGE must be that answer, not
	// its own message (one conversation's pushes are ordered).
	reply, err := peer.Send(ctx, sendTo(2001, "reply-1", text(t, "hi phone")))
	if err != nil {
		t.Fatal(err)
	}
	m, err := nextMessage(phone, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.MsgID != reply.MsgID {
		t.Fatalf("phone got msg %s (sender %s), want only the reply %s", m.MsgID, m.SenderID, reply.MsgID)
	}
	if m, err := nextMessage(laptop, 10*time.Second); err != nil || m.MsgID != reply.MsgID {
		t.Fatalf("laptop: %+v %v", m, err)
	}
}

// Four devices of one user connect, then one sends: every other device
// receives, whatever gate it is on.
func TestEveryRecipientDevice(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2})
	ctx := ctxT(t, time.Minute)
	var devices []*client.Conn
	for i := 0; i < 4; i++ {
		devices = append(devices, c.Login(t, i%2, 3002, fmt.Sprintf("dev-%d", i)))
	}
	sender := c.Login(t, 0, 3001, "s")
	ack, err := sender.Send(ctx, sendTo(3002, "x1", text(t, "to all your devices")))
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range devices {
		if m, err := nextMessage(d, 10*time.Second); err != nil || m.MsgID != ack.MsgID {
			t.Fatalf("device %d: %+v %v", i, m, err)
		}
	}
}
