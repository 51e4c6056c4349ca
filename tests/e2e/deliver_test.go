package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/tests/framework"
)

// queuedJobs counts the deliver jobs still in the queue, over all
// partitions. deliver deletes (XDEL) a job together with its ack, so a
// stream's length counts the jobs read but not acked and also the ones
// nobody has read yet, which XPENDING misses.
func queuedJobs(c *framework.Cluster, partitions int) (int64, error) {
	r := c.Redis.Client()
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n int64
	for p := 0; p < partitions; p++ {
		l, err := r.XLen(ctx, rediskey.Deliver(p)).Result() // 0 for a stream not created yet
		if err != nil {
			return 0, fmt.Errorf("XLEN %s: %w", rediskey.Deliver(p), err)
		}
		n += l
	}
	return n, nil
}

// waitNoPending waits until every partition's stream is empty: every job
// enqueued so far was processed and acknowledged.
func waitNoPending(t *testing.T, c *framework.Cluster, partitions int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		n, err := queuedJobs(c, partitions)
		if err == nil && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliver queue not empty %v later: %d jobs left in %d partitions (error: %v)", within, n, partitions, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitExited waits until p exits by itself (an armed "exit" failpoint).
func waitExited(t *testing.T, p *framework.Process, within time.Duration) {
	t.Helper()
	if err := p.WaitExit(within); err != nil {
		t.Fatalf("waiting for the failpoint's exit: %v", err)
	}
}

// A recipient whose gate died (kill -9) is treated as offline: the job is
// acknowledged, the stale route removed, and other traffic keeps flowing.
func TestDeliverWithDeadGate(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4})
	ctx := ctxT(t, time.Minute)
	sender := c.Login(t, 0, 9001, "s")
	_ = c.Login(t, 1, 9002, "on-dying-gate")
	other := c.Login(t, 0, 9003, "o")

	if err := c.Gates[1].Kill(); err != nil {
		t.Fatal(err)
	}
	ack, err := sender.Send(ctx, sendTo(9002, "to-dead", text(t, "you are offline")))
	if err != nil {
		t.Fatal(err)
	}
	waitNoPending(t, c, 4, 15*time.Second)
	if n := c.CountRows("SELECT COUNT(*) FROM t_messages WHERE id = ?", ack.MsgID.Int64()); n != 1 {
		t.Fatal("message not stored")
	}
	ack2, err := sender.Send(ctx, sendTo(9003, "to-alive", text(t, "you are online")))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := nextMessage(other, 10*time.Second); err != nil || m.MsgID != ack2.MsgID {
		t.Fatalf("other: %+v %v", m, err)
	}
	// The dead connection's route is gone once the gate's registration
	// expires or deliver's push finds nothing (whichever comes first).
	r := c.Redis.Client()
	defer r.Close()
	deadline := time.Now().Add(45 * time.Second)
	for {
		if n, _ := r.HLen(ctx, rediskey.Route(9002)).Result(); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("stale route of the dead gate never removed")
		}
		if _, err := sender.Send(ctx, sendTo(9002, "probe-"+time.Now().Format("150405.000"), text(t, "probe"))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
	}
}

// deliver dies (kill -9 at a failpoint) after the list update and before
// the ack, once before any push and once after the pushes. The jobs stay
// queued; the restarted instance delivers every message to the device
// and the unread count is exact: the list updates it runs again skip the
// ids they applied.
func TestDeliverCrashBeforeAck(t *testing.T) {
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4})
	ctx := ctxT(t, 3*time.Minute)
	d := c.Delivers[0]
	tests := []struct {
		name, failpoint string
		sender, peer    int64
		// pushedBefore: whether the pushes went out before the crash.
		pushedBefore bool
	}{
		{"after the list update, before any push", "deliver/job/afterList", 9101, 9102, false},
		{"after the pushes", "deliver/job/beforeAck", 9111, 9112, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sender := c.Login(t, 0, tt.sender, "s")
			peer := c.Login(t, 1, tt.peer, "p")
			// A first message builds the peer's list state, so the
			// unread count below is the list updates' own arithmetic, not
			// a rebuild from MySQL.
			warm, err := sender.Send(ctx, sendTo(tt.peer, "warm", text(t, "before the crash")))
			if err != nil {
				t.Fatal(err)
			}
			if m, err := nextMessage(peer, 10*time.Second); err != nil || m.MsgID != warm.MsgID {
				t.Fatalf("warm-up message: %+v %v", m, err)
			}
			waitNoPending(t, c, 4, 15*time.Second)
			conv := warm.ConversationID.Int64()
			if got := inbox(t, ctx, peer)[conv].Unread; got != 1 {
				t.Fatalf("unread after the warm-up %d, want 1", got)
			}

			if err := framework.Failpoint(d.AdminAddr, tt.failpoint, "exit"); err != nil {
				t.Fatal(err)
			}
			const n = 3
			var acks []protocol.SendAck
			for k := 0; k < n; k++ {
				ack, err := sender.Send(ctx, sendTo(tt.peer, fmt.Sprintf("crash-%d", k), text(t, fmt.Sprintf("survives a deliver crash %d", k))))
				if err != nil {
					t.Fatal(err)
				}
				acks = append(acks, ack)
			}
			waitExited(t, d.Process, 10*time.Second)
			if q, err := queuedJobs(c, 4); err != nil || q != n {
				t.Fatalf("%d jobs queued after the crash (%v), want all %d: none acked", q, err, n)
			}
			if !tt.pushedBefore {
				if m, err := nextMessage(peer, 300*time.Millisecond); err == nil {
					t.Fatalf("message %s pushed although deliver died before any push", m.MsgID)
				}
			}

			// Restarted without the failpoint (it was armed through the
			// admin port of the dead process): the queued jobs are
			// delivered.
			if err := d.Start(ctx); err != nil {
				t.Fatal(err)
			}
			got := awaitIDs(t, peer, acks, 20*time.Second)
			if !tt.pushedBefore {
				for id, k := range got {
					if k != 1 {
						t.Errorf("msg %d pushed %d times, want once: nothing was pushed before the crash", id, k)
					}
				}
			}
			waitNoPending(t, c, 4, 15*time.Second)
			cv := inbox(t, ctx, peer)[conv]
			if cv.Unread != n+1 || cv.LastMsgID != acks[n-1].MsgID {
				t.Fatalf("after the restart: unread %d last %s, want %d and %s", cv.Unread, cv.LastMsgID, n+1, acks[n-1].MsgID)
			}
		})
	}
}

