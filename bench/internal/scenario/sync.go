package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/sparkim/spark/bench/internal/session"
)

// Sync: a device is offline while M messages arrive in C conversations;
// then it connects and converges with SYNC_INBOX to the last page plus
// SYNC_MESSAGES for every conversation that changed. The sync answers must
// hold every acked message exactly once (a message twice in them fails).
// Deliver may still be working through its backlog when the device comes
// back, so pushes of messages it already synced arrive too: by design
// (docs/protocol.md §11, docs/decisions.md 9; clients de-duplicate by msg_id), they
// are reported as "also pushed", not as duplicates.
type Sync struct{}

// Name implements Scenario.
func (Sync) Name() string { return "sync" }

// Run implements Scenario.
func (Sync) Run(ctx context.Context, e *Env) (*Result, error) {
	p := e.Profile
	res := &Result{Scenario: "sync", Data: map[string]any{}}
	users := e.Users(p.SyncConvs + 1)
	ss := make([]*session.Session, len(users))
	for i, u := range users {
		ss[i] = session.New(i, u, fmt.Sprintf("d%d", u))
	}
	target := ss[len(ss)-1]
	defer func() {
		for _, s := range ss {
			s.Close()
		}
	}()
	// The target signs in once (the recipient must exist), then goes offline.
	if errs := e.ConnectAll(ctx, ss, func(i int) int { return i }, 32, nil); sumMap(errs) > 0 {
		return res, fmt.Errorf("scenario: sync: connect: %v", errs)
	}
	target.Close()
	time.Sleep(200 * time.Millisecond) // logic drops the route on Closed
	t := newTraffic(ss, func(int) int { return target.Index }, 16, time.Now())
	senders := make([]int, p.SyncConvs)
	for i := range senders {
		senders[i] = i
	}
	sendStart := time.Now()
	for issued := 0; issued < p.SyncMessages && ctx.Err() == nil; {
		progressed := false
		for _, i := range senders {
			if issued < p.SyncMessages && t.send(i, nil) {
				issued++
				progressed = true
			}
		}
		if !progressed {
			time.Sleep(time.Millisecond)
		}
	}
	t.skipped.Store(0)
	t.drain(ctx, 30*time.Second)
	sendTime := time.Since(sendStart)
	acked := t.acked.Load()

	tok, err := e.Token(target.UserID, target.Device)
	if err != nil {
		return res, err
	}
	start := time.Now()
	if _, err := target.Connect(ctx, e.Engine, e.Locals[0], e.GateAddr(0), tok); err != nil {
		return res, fmt.Errorf("scenario: sync: reconnect: %w", err)
	}
	authT := time.Since(start)
	convs, err := target.SyncInbox(ctx)
	if err != nil {
		return res, fmt.Errorf("scenario: sync: %w", err)
	}
	inboxT := time.Since(start)
	synced := 0
	for cid, c := range convs {
		if c.LastMsgID == 0 {
			continue
		}
		msgs, err := target.SyncMessages(ctx, cid, 0)
		if err != nil {
			return res, fmt.Errorf("scenario: sync: conversation %d: %w", cid, err)
		}
		for _, m := range msgs {
			t.ledger.Synced(int64(m.MsgID), uint64(target.Index))
			synced++
		}
	}
	converge := time.Since(start)
	backlog, _ := e.DeliverBacklog(ctx)
	time.Sleep(500 * time.Millisecond) // let pushes in flight land before counting them
	led := t.ledger.CheckSync()
	res.add("time to converge (connect, AUTH, SYNC_INBOX, SYNC_MESSAGES)", converge.Seconds()*1000, "ms")
	res.add("connect+AUTH", msOf(authT), "ms")
	res.add("SYNC_INBOX to the last page", msOf(inboxT-authT), "ms")
	res.add("messages synced", float64(synced), "")
	res.add("conversations", float64(len(convs)), "")
	res.add("lost (acked, not in the sync answers)", float64(led.Missing), "")
	res.add("duplicates within sync answers", float64(led.SyncDuplicates), "")
	res.add("also pushed (synced and pushed; by design)", float64(led.AlsoPushed), "")
	res.add("pushed twice (redelivered job; by design)", float64(led.PushedTwice), "")
	res.add("misrouted", float64(led.Misrouted), "")
	res.add("deliver backlog when converged (XLEN)", float64(backlog.Length), "")
	res.Passed = led.OK() && led.Acked > 0 && acked == int64(p.SyncMessages) && len(convs) == p.SyncConvs
	if !res.Passed {
		res.note("acked %d of %d sends (codes %v), %d conversations of %d, ledger %+v", acked, p.SyncMessages, t.errorCodes(), len(convs), p.SyncConvs, led)
	}
	if led.AlsoPushed > 0 {
		res.note("%d messages the device had fetched by SYNC_MESSAGES were pushed as well (deliver's backlog: %d jobs queued at convergence); a message may reach a device both ways and clients de-duplicate by msg_id (docs/protocol.md §11, docs/decisions.md 9): reported, not a duplicate", led.AlsoPushed, backlog.Length)
	}
	res.note("%d messages in %d conversations sent in %.1f s while the device was offline", acked, p.SyncConvs, sendTime.Seconds())
	res.Data["ledger"] = led
	return res, nil
}
