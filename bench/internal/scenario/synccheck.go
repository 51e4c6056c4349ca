package scenario

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sparkim/spark/bench/internal/account"
	"github.com/sparkim/spark/bench/internal/session"
	"github.com/sparkim/spark/pkg/rediskey"
)

// syncCheck is the second half of the delivery promise: for every
// recipient with acked messages that were never pushed, a control device
// of that user (a new device id, so no live session is replaced) logs in
// and fetches the conversation with SYNC_MESSAGES from just before the
// first missing id. Every message of another sender in those answers is
// recorded as synced for the recipient's ledger key; the ledger then
// classifies. It returns the number of control logins and pages' messages.
func (e *Env) syncCheck(ctx context.Context, t *traffic, gaps []account.Gap) (logins, items int, err error) {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	work := make(chan account.Gap)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range work {
				n, gerr := e.syncGap(ctx, t, g)
				mu.Lock()
				logins++
				items += n
				if gerr != nil && first == nil {
					first = gerr
				}
				mu.Unlock()
			}
		}()
	}
	for _, g := range gaps {
		select {
		case work <- g:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	return logins, items, first
}

func (e *Env) syncGap(ctx context.Context, t *traffic, g account.Gap) (int, error) {
	rcpt := t.ss[g.Recipient]
	ctl := session.New(-1, rcpt.UserID, fmt.Sprintf("check-%d-%d", rcpt.UserID, time.Now().UnixNano()))
	tok, err := e.Token(ctl.UserID, ctl.Device)
	if err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if _, err := ctl.Connect(cctx, e.Engine, e.Locals[int(g.Recipient)%len(e.Locals)], e.GateAddr(int(g.Recipient)), tok); err != nil {
		return 0, fmt.Errorf("scenario: sync check: login user %d: %w", ctl.UserID, err)
	}
	defer ctl.Close()
	msgs, err := ctl.SyncMessages(cctx, g.Conversation, g.IDs[0]-1)
	if err != nil {
		return 0, fmt.Errorf("scenario: sync check: user %d conversation %d: %w", ctl.UserID, g.Conversation, err)
	}
	n := 0
	for _, m := range msgs {
		if int64(m.SenderID) == rcpt.UserID {
			continue // the recipient's own messages are the peer's to account for
		}
		t.ledger.Synced(int64(m.MsgID), g.Recipient)
		n++
	}
	return n, nil
}

// Backlog is what the deliver queue still holds: entries in the streams
// (deliver XDELs a job once it is done) and entries read but not acked.
type Backlog struct {
	Length  int64 `json:"xlen"`
	Pending int64 `json:"xpending"`
}

// DeliverBacklog sums XLEN and XPENDING over the bench Redis's
// im:deliver:{p} streams.
func (e *Env) DeliverBacklog(ctx context.Context) (Backlog, error) {
	var b Backlog
	rdb := e.C.Redis()
	for p := 0; p < e.C.QueuePartitions(); p++ {
		k := rediskey.Deliver(p)
		n, err := rdb.XLen(ctx, k).Result()
		if err != nil {
			return b, fmt.Errorf("scenario: XLEN %s: %w", k, err)
		}
		b.Length += n
		if n == 0 {
			continue
		}
		if x, err := rdb.XPending(ctx, k, "deliver").Result(); err == nil {
			b.Pending += x.Count
		}
	}
	return b, nil
}

// waitBacklog waits up to max for the deliver queue to empty (so a
// measurement does not pay for the previous one's backlog) and returns how
// long it waited and what was left.
func (e *Env) waitBacklog(ctx context.Context, max time.Duration) (time.Duration, Backlog) {
	start := time.Now()
	for {
		b, err := e.DeliverBacklog(ctx)
		if err != nil || b.Length == 0 || time.Since(start) > max || ctx.Err() != nil {
			return time.Since(start), b
		}
		time.Sleep(250 * time.Millisecond)
	}
}
