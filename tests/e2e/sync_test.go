package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/tests/framework"
)

// pump folds every push of conn into rep until conn closes.
func pump(t *testing.T, conn *client.Conn, rep *framework.Replica) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for f := range conn.Pushes() {
			if err := rep.ApplyPush(f); err != nil {
				t.Errorf("push: %v", err)
			}
		}
	}()
	return &wg
}

// An offline device converges to exactly what an always-online device of
// the same user saw: B1 stays online (pushes, deletes), B2 is offline while
// 50 peers send 2,000 messages (some recalled); B1 deletes for B messages
// B2 already holds and new ones, and B2 comes back and syncs. Every device
// ends with exactly the SEND_ACKed messages: recalled ones as tombstones,
// the ones B deleted gone.
func TestOfflineConvergence(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 8})
	ctx := ctxT(t, 4*time.Minute)
	const userB = 20000
	const peers, total = 50, 2000

	b1 := c.Login(t, 0, userB, "b-online")
	online := framework.NewReplica()
	b2 := c.Login(t, 1, userB, "b-offline")
	offline := framework.NewReplica()
	var peerConns []*client.Conn
	for p := 0; p < peers; p++ {
		peerConns = append(peerConns, c.Login(t, p%2, int64(userB+1+p), "peer"))
	}
	// acked is every SEND_ACK, by msg_id.
	type sent struct {
		conn *client.Conn
		ack  protocol.SendAck
	}
	var mu sync.Mutex
	acked := map[int64]sent{}
	record := func(conn *client.Conn, ack protocol.SendAck) {
		mu.Lock()
		defer mu.Unlock()
		if _, dup := acked[ack.MsgID.Int64()]; dup {
			t.Errorf("msg_id %d acknowledged twice", ack.MsgID.Int64())
		}
		acked[ack.MsgID.Int64()] = sent{conn, ack}
	}
	// Everyone has history before B2 goes away.
	var pre []protocol.SendAck
	for p, pc := range peerConns {
		ack, err := pc.Send(ctx, sendTo(userB, fmt.Sprintf("pre-%d", p), text(t, "before")))
		if err != nil {
			t.Fatal(err)
		}
		pre = append(pre, ack)
		record(pc, ack)
	}
	waitQuiet(t, c)
	if err := online.Sync(ctx, b1); err != nil {
		t.Fatal(err)
	}
	pumped := pump(t, b1, online)
	if err := offline.Sync(ctx, b2); err != nil {
		t.Fatal(err)
	}
	for _, a := range pre {
		if _, ok := offline.Msgs[a.ConversationID.Int64()][a.MsgID.Int64()]; !ok {
			t.Fatalf("B2 does not hold msg %d before going offline", a.MsgID.Int64())
		}
	}
	_ = b2.Close()

	// The storm: 2,000 messages over 50 conversations, B1 answering now and
	// then.
	var order []int64 // storm msg_ids in ack order
	var wg sync.WaitGroup
	errs := make(chan error, peers+1)
	per := total / peers
	for p, pc := range peerConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < per; k++ {
				ack, err := pc.Send(ctx, sendTo(userB, fmt.Sprintf("m-%d-%d", p, k), text(t, fmt.Sprintf("peer %d says %d %s", p, k, strings.Repeat("x", k%70)))))
				if err != nil {
					errs <- err
					return
				}
				record(pc, ack)
				mu.Lock()
				order = append(order, ack.MsgID.Int64())
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() { // B1 replies in ten conversations
		defer wg.Done()
		for k := 0; k < 30; k++ {
			ack, err := b1.Send(ctx, sendTo(int64(userB+1+k%10), fmt.Sprintf("b-%d", k), text(t, "B answers")))
			if err != nil {
				errs <- err
				return
			}
			record(b1, ack)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	recalled, deleted := map[int64]bool{}, map[int64]bool{}
	recall := func(a sent) {
		if err := a.conn.Recall(ctx, a.ack.ConversationID.Int64(), a.ack.MsgID.Int64()); err != nil {
			t.Fatalf("recall: %v", err)
		}
		recalled[a.ack.MsgID.Int64()] = true
	}
	del := func(a sent) {
		if err := b1.Delete(ctx, a.ack.ConversationID.Int64(), a.ack.MsgID.Int64()); err != nil {
			t.Fatalf("delete: %v", err)
		}
		online.DeleteLocal(a.ack.ConversationID.Int64(), a.ack.MsgID.Int64())
		deleted[a.ack.MsgID.Int64()] = true
	}
	// Messages B2 already holds: five recalled by their senders (B2 learns
	// through RECALL events), five deleted by B on B1 (DELETE events).
	for p := 0; p < 5; p++ {
		recall(acked[pre[p].MsgID.Int64()])
		del(acked[pre[5+p].MsgID.Int64()])
	}
	// New ones: every 40th recalled, every 50th deleted.
	for i, id := range order {
		switch {
		case i%40 == 3:
			recall(acked[id])
		case i%50 == 7:
			del(acked[id])
		}
	}
	// B1 reads three conversations.
	for _, id := range order[:3] {
		a := acked[id]
		if _, err := b1.Read(ctx, a.ack.ConversationID.Int64(), a.ack.MsgID.Int64()); err != nil {
			t.Fatal(err)
		}
	}
	waitQuiet(t, c)

	// B2 comes back and syncs from its cursors.
	b2 = c.Login(t, 1, userB, "b-offline")
	if err := offline.Sync(ctx, b2); err != nil {
		t.Fatal(err)
	}
	if err := online.Sync(ctx, b1); err != nil {
		t.Fatal(err)
	}
	fresh := framework.NewReplica()
	b3 := c.Login(t, 0, userB, "b-fresh")
	if err := fresh.Sync(ctx, b3); err != nil {
		t.Fatal(err)
	}
	_ = b1.Close()
	waitGroupWithin(t, pumped, 10*time.Second, "B1's push reader to end after its connection closed")

	// The fresh device holds exactly the acknowledged messages, less the
	// deleted ones, with recalled ones as tombstones.
	held := 0
	for cid, msgs := range fresh.Msgs {
		for id, m := range msgs {
			held++
			a, ok := acked[id]
			switch {
			case !ok:
				t.Errorf("conversation %d: msg %d was never acknowledged", cid, id)
			case a.ack.ConversationID.Int64() != cid:
				t.Errorf("msg %d in conversation %d, acknowledged in %d", id, cid, a.ack.ConversationID.Int64())
			case deleted[id]:
				t.Errorf("msg %d was deleted by B and is still there", id)
			case recalled[id] && m.Status != protocol.StatusRecalled:
				t.Errorf("msg %d was recalled but has status %d", id, m.Status)
			case !recalled[id] && m.Status != protocol.StatusNormal:
				t.Errorf("msg %d has status %d", id, m.Status)
			}
		}
	}
	if want := len(acked) - len(deleted); held != want {
		for id, a := range acked {
			if _, ok := fresh.Msgs[a.ack.ConversationID.Int64()][id]; !ok && !deleted[id] {
				t.Errorf("acknowledged msg %d of conversation %d is missing", id, a.ack.ConversationID.Int64())
			}
		}
		t.Fatalf("a fresh device holds %d messages, want %d (%d acknowledged, %d deleted)", held, want, len(acked), len(deleted))
	}
	want := fresh.Snapshot()
	if got := offline.Snapshot(); got != want {
		t.Fatalf("offline device differs from a fresh full sync:\n%s", firstDiff(got, want))
	}
	if got := online.Snapshot(); got != want {
		t.Fatalf("online device differs from a fresh full sync:\n%s", firstDiff(got, want))
	}
	if len(fresh.Convs) != peers {
		t.Fatalf("%d conversations, want %d", len(fresh.Convs), peers)
	}
	// Unread equals MySQL truth for every conversation.
	for cid, conv := range fresh.Convs {
		want := c.CountRows(`SELECT COUNT(*) FROM t_messages m JOIN t_conversation_members cm
			ON cm.conversation_id = m.conversation_id AND cm.user_id = ?
			WHERE m.conversation_id = ? AND m.id > cm.last_read_msg_id AND m.sender_id <> ? AND m.status = 1
			AND NOT EXISTS (SELECT 1 FROM t_message_deletions d WHERE d.user_id = ? AND d.msg_id = m.id)`,
			userB, cid, userB, userB)
		if int(conv.Unread) != want {
			t.Fatalf("conversation %d: unread %d, MySQL says %d", cid, conv.Unread, want)
		}
	}
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n  got  %s\n  want %s", i+1, gl, wl)
		}
	}
	return "(equal)"
}