// awaitIDs reads MESSAGE pushes on conn until every acked message arrived,
// failing after within with the ids that never came. It returns how often
// each acked id was pushed; a push of any other id fails the test.
func awaitIDs(t *testing.T, conn *client.Conn, acks []protocol.SendAck, within time.Duration) map[int64]int {
	t.Helper()
	want := map[int64]bool{}
	for _, a := range acks {
		want[a.MsgID.Int64()] = true
	}
	got := map[int64]int{}
	deadline := time.Now().Add(within)
	for len(got) < len(want) {
		m, err := nextMessage(conn, time.Until(deadline))
		if err != nil {
			var missing []int64
			for id := range want {
				if got[id] == 0 {
					missing = append(missing, id)
				}
			}
			t.Fatalf("waiting for %d acked messages: %v; never pushed: %v", len(want), err, missing)
		}
		if !want[m.MsgID.Int64()] {
			t.Fatalf("pushed msg %s, which is none of the acked ones", m.MsgID)
		}
		got[m.MsgID.Int64()]++
	}
	return got
}

// device records every MESSAGE push of one connection, from a goroutine,
// so several devices can be watched at once.
type device struct {
	name string
	conn *client.Conn
	mu   sync.Mutex
	msgs []protocol.Message
}

func watch(t *testing.T, name string, conn *client.Conn) *device {
	d := &device{name: name, conn: conn}
	go func() {
		for f := range conn.Pushes() {
			if f.Command != protocol.CmdMessage || !f.IsPush() {
				continue
			}
			m, err := f.Message()
			if err != nil {
				t.Errorf("%s: undecodable MESSAGE push: %v", name, err)
				continue
			}
			d.mu.Lock()
			d.msgs = append(d.msgs, m)
			d.mu.Unlock()
		}
	}()
	return d
}

func (d *device) pushed() []protocol.Message {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]protocol.Message(nil), d.msgs...)
}

// deduped folds the device's pushes by msg_id, as a client does, and fails
// if two pushes of one id differ: a redelivery must repeat the message,
// not change it.
func (d *device) deduped(t *testing.T) map[int64]protocol.Message {
	t.Helper()
	out := map[int64]protocol.Message{}
	for _, m := range d.pushed() {
		if old, ok := out[m.MsgID.Int64()]; ok && (old.ConversationID != m.ConversationID || old.SenderID != m.SenderID ||
			old.CreatedAt != m.CreatedAt || !bytes.Equal(old.Content, m.Content)) {
			t.Fatalf("%s: msg %s pushed twice with different data: %+v and %+v", d.name, m.MsgID, old, m)
		}
		out[m.MsgID.Int64()] = m
	}
	return out
}

