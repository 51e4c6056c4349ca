package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/tests/framework"
)

// Bounds the outage tests hold the system to.
const (
	// outageAnswerBound is the longest a SEND may wait for its answer,
	// SEND_ACK or 50301, while MySQL or Redis is stopped.
	outageAnswerBound = 3 * time.Second
	// outageHungAnswerBound is the longest a SEND may wait while MySQL
	// hangs: the gate's request_timeout (10 s) and its 250 ms check tick,
	// after which the gate answers 50301 itself (logic answers at its own
	// 8 s first).
	outageHungAnswerBound = 10*time.Second + 500*time.Millisecond
	// outageHeartbeatBound is the longest a HEARTBEAT may wait: the gate
	// answers it itself, so neither store may slow it.
	outageHeartbeatBound = time.Second
	// outageRecoveryBound is how soon after the store is back every
	// sender's next send must be acked again.
	outageRecoveryBound = 10 * time.Second
	// outageDuration is how long the store stays down.
	outageDuration = 10 * time.Second
)

// outageAttempt is one SEND request of the load and how it was answered.
type outageAttempt struct {
	clientMsgID string
	at          time.Time
	took        time.Duration
	cmd         uint16
	code        errcode.Code
	err         error
}

// outageSender sends numbered messages to one P2P peer or one group, each
// until it is acked, retrying with the same client_msg_id on 50301 as a
// client does; every attempt is recorded.
type outageSender struct {
	user       int64
	conn       *client.Conn
	to         protocol.SendRequest // target fields only
	recipients []int64              // users that must receive its messages
	bound      time.Duration        // the longest an answer may take

	mu       sync.Mutex
	acks     map[string]protocol.SendAck // client_msg_id → ack
	attempts []outageAttempt
}

func (s *outageSender) run(ctx context.Context, t *testing.T, stop <-chan struct{}, pace time.Duration) {
	for k := 0; ; k++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		req := s.to
		req.ClientMsgID = fmt.Sprintf("o-%d-%d", s.user, k)
		req.MessageType = 1
		req.Content = text(t, fmt.Sprintf("outage load %d from %d", k, s.user))
		for ctx.Err() == nil {
			start := time.Now()
			rctx, cancel := context.WithTimeout(ctx, 2*s.bound)
			reply, err := s.conn.Request(rctx, protocol.CmdSendMessage, req)
			cancel()
			a := outageAttempt{clientMsgID: req.ClientMsgID, at: start, took: time.Since(start), cmd: reply.Command, err: err}
			if err == nil {
				a.code = reply.Envelope.Code
			}
			s.mu.Lock()
			s.attempts = append(s.attempts, a)
			if err == nil && reply.Command == protocol.CmdSendAck && a.code == errcode.OK {
				var ack protocol.SendAck
				if derr := reply.Decode(&ack); derr != nil {
					s.attempts[len(s.attempts)-1].err = fmt.Errorf("decode SEND_ACK: %w", derr)
				} else {
					s.acks[req.ClientMsgID] = ack
				}
				s.mu.Unlock()
				break
			}
			s.mu.Unlock()
			if err != nil || a.code != errcode.Busy {
				return // recorded; the checks report it
			}
			time.Sleep(pace) // a client's backoff before the retry
		}
		time.Sleep(pace)
	}
}

// outageReceiver collects every MESSAGE push of one connection and PUSH_ACKs
// it, from the start of the load to the end of the test.
type outageReceiver struct {
	user int64
	conn *client.Conn

	mu  sync.Mutex
	got map[int64]int // msg_id → pushes
	at  map[int64]time.Time
}

func (r *outageReceiver) run() {
	for f := range r.conn.Pushes() {
		if f.Command != protocol.CmdMessage || !f.IsPush() {
			continue
		}
		_ = r.conn.PushAck(f.SequenceID)
		m, err := f.Message()
		if err != nil {
			continue
		}
		r.mu.Lock()
		if r.got[m.MsgID.Int64()] == 0 {
			r.at[m.MsgID.Int64()] = time.Now()
		}
		r.got[m.MsgID.Int64()]++
		r.mu.Unlock()
	}
}