// waitQuiet waits until deliver has acknowledged every job.
func waitQuiet(t *testing.T, c *framework.Cluster) {
	t.Helper()
	waitNoPending(t, c, 8, 30*time.Second)
	time.Sleep(200 * time.Millisecond)
}

func inbox(t *testing.T, ctx context.Context, conn *client.Conn) map[int64]client.Conversation {
	t.Helper()
	p, err := conn.SyncInbox(ctx, "0", "0", 100)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]client.Conversation{}
	for _, cv := range p.Conversations {
		out[cv.ConversationID.Int64()] = cv
	}
	return out
}

// deliver dies after the list update and the pushes, before the ack; the
// restarted instance processes the job again and unread is still exact.
func TestRedeliveryCountsOnce(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4})
	ctx := ctxT(t, 2*time.Minute)
	a := c.Login(t, 0, 21001, "a")
	b := c.Login(t, 1, 21002, "b")
	first, err := a.Send(ctx, sendTo(21002, "r-1", text(t, "one")))
	if err != nil {
		t.Fatal(err)
	}
	waitNoPending(t, c, 4, 15*time.Second)
	conv := first.ConversationID.Int64()
	if got := inbox(t, ctx, b)[conv].Unread; got != 1 { // also builds B's list state
		t.Fatalf("unread %d, want 1", got)
	}
	d := c.Delivers[0]
	if err := framework.Failpoint(d.AdminAddr, "deliver/job/beforeAck", "exit"); err != nil {
		t.Fatal(err)
	}
	second, err := a.Send(ctx, sendTo(21002, "r-2", text(t, "two")))
	if err != nil {
		t.Fatal(err)
	}
	waitExited(t, d.Process, 10*time.Second)
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitNoPending(t, c, 4, 20*time.Second)
	cv := inbox(t, ctx, b)[conv]
	if cv.Unread != 2 || cv.LastMsgID != second.MsgID {
		t.Fatalf("after redelivery: unread %d last %s, want 2 and %s", cv.Unread, cv.LastMsgID, second.MsgID)
	}
}

