package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparkim/spark/bench/internal/account"
	"github.com/sparkim/spark/bench/internal/hist"
	"github.com/sparkim/spark/bench/internal/session"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// traffic sends one-to-one messages between sessions and accounts for
// every one: SEND_ACK latency, end-to-end latency (send time embedded in
// client_msg_id, read back from the recipient's MESSAGE, both taken in this
// process), the ledger of acked and received msg_ids, and error codes.
type traffic struct {
	ss     []*session.Session
	peer   func(i int) int // recipient session index of sender i
	window int64
	ledger *account.Ledger
	ack    *hist.Series
	e2e    *hist.Series

	inflight []atomic.Int64
	seq      []atomic.Int64
	sent     atomic.Int64
	acked    atomic.Int64
	received atomic.Int64
	skipped  atomic.Int64 // due by the schedule but the sender's window was full
	failed   atomic.Int64 // no answer: connection closed or timed out
	mu       sync.Mutex
	codes    map[string]int
}

func newTraffic(ss []*session.Session, peer func(int) int, window int, start time.Time) *traffic {
	t := &traffic{ss: ss, peer: peer, window: int64(window), ledger: account.New(),
		ack: hist.NewSeries(start, time.Second), e2e: hist.NewSeries(start, time.Second),
		inflight: make([]atomic.Int64, len(ss)), seq: make([]atomic.Int64, len(ss)), codes: map[string]int{}}
	for _, s := range ss {
		s.OnPush = t.onPush
	}
	return t
}

type pushMsg struct {
	MsgID       jsonid.ID `json:"msg_id"`
	ClientMsgID string    `json:"client_msg_id"`
}

func (t *traffic) onPush(s *session.Session, h frame.Header, body []byte) {
	if h.Command != protocol.CmdMessage {
		return
	}
	now := time.Now()
	var env struct {
		Data pushMsg `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		t.code("bad MESSAGE")
		return
	}
	t.ledger.Pushed(int64(env.Data.MsgID), uint64(s.Index), now)
	t.received.Add(1)
	if sentNs, ok := sentAt(env.Data.ClientMsgID); ok {
		t.e2e.Record(now, now.Sub(time.Unix(0, sentNs)))
	}
}

// sentAt reads the send time from a client_msg_id "b<unix ns>-<i>-<seq>".
func sentAt(cmid string) (int64, bool) {
	if !strings.HasPrefix(cmid, "b") {
		return 0, false
	}
	end := strings.IndexByte(cmid, '-')
	if end < 0 {
		return 0, false
	}
	ns, err := strconv.ParseInt(cmid[1:end], 10, 64)
	return ns, err == nil
}

func (t *traffic) code(c string) {
	t.mu.Lock()
	t.codes[c]++
	t.mu.Unlock()
}

// send sends one message from sender i unless its window is full; done,
// when not nil, is called with the ack's msg_id (0 on failure).
func (t *traffic) send(i int, done func(msgID int64)) bool {
	if t.inflight[i].Load() >= t.window {
		t.skipped.Add(1)
		return false
	}
	s, to := t.ss[i], t.ss[t.peer(i)]
	seq := t.seq[i].Add(1)
	t.inflight[i].Add(1)
	now := time.Now()
	body := fmt.Appendf(nil, `{"to_user_id":"%d","client_msg_id":"b%d-%d-%d","message_type":1,"content":{"t":1,"text":"benchmark message %d from %d"}}`,
		to.UserID, now.UnixNano(), i, seq, seq, s.UserID)
	err := s.Request(protocol.CmdSendMessage, body, func(r session.Reply) {
		t.inflight[i].Add(-1)
		var id int64
		switch {
		case r.Err != nil:
			t.failed.Add(1)
		case r.Code != "0":
			t.code(r.Code)
		default:
			var a protocol.SendAck
			if err := json.Unmarshal(r.Data, &a); err != nil || a.MsgID == 0 {
				t.code("bad SEND_ACK")
				break
			}
			id = int64(a.MsgID)
			t.ledger.Acked(id, uint64(to.Index), int64(a.ConversationID))
			t.acked.Add(1)
			t.ack.Record(time.Now(), r.RTT)
		}
		if done != nil {
			done(id)
		}
	})
	if err != nil {
		t.inflight[i].Add(-1)
		t.failed.Add(1)
		if done != nil {
			done(0)
		}
		return false
	}
	t.sent.Add(1)
	return true
}

// pace sends at rate msg/s in total, round robin over senders, until ctx
// ends or d passes.
func (t *traffic) pace(ctx context.Context, senders []int, rate float64, d time.Duration) {
	start := time.Now()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var issued int64
	next := 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			el := now.Sub(start)
			if el >= d {
				return
			}
			due := int64(rate * el.Seconds())
			for ; issued < due; issued++ {
				t.send(senders[next%len(senders)], nil)
				next++
			}
		}
	}
}

// drain waits until no send is in flight, failing answers older than
// timeout.
func (t *traffic) drain(ctx context.Context, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		busy := false
		for i := range t.inflight {
			if t.inflight[i].Load() > 0 {
				busy = true
				break
			}
		}
		if !busy {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, s := range t.ss {
		s.ExpireOlder(time.Now())
	}
}

// settle waits up to grace for every acked message to be pushed and
// returns when the wait ended (the end of the grace period for Classify).
func (t *traffic) settle(ctx context.Context, grace time.Duration) time.Time {
	deadline := time.Now().Add(grace)
	for {
		pushed, acked := t.ledger.PushedCount()
		now := time.Now()
		if pushed == acked || now.After(deadline) || ctx.Err() != nil {
			return now
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (t *traffic) errorCodes() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int{}
	for k, v := range t.codes {
		out[k] = v
	}
	return out
}