func (r *outageReceiver) has(id int64) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.at[id]
	return at, ok
}

// outageLoad is the steady load of the outage tests: two P2P senders on
// two gates and two senders into one group of three, every connection
// also a receiver, heartbeating.
type outageLoad struct {
	c         *framework.Cluster
	senders   []*outageSender
	receivers map[int64]*outageReceiver
	conns     []*client.Conn

	hbMu     sync.Mutex
	hbFailed []string
	hbSlow   time.Duration
	hbCount  int
}

func newOutageLoad(t *testing.T, c *framework.Cluster, base int64, bound time.Duration) *outageLoad {
	ctx := ctxT(t, 30*time.Second)
	l := &outageLoad{c: c, receivers: map[int64]*outageReceiver{}}
	login := func(user int64) *client.Conn {
		conn := c.Login(t, int(user%2), user, fmt.Sprintf("dev-%d", user))
		l.conns = append(l.conns, conn)
		r := &outageReceiver{user: user, conn: conn, got: map[int64]int{}, at: map[int64]time.Time{}}
		l.receivers[user] = r
		go r.run()
		return conn
	}
	p1, q1, p2, q2, g1, g2, g3 := base+1, base+2, base+3, base+4, base+5, base+6, base+7
	for _, u := range []int64{p1, q1, p2, q2, g1, g2, g3} {
		login(u)
	}
	g, err := l.receivers[g1].conn.CreateGroup(ctx, client.NewGroup{Name: "outage", MemberIDs: []int64{g2, g3}})
	if err != nil {
		t.Fatal(err)
	}
	gid := g.Group.GroupID.Int64()
	sender := func(user int64, to protocol.SendRequest, recipients ...int64) {
		l.senders = append(l.senders, &outageSender{user: user, conn: l.receivers[user].conn, to: to,
			recipients: recipients, bound: bound, acks: map[string]protocol.SendAck{}})
	}
	sender(p1, protocol.SendRequest{ToUserID: jsonid.ID(q1)}, q1)
	sender(p2, protocol.SendRequest{ToUserID: jsonid.ID(q2)}, q2)
	sender(g1, protocol.SendRequest{GroupID: jsonid.ID(gid)}, g2, g3)
	sender(g2, protocol.SendRequest{GroupID: jsonid.ID(gid)}, g1, g3)
	return l
}

// start runs the senders and a heartbeat on every connection until stop
// is closed; the returned wait blocks until they have all returned.
func (l *outageLoad) start(ctx context.Context, t *testing.T, stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	for _, s := range l.senders {
		wg.Add(1)
		go func() { defer wg.Done(); s.run(ctx, t, stop, 50*time.Millisecond) }()
	}
	for _, conn := range l.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(300 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				hctx, cancel := context.WithTimeout(ctx, 3*outageHeartbeatBound)
				took, err := conn.Heartbeat(hctx)
				cancel()
				l.hbMu.Lock()
				l.hbCount++
				if err != nil {
					l.hbFailed = append(l.hbFailed, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
				} else if took > l.hbSlow {
					l.hbSlow = took
				}
				l.hbMu.Unlock()
			}
		}()
	}
	return wg.Wait
}

// acked returns every sender's acks so far, by client_msg_id.
func (l *outageLoad) acked() map[*outageSender]map[string]protocol.SendAck {
	out := map[*outageSender]map[string]protocol.SendAck{}
	for _, s := range l.senders {
		s.mu.Lock()
		m := make(map[string]protocol.SendAck, len(s.acks))
		for k, v := range s.acks {
			m[k] = v
		}
		s.mu.Unlock()
		out[s] = m
	}
	return out
}