// READ on one device: the other device gets command 8, unread is 0 on both
// after their next sync, and reading an older id does not move the mark back.
func TestReadAcrossDevices(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4})
	ctx := ctxT(t, 2*time.Minute)
	a := c.Login(t, 0, 22001, "a")
	phone := c.Login(t, 0, 22002, "phone")
	laptop := c.Login(t, 1, 22002, "laptop")
	var acks []protocol.SendAck
	for i := 0; i < 5; i++ {
		ack, err := a.Send(ctx, sendTo(22002, fmt.Sprintf("rd-%d", i), text(t, "read me")))
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, ack)
	}
	conv := acks[0].ConversationID.Int64()
	waitNoPending(t, c, 4, 15*time.Second)
	if got := inbox(t, ctx, laptop)[conv].Unread; got != 5 {
		t.Fatalf("unread before read %d", got)
	}
	rr, err := phone.Read(ctx, conv, acks[4].MsgID.Int64())
	if err != nil || rr.MsgID != acks[4].MsgID {
		t.Fatalf("read: %+v %v", rr, err)
	}
	deadline := time.After(10 * time.Second)
	for got := false; !got; {
		select {
		case f := <-laptop.Pushes():
			got = f.Command == protocol.CmdReadMessage
		case <-deadline:
			t.Fatal("laptop got no READ push")
		}
	}
	for name, conn := range map[string]*client.Conn{"phone": phone, "laptop": laptop} {
		if got := inbox(t, ctx, conn)[conv].Unread; got != 0 {
			t.Fatalf("%s: unread %d after read", name, got)
		}
	}
	// Reading an older message does not move the mark back.
	if rr, err := phone.Read(ctx, conv, acks[1].MsgID.Int64()); err != nil || rr.MsgID != acks[4].MsgID {
		t.Fatalf("older read answered %+v %v, want the mark to stay at %s", rr, err, acks[4].MsgID)
	}
	var mark int64
	if err := c.DB().QueryRow("SELECT last_read_msg_id FROM t_conversation_members WHERE conversation_id = ? AND user_id = 22002", conv).Scan(&mark); err != nil || mark != acks[4].MsgID.Int64() {
		t.Fatalf("last_read_msg_id %d (%v)", mark, err)
	}
	if got := inbox(t, ctx, laptop)[conv].Unread; got != 0 {
		t.Fatalf("unread %d after an older read", got)
	}
	// Bad reads.
	for _, body := range []string{`{"msg_id":"1"}`, `{"conversation_id":"` + fmt.Sprint(conv) + `","msg_id":"0"}`} {
		r, err := phone.Request(ctx, protocol.CmdReadMessage, body)
		if err != nil || r.Envelope.Code != errcode.InvalidArgument {
			t.Fatalf("%s: %+v %v", body, r.Envelope, err)
		}
	}
}