// deliver dies (kill -9 at deliver/job/midPush) after one gate answered
// the PushBatch of a batch of 20 jobs: some devices have the messages,
// others may not, nothing is acked. After the restart every device of
// both users (but the sending one) has exactly the acked messages, by push
// or, for any push lost, by sync from its cursor; duplicates repeat the
// same message; the recipient's unread is exact and the sender's 0.
func TestDeliverCrashMidPush(t *testing.T) {
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4})
	ctx := ctxT(t, 3*time.Minute)
	const userA, userB = 9201, 9202
	a1 := c.Login(t, 0, userA, "a1") // the sending device
	devs := []*device{
		watch(t, "a2", c.Login(t, 1, userA, "a2")),
		watch(t, "b1", c.Login(t, 0, userB, "b1")),
		watch(t, "b2", c.Login(t, 1, userB, "b2")),
	}
	d := c.Delivers[0]

	// A first message reaches every device and builds both users' list
	// state, so unread below is the list updates' arithmetic.
	warm, err := a1.Send(ctx, sendTo(userB, "warm", text(t, "before the crash")))
	if err != nil {
		t.Fatal(err)
	}
	conv := warm.ConversationID.Int64()
	for i, k := range waitPushed(t, devs, []protocol.SendAck{warm}, 10*time.Second) {
		if k != 1 {
			t.Fatalf("%s: warm-up message not pushed within 10s", devs[i].name)
		}
	}
	waitNoPending(t, c, 4, 15*time.Second)
	if got := inbox(t, ctx, devs[1].conn)[conv].Unread; got != 1 {
		t.Fatalf("unread after the warm-up %d, want 1", got)
	}
	if got := inbox(t, ctx, a1)[conv].Unread; got != 0 {
		t.Fatalf("sender's unread after the warm-up %d, want 0", got)
	}
	before := make([]int, len(devs))
	for i, dv := range devs {
		before[i] = len(dv.pushed())
	}

	// With deliver stopped the jobs pile up, so the restarted instance
	// reads them as one batch and dies in the middle of pushing it.
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	const n = 20
	var acks []protocol.SendAck
	for k := 0; k < n; k++ {
		ack, err := a1.Send(ctx, sendTo(userB, fmt.Sprintf("mid-%d", k), text(t, fmt.Sprintf("mid-push %d", k))))
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, ack)
	}
	if q, err := queuedJobs(c, 4); err != nil || q != n {
		t.Fatalf("%d jobs queued with deliver stopped (%v), want %d", q, err, n)
	}
	if _, err := d.LaunchWithEnv("SPARK_FAILPOINTS=deliver/job/midPush=exit"); err != nil {
		t.Fatal(err)
	}
	waitExited(t, d.Process, 30*time.Second)
	if q, err := queuedJobs(c, 4); err != nil || q == 0 {
		t.Fatalf("%d jobs queued after the crash (%v), want the unacked batch", q, err)
	}
	// The crash came after a gate answered: some device got pushes.
	pushedBefore := func() int {
		k := 0
		for i, dv := range devs {
			k += len(dv.pushed()) - before[i]
		}
		return k
	}
	for deadline := time.Now().Add(3 * time.Second); pushedBefore() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no device got a push before the crash: the failpoint did not fire mid-push")
		}
	}
	t.Logf("%d pushes reached devices before the crash", pushedBefore())

	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitNoPending(t, c, 4, 30*time.Second)
	// Pushes still in flight get a moment; whatever a device lacks then,
	// it fetches by sync from its cursor after the warm-up message.
	pushes := waitPushed(t, devs, acks, 5*time.Second)
	want := map[int64]bool{warm.MsgID.Int64(): true}
	for _, a := range acks {
		want[a.MsgID.Int64()] = true
	}
	for i, dv := range devs {
		have := dv.deduped(t)
		if pushes[i] < len(acks) {
			msgs, _, err := dv.conn.SyncMessages(ctx, conv, warm.MsgID.Int64(), 200)
			if err != nil {
				t.Fatalf("%s: sync: %v", dv.name, err)
			}
			for _, m := range msgs {
				have[m.MsgID.Int64()] = m
			}
			t.Logf("%s: %d of %d messages by push, the rest by sync", dv.name, pushes[i], len(acks))
		}
		for id := range want {
			if _, ok := have[id]; !ok {
				t.Errorf("%s: acked msg %d never reached the device, by push or sync", dv.name, id)
			}
		}
		for id := range have {
			if !want[id] {
				t.Errorf("%s: has msg %d, which was never acked", dv.name, id)
			}
		}
		if dup := len(dv.pushed()) - len(have); dup > 0 {
			t.Logf("%s: %d duplicate pushes, folded by msg_id", dv.name, dup)
		}
	}
	for _, u := range []struct {
		name string
		conn *client.Conn
		want int64
	}{{"recipient", devs[1].conn, n + 1}, {"sender", a1, 0}} {
		cv := inbox(t, ctx, u.conn)[conv]
		if cv.Unread != u.want || cv.LastMsgID != acks[n-1].MsgID {
			t.Errorf("%s after the restart: unread %d last %s, want %d and %s", u.name, cv.Unread, cv.LastMsgID, u.want, acks[n-1].MsgID)
		}
	}
}

// waitPushed waits up to within until every device has a push of every
// acked message and returns, per device, how many of them it has.
// Running out of time is not a failure: the caller checks sync.
func waitPushed(t *testing.T, devs []*device, acks []protocol.SendAck, within time.Duration) []int {
	t.Helper()
	counts := make([]int, len(devs))
	deadline := time.Now().Add(within)
	for {
		done := true
		for i, dv := range devs {
			have := dv.deduped(t)
			counts[i] = 0
			for _, a := range acks {
				if _, ok := have[a.MsgID.Int64()]; ok {
					counts[i]++
				}
			}
			done = done && counts[i] == len(acks)
		}
		if done || time.Now().After(deadline) {
			return counts
		}
		time.Sleep(50 * time.Millisecond)
	}
}