// awaitRecovery lets the load run until every sender has had a send
// made after up acked, or outageRecoveryBound has passed (check then
// reports who was not), instead of always for the whole bound.
func (l *outageLoad) awaitRecovery(up time.Time) {
	for time.Since(up) < outageRecoveryBound {
		recovered := true
		for _, s := range l.senders {
			recovered = recovered && !s.firstAckAfter(up).IsZero()
		}
		if recovered {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// firstAckAfter is when the sender's first send made after up was
// acked (zero: none yet).
func (s *outageSender) firstAckAfter(up time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.attempts {
		if a.at.After(up) && a.cmd == protocol.CmdSendAck && a.code == errcode.OK {
			return a.at.Add(a.took)
		}
	}
	return time.Time{}
}

// outageWindow is when the store was down.
type outageWindow struct{ down, up time.Time }

// check asserts the outage invariants and logs the figures.
func (l *outageLoad) check(ctx context.Context, t *testing.T, w outageWindow, pushOnly bool) {
	t.Helper()
	// Every attempt was answered, with SEND_ACK or 50301, within the bound.
	var busy, acks int
	var maxTook, maxTookDown time.Duration
	for _, s := range l.senders {
		s.mu.Lock()
		for _, a := range s.attempts {
			switch {
			case a.err != nil:
				t.Errorf("user %d %s at %s: no answer: %v", s.user, a.clientMsgID, a.at.Format("15:04:05.000"), a.err)
			case a.cmd == protocol.CmdSendAck && a.code == errcode.OK:
				acks++
			case a.cmd == protocol.CmdSendMessage && a.code == errcode.Busy:
				busy++
			default:
				t.Errorf("user %d %s: answered command %d code %s, want SEND_ACK or 50301", s.user, a.clientMsgID, a.cmd, a.code)
			}
			if a.took > s.bound {
				t.Errorf("user %d %s at %s: answered in %v, over %v", s.user, a.clientMsgID, a.at.Format("15:04:05.000"), a.took, s.bound)
			}
			maxTook = max(maxTook, a.took)
			if a.at.After(w.down) && a.at.Before(w.up) {
				maxTookDown = max(maxTookDown, a.took)
			}
		}
		s.mu.Unlock()
	}
	t.Logf("sends: %d acked, %d answered 50301; slowest answer %v, slowest while down %v", acks, busy, maxTook.Round(time.Millisecond), maxTookDown.Round(time.Millisecond))
	if busy == 0 {
		t.Error("no send was refused during the outage: the store was not down, or sends were acked without it")
	}

	// Sends succeed again soon after the store is back: each sender's
	// first ack of an attempt made after the restart.
	var worst time.Duration
	for _, s := range l.senders {
		first := s.firstAckAfter(w.up)
		if first.IsZero() {
			t.Errorf("user %d: no send acked after the store came back", s.user)
			continue
		}
		worst = max(worst, first.Sub(w.up))
	}
	t.Logf("first ack after recovery: at most %v after the store was back", worst.Round(time.Millisecond))
	if worst > outageRecoveryBound {
		t.Errorf("sends acked again %v after recovery, want within %v", worst, outageRecoveryBound)
	}

	// Heartbeats were answered all along and no connection was dropped.
	l.hbMu.Lock()
	t.Logf("heartbeats: %d, slowest %v, %d failed", l.hbCount, l.hbSlow.Round(time.Millisecond), len(l.hbFailed))
	for _, f := range l.hbFailed {
		t.Errorf("heartbeat failed: %s", f)
	}
	if l.hbSlow > outageHeartbeatBound {
		t.Errorf("slowest heartbeat %v, over %v", l.hbSlow, outageHeartbeatBound)
	}
	l.hbMu.Unlock()
	for _, conn := range l.conns {
		select {
		case <-conn.Done():
			t.Errorf("connection %s was closed: %v", conn.LocalAddr(), conn.Err())
		default:
		}
	}

	// Every acked message is in MySQL exactly once, under its acked id.
	all := l.acked()
	for s, acks := range all {
		rows, err := l.c.DB().QueryContext(ctx, "SELECT client_msg_id, id FROM t_messages WHERE sender_id = ?", s.user)
		if err != nil {
			t.Fatal(err)
		}
		stored := map[string][]int64{}
		for rows.Next() {
			var cm string
			var id int64
			if err := rows.Scan(&cm, &id); err != nil {
				t.Fatal(err)
			}
			stored[cm] = append(stored[cm], id)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		for cm, ack := range acks {
			if ids := stored[cm]; len(ids) != 1 || ids[0] != ack.MsgID.Int64() {
				t.Errorf("user %d %s: acked as %s, rows %v: want exactly that one", s.user, cm, ack.MsgID, ids)
			}
		}
	}

	// Every acked message reaches every recipient: by push, or (for the
	// MySQL outage) by the sync a client runs after reconnecting.
	deadline := time.Now().Add(20 * time.Second)
	missing := func() map[int64][]protocol.SendAck {
		out := map[int64][]protocol.SendAck{}
		for s, acks := range all {
			for _, ack := range acks {
				for _, r := range s.recipients {
					if _, ok := l.receivers[r].has(ack.MsgID.Int64()); !ok {
						out[r] = append(out[r], ack)
					}
				}
			}
		}
		return out
	}
	miss := missing()
	for len(miss) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		miss = missing()
	}
	pushed, dups := 0, 0
	for _, r := range l.receivers {
		r.mu.Lock()
		for _, n := range r.got {
			pushed++
			dups += n - 1
		}
		r.mu.Unlock()
	}
	t.Logf("pushes: %d distinct messages received, %d duplicates", pushed, dups)
	for user, acks := range miss {
		if pushOnly {
			t.Errorf("user %d: %d acked messages never pushed, e.g. %s", user, len(acks), acks[0].MsgID)
			continue
		}
		synced := map[int64]bool{}
		convs := map[int64]bool{}
		for _, a := range acks {
			convs[a.ConversationID.Int64()] = true
		}
		for cid := range convs {
			msgs, _, err := l.receivers[user].conn.SyncMessages(ctx, cid, 0, 200)
			if err != nil {
				t.Fatalf("user %d: sync %d: %v", user, cid, err)
			}
			for _, m := range msgs {
				synced[m.MsgID.Int64()] = true
			}
		}
		var lost []string
		for _, a := range acks {
			if !synced[a.MsgID.Int64()] {
				lost = append(lost, a.MsgID.String())
			}
		}
		sort.Strings(lost)
		if len(lost) > 0 {
			t.Errorf("user %d: acked messages neither pushed nor synced: %s", user, strings.Join(lost, ","))
		}
		t.Logf("user %d: %d acked messages not pushed, all found by sync", user, len(acks))
	}
}

// MySQL stops for 10 s under a steady P2P and group load, then starts
// again; nothing else is restarted. While it is down every send is
// answered 50301 within the bound and none is acked, heartbeats are
// answered, no connection drops, and jobs queued before the stop are
// still pushed (deliver, held by a failpoint for the second before the
// stop, works them off without MySQL). Afterwards every sender is acked again
// within the bound, and every acked message is in MySQL once and reaches
// its recipients.
func TestMySQLStoppedTenSecondsUnderLoadNoFalseAckFullRecovery(t *testing.T) {
	mysqlOutage(t, 82000, outageAnswerBound, (*framework.MySQL).Stop, (*framework.MySQL).Start)
}

// mysqlOutage runs the MySQL outage test: down takes MySQL down, up brings
// it back; bound is the longest a send may wait for its answer.
func mysqlOutage(t *testing.T, base int64, bound time.Duration, down, up func(*framework.MySQL) error) {
	c := framework.NewCluster(t, framework.Options{Gates: 2, PrivateMySQL: true, Partitions: 4})
	ctx := ctxT(t, 2*time.Minute)
	l := newOutageLoad(t, c, base, bound)
	stop := make(chan struct{})
	wait := l.start(ctx, t, stop)
	defer func() { close(stop); wait() }()

	time.Sleep(3 * time.Second)
	// Jobs queued but not yet pushed when MySQL goes: deliver fails its
	// batches (and keeps retrying them) for a second while sends go on,
	// so the queue holds them; it stays up, with what it has cached.
	deliverAdmin := c.Delivers[0].AdminAddr
	if err := framework.Failpoint(deliverAdmin, "deliver/job/beforePush", "error"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	var w outageWindow
	w.down = time.Now()
	if err := down(c.MySQL); err != nil {
		t.Fatal(err)
	}
	queued := l.acked()
	unpushed := 0
	for s, acks := range queued {
		for _, ack := range acks {
			for _, r := range s.recipients {
				if _, ok := l.receivers[r].has(ack.MsgID.Int64()); !ok {
					unpushed++
				}
			}
		}
	}
	if err := framework.Failpoint(deliverAdmin, "deliver/job/beforePush", "off"); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d pushes queued but not done when MySQL went down", unpushed)
	if unpushed == 0 {
		t.Error("no job was left queued when MySQL went down: the test does not show they are pushed during the outage")
	}
	time.Sleep(outageDuration - time.Since(w.down))
	// Before MySQL is back: every message acked before it stopped has
	// reached its online recipients by push.
	var notYet []string
	for s, acks := range queued {
		for _, ack := range acks {
			for _, r := range s.recipients {
				if _, ok := l.receivers[r].has(ack.MsgID.Int64()); !ok {
					notYet = append(notYet, fmt.Sprintf("%s→%d", ack.MsgID, r))
				}
			}
		}
	}
	if len(notYet) > 0 {
		t.Errorf("%d pushes of jobs queued before MySQL went down did not happen while it was down, e.g. %s", len(notYet), notYet[0])
	}
	if err := up(c.MySQL); err != nil {
		t.Fatal(err)
	}
	w.up = time.Now()
	t.Logf("mysql down for %v", w.up.Sub(w.down).Round(time.Millisecond))
	l.awaitRecovery(w.up)
	close(stop)
	wait()
	stop = make(chan struct{}) // the deferred close must not panic
	l.check(ctx, t, w, false)
}

// MySQL hangs for 10 s (SIGSTOP: its port accepts, nothing answers, as in
// a network partition) under the same load, then goes on. A send then
// waits for its statements until logic's request timeout (8 s) and is
// answered 50301, within the gate's request_timeout, never hanging the
// client; everything else holds as when MySQL is stopped (decision 72).
func TestMySQLHungTenSecondsUnderLoadAnswersWithinRequestTimeoutFullRecovery(t *testing.T) {
	mysqlOutage(t, 84000, outageHungAnswerBound, (*framework.MySQL).Pause, (*framework.MySQL).Resume)
}

// Redis stops for 10 s under a steady P2P and group load, then starts
// again with its data (append-only file, as a production Redis keeps it);
// nothing else is restarted. While it is down every send is answered
// 50301 within the bound (a row committed whose job could not be queued is
// not acked; the client's retry queues it), heartbeats are answered and
// the gates keep every connection. Afterwards every sender is acked again
// within the bound, and every acked message is in MySQL once and is pushed
// to its recipients, who stayed online.
func TestRedisStoppedTenSecondsUnderLoadNoFalseAckFullRecovery(t *testing.T) {
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4})
	ctx := ctxT(t, 2*time.Minute)
	l := newOutageLoad(t, c, 83000, outageAnswerBound)
	stop := make(chan struct{})
	wait := l.start(ctx, t, stop)
	defer func() { close(stop); wait() }()

	time.Sleep(3 * time.Second)
	var w outageWindow
	w.down = time.Now()
	if err := c.Redis.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(outageDuration - time.Since(w.down))
	if err := c.Redis.Start(); err != nil {
		t.Fatal(err)
	}
	w.up = time.Now()
	t.Logf("redis down for %v", w.up.Sub(w.down).Round(time.Millisecond))
	l.awaitRecovery(w.up)
	close(stop)
	wait()
	stop = make(chan struct{})
	l.check(ctx, t, w, true)
}