// Recall: online participants get command 9, an offline participant gets
// the RECALL mailbox event, non-senders and late recalls are refused.
func TestRecall(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4, LogicEnv: []string{"IM_LOGIC_RECALL_WINDOW=4s"}})
	ctx := ctxT(t, 2*time.Minute)
	a := c.Login(t, 0, 23001, "a")
	aOther := c.Login(t, 1, 23001, "a2")
	b := c.Login(t, 1, 23002, "b")
	bOff := c.Login(t, 0, 23002, "b-off")
	rep := framework.NewReplica()
	ack, err := a.Send(ctx, sendTo(23002, "rc-1", text(t, "oops")))
	if err != nil {
		t.Fatal(err)
	}
	waitNoPending(t, c, 4, 15*time.Second)
	if err := rep.Sync(ctx, bOff); err != nil {
		t.Fatal(err)
	}
	_ = bOff.Close()
	conv, id := ack.ConversationID.Int64(), ack.MsgID.Int64()

	if err := b.Recall(ctx, conv, id); !hasCode(err, errcode.Forbidden) {
		t.Fatalf("recall by the recipient: %v, want 40301", err)
	}
	if err := a.Recall(ctx, conv, id); err != nil {
		t.Fatal(err)
	}
	if err := a.Recall(ctx, conv, id); err != nil {
		t.Fatalf("second recall: %v", err)
	}
	for name, conn := range map[string]*client.Conn{"recipient": b, "sender's other device": aOther} {
		deadline := time.After(10 * time.Second)
		for got := false; !got; {
			select {
			case f := <-conn.Pushes():
				got = f.Command == protocol.CmdRecallMessage
			case <-deadline:
				t.Fatalf("%s got no RECALL push", name)
			}
		}
	}
	bOff = c.Login(t, 0, 23002, "b-off")
	page, err := bOff.SyncInbox(ctx, rep.DialogCursor, rep.MailboxSeq, 50)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range page.Events {
		found = found || (e.EventType == client.EventRecall && e.MsgID.Int64() == id)
	}
	if !found {
		t.Fatalf("offline device got no RECALL event: %+v", page.Events)
	}
	for _, cv := range page.Conversations {
		if cv.ConversationID.Int64() == conv && (cv.Preview == nil || !cv.Preview.Recalled) {
			t.Fatalf("preview of the recalled last message: %+v", cv.Preview)
		}
	}
	msgs, _, err := bOff.SyncMessages(ctx, conv, 0, 50)
	if err != nil || len(msgs) != 1 || msgs[0].Status != protocol.StatusRecalled || len(msgs[0].Content) != 0 {
		t.Fatalf("tombstone: %+v %v", msgs, err)
	}
	late, err := a.Send(ctx, sendTo(23002, "rc-2", text(t, "too late to take back")))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4500 * time.Millisecond)
	if err := a.Recall(ctx, conv, late.MsgID.Int64()); !hasCode(err, errcode.Forbidden) {
		t.Fatalf("recall after the window: %v, want 40301", err)
	}
}

// FLUSHALL on Redis mid-test: history is intact, lists and unread rebuild
// correctly, new messages flow.
func TestRedisFlush(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4})
	ctx := ctxT(t, 2*time.Minute)
	a := c.Login(t, 0, 24001, "a")
	b := c.Login(t, 1, 24002, "b")
	x := c.Login(t, 0, 24003, "x")
	for i := 0; i < 3; i++ {
		if _, err := a.Send(ctx, sendTo(24002, fmt.Sprintf("f-a-%d", i), text(t, "from a"))); err != nil {
			t.Fatal(err)
		}
	}
	last, err := x.Send(ctx, sendTo(24002, "f-x-0", text(t, "from x")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(ctx, last.ConversationID.Int64(), last.MsgID.Int64()); err != nil {
		t.Fatal(err)
	}
	waitNoPending(t, c, 4, 15*time.Second)
	before := framework.NewReplica()
	if err := before.Sync(ctx, b); err != nil {
		t.Fatal(err)
	}
	want := before.Snapshot()
	oldCursor := before.DialogCursor

	r := c.Redis.Client()
	defer r.Close()
	if err := c.Redis.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	after := framework.NewReplica()
	if err := after.Sync(ctx, b); err != nil {
		t.Fatal(err)
	}
	if got := after.Snapshot(); got != want {
		t.Fatalf("rebuilt list differs:\n%s", firstDiff(got, want))
	}
	// An old cursor from before the flush must not skip the rebuilt list.
	page, err := b.SyncInbox(ctx, oldCursor, "0", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Conversations) != 2 {
		t.Fatalf("old cursor after the flush saw %d conversations, want the 2 rebuilt", len(page.Conversations))
	}
	// New messages flow: stored, pushed (routes come back), counted. The
	// gates re-report their connections once logic notices the flush.
	routeDeadline := time.Now().Add(30 * time.Second)
	for {
		if n, _ := r.HLen(ctx, "im:route:{24002}").Result(); n > 0 {
			break
		}
		if time.Now().After(routeDeadline) {
			t.Fatal("route of a connected device never restored after the flush")
		}
		time.Sleep(200 * time.Millisecond)
	}
	var ack protocol.SendAck
	deadline := time.Now().Add(30 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err = a.Send(rctx, sendTo(24002, "f-after", text(t, "after the flush")))
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	// Skip the pushes of the messages before the flush, still queued here.
	pushDeadline := time.Now().Add(30 * time.Second)
	for {
		m, err := nextMessage(b, time.Until(pushDeadline))
		if err != nil {
			t.Fatalf("push after the flush: %v", err)
		}
		if m.MsgID == ack.MsgID {
			break
		}
	}
	if got := inbox(t, ctx, b)[ack.ConversationID.Int64()].Unread; got != 4 {
		t.Fatalf("unread after the flush %d, want 4", got)
	}
}

// Sync input checks: non-members are refused, limits clamped, malformed
// cursors rejected.
func TestSyncInputs(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 1, Partitions: 4})
	ctx := ctxT(t, 2*time.Minute)
	a := c.Login(t, 0, 25001, "a")
	_ = c.Login(t, 0, 25002, "b")
	stranger := c.Login(t, 0, 25003, "s")
	var conv int64
	for i := 0; i < 230; i++ {
		ack, err := a.Send(ctx, sendTo(25002, fmt.Sprintf("s-%d", i), text(t, "x")))
		if err != nil {
			t.Fatal(err)
		}
		conv = ack.ConversationID.Int64()
	}
	if _, err := stranger.SyncMessagesPage(ctx, conv, 0, 50); !hasCode(err, errcode.Forbidden) {
		t.Fatalf("stranger: %v, want 40301", err)
	}
	p, err := a.SyncMessagesPage(ctx, conv, 0, 500)
	if err != nil || len(p.Messages) != 200 || p.Last {
		t.Fatalf("limit 500: %d messages last %v err %v, want 200 and more", len(p.Messages), p.Last, err)
	}
	p2, err := a.SyncMessagesPage(ctx, conv, p.NextMsgID.Int64(), 500)
	if err != nil || len(p2.Messages) != 30 || !p2.Last {
		t.Fatalf("second page: %d last %v err %v", len(p2.Messages), p2.Last, err)
	}
	bad := []struct {
		cmd  uint16
		body string
	}{
		{protocol.CmdSyncMessages, fmt.Sprintf(`{"conversation_id":"%d","last_msg_id":"abc"}`, conv)},
		{protocol.CmdSyncMessages, fmt.Sprintf(`{"conversation_id":"%d","last_msg_id":-5}`, conv)},
		{protocol.CmdSyncMessages, `{"last_msg_id":"0"}`},
		{protocol.CmdSyncInbox, `{"dialog_cursor":"garbage","mailbox_seq":"0"}`},
		{protocol.CmdSyncInbox, `{"dialog_cursor":"0","mailbox_seq":"x"}`},
		{protocol.CmdSyncInbox, `{"dialog_cursor":"0","mailbox_seq":"-1"}`},
	}
	for _, tt := range bad {
		r, err := a.Request(ctx, tt.cmd, tt.body)
		if err != nil || r.Envelope.Code != errcode.InvalidArgument || r.Command != tt.cmd {
			t.Fatalf("%s: answer %d %+v %v, want 40001", tt.body, r.Command, r.Envelope, err)
		}
	}
}

// waitGroupWithin waits for wg, or fails the test naming what it waited for.
func waitGroupWithin(t *testing.T, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}
