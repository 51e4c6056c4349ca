// Package account checks the system's delivery promise: every message the
// server acknowledged is stored exactly once and reaches every recipient
// device by push or by sync (docs/protocol.md §11: a message may arrive both ways,
// clients de-duplicate by msg_id). The ledger records what was acked, every
// push (with its time) and every item of a SYNC_MESSAGES answer, kept
// apart, and Classify sorts each acked message into pushed in time, pushed
// late, only by sync or lost.
//
// What is a failure and what is not:
//   - lost (neither pushed nor in a sync answer), misrouted (received by a
//     device it was not addressed to) and a duplicate INSIDE sync answers
//     (the same msg_id returned twice to one device: the store or the
//     paging repeats a message) fail;
//   - a push repeating a synced message ("also pushed") and the same push
//     twice ("pushed twice": a redelivered deliver job pushes again by
//     design) are reported, not failed.
package account

import (
	"sort"
	"sync"
	"time"
)

// Ledger is safe for concurrent use.
type Ledger struct {
	mu     sync.Mutex
	acked  map[int64]ack
	pushed map[int64]map[uint64]*push
	synced map[int64]map[uint64]int
}

type ack struct {
	recipient    uint64
	conversation int64
}

type push struct {
	n     int
	first time.Time
}

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{acked: map[int64]ack{}, pushed: map[int64]map[uint64]*push{}, synced: map[int64]map[uint64]int{}}
}

// Acked records that the server acknowledged msgID in conversation for
// recipient (any key naming the recipient device, e.g. its session index).
func (l *Ledger) Acked(msgID int64, recipient uint64, conversation int64) {
	l.mu.Lock()
	l.acked[msgID] = ack{recipient: recipient, conversation: conversation}
	l.mu.Unlock()
}

// AckedIDs returns every acknowledged msgID, in no order.
func (l *Ledger) AckedIDs() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]int64, 0, len(l.acked))
	for id := range l.acked {
		out = append(out, id)
	}
	return out
}

// Pushed records that recipient got msgID as a MESSAGE push at time at.
func (l *Ledger) Pushed(msgID int64, recipient uint64, at time.Time) {
	l.mu.Lock()
	m := l.pushed[msgID]
	if m == nil {
		m = map[uint64]*push{}
		l.pushed[msgID] = m
	}
	if p := m[recipient]; p != nil {
		p.n++
		if at.Before(p.first) {
			p.first = at
		}
	} else {
		m[recipient] = &push{n: 1, first: at}
	}
	l.mu.Unlock()
}

// Synced records that a SYNC_MESSAGES answer to recipient held msgID.
func (l *Ledger) Synced(msgID int64, recipient uint64) {
	l.mu.Lock()
	m := l.synced[msgID]
	if m == nil {
		m = map[uint64]int{}
		l.synced[msgID] = m
	}
	m[recipient]++
	l.mu.Unlock()
}

// PushedCount is the number of acked messages their recipient got by push
// at least once (a cheap progress figure while waiting).
func (l *Ledger) PushedCount() (pushed, acked int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, a := range l.acked {
		if l.pushed[id][a.recipient] != nil {
			pushed++
		}
	}
	return pushed, len(l.acked)
}

// Gap is the acked messages of one (recipient, conversation) that were
// never pushed: what a sync check has to fetch.
type Gap struct {
	Recipient    uint64
	Conversation int64
	IDs          []int64 // ascending
}

// NotPushed returns the acked messages their recipient had not got by push
// at time by (zero: at all), per recipient and conversation, ordered by
// recipient: the same cut Classify makes with graceEnd = by.
func (l *Ledger) NotPushed(by time.Time) []Gap {
	l.mu.Lock()
	type key struct {
		r uint64
		c int64
	}
	gaps := map[key][]int64{}
	for id, a := range l.acked {
		if p := l.pushed[id][a.recipient]; p == nil || !by.IsZero() && p.first.After(by) {
			k := key{a.recipient, a.conversation}
			gaps[k] = append(gaps[k], id)
		}
	}
	l.mu.Unlock()
	out := make([]Gap, 0, len(gaps))
	for k, ids := range gaps {
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		out = append(out, Gap{Recipient: k.r, Conversation: k.c, IDs: ids})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Recipient != out[j].Recipient {
			return out[i].Recipient < out[j].Recipient
		}
		return out[i].Conversation < out[j].Conversation
	})
	return out
}

// Result is the outcome of Classify. Every acked message is in exactly one
// of InTime, Late, SyncOnly and Lost.
type Result struct {
	Acked    int `json:"acked"`
	InTime   int `json:"pushed_in_time"` // first push by the cutoff (the end of the measured window)
	Late     int `json:"pushed_late"`    // first push after the cutoff, by the end of the grace period
	SyncOnly int `json:"only_by_sync"`   // no push by the end of the grace period, in a sync answer
	Lost     int `json:"lost"`           // neither: FAIL
	// AfterGrace counts SyncOnly messages whose push came after all,
	// after the grace period (informational).
	AfterGrace int `json:"pushed_after_grace"`
	// Synced counts acked messages present in a sync answer to their
	// recipient (whether or not they were pushed too).
	Synced int `json:"synced"`
	// AlsoPushed counts synced messages that were pushed as well (a push
	// after the sync, or before it): by design, not a duplicate.
	AlsoPushed int `json:"also_pushed"`
	// PushedTwice counts extra pushes of a message to its recipient
	// device beyond the first (a redelivered job): reported, not failed.
	PushedTwice int `json:"pushed_twice"`
	// SyncDuplicates counts extra copies of a message within the sync
	// answers to one device: FAIL.
	SyncDuplicates int `json:"sync_duplicates"`
	// Misrouted counts copies (push or sync) that reached a device the
	// message was not acked for: FAIL.
	Misrouted int `json:"misrouted"`
	// Unexpected counts messages received but never acked (e.g. a send
	// that committed but whose ack timed out): not a failure, reported.
	Unexpected int     `json:"unexpected"`
	LostIDs    []int64 `json:"lost_ids,omitempty"` // first few, for debugging
}

// OK reports whether nothing acked was lost, misrouted or repeated inside
// sync answers.
func (r Result) OK() bool { return r.Lost == 0 && r.SyncDuplicates == 0 && r.Misrouted == 0 }

// Delivered is the number of acked messages that reached their recipient
// one way or the other.
func (r Result) Delivered() int { return r.InTime + r.Late + r.SyncOnly }

// Classify sorts every acked message by how it reached its recipient: a
// first push at or before cutoff is in time, one by graceEnd late;
// otherwise it counts only if a sync answer held it. Pushes after graceEnd
// do not save a message the sync check did not find (the acked message
// must be in the store). A zero cutoff or graceEnd means "no limit".
func (l *Ledger) Classify(cutoff, graceEnd time.Time) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	by := func(t, limit time.Time) bool { return limit.IsZero() || !t.After(limit) }
	r := Result{Acked: len(l.acked)}
	for id, a := range l.acked {
		p := l.pushed[id][a.recipient]
		syncN := l.synced[id][a.recipient]
		switch {
		case p != nil && by(p.first, cutoff):
			r.InTime++
		case p != nil && by(p.first, graceEnd):
			r.Late++
		case syncN > 0:
			r.SyncOnly++
			if p != nil {
				r.AfterGrace++
			}
		default:
			r.Lost++
			r.LostIDs = append(r.LostIDs, id)
		}
		if p != nil {
			r.PushedTwice += p.n - 1
		}
		if syncN > 0 {
			r.Synced++
			r.SyncDuplicates += syncN - 1
			if p != nil {
				r.AlsoPushed++
			}
		}
		for who, q := range l.pushed[id] {
			if who != a.recipient {
				r.Misrouted += q.n
			}
		}
		for who, n := range l.synced[id] {
			if who != a.recipient {
				r.Misrouted += n
			}
		}
	}
	for id := range l.pushed {
		if _, ok := l.acked[id]; !ok {
			r.Unexpected++
		}
	}
	for id := range l.synced {
		if _, ok := l.acked[id]; !ok {
			if _, counted := l.pushed[id]; !counted {
				r.Unexpected++
			}
		}
	}
	sort.Slice(r.LostIDs, func(i, j int) bool { return r.LostIDs[i] < r.LostIDs[j] })
	if len(r.LostIDs) > 20 {
		r.LostIDs = r.LostIDs[:20]
	}
	return r
}

// SyncResult is the outcome of CheckSync: the sync answers alone against
// the acks, for a device that was offline while every message was sent.
type SyncResult struct {
	Acked          int     `json:"acked"`
	Synced         int     `json:"synced_once"`     // acked and in the sync answers exactly once
	Missing        int     `json:"missing_in_sync"` // acked, absent from the sync answers: FAIL
	SyncDuplicates int     `json:"sync_duplicates"` // extra copies inside the sync answers: FAIL
	AlsoPushed     int     `json:"also_pushed"`     // synced and pushed as well: by design, reported
	PushedTwice    int     `json:"pushed_twice"`    // extra pushes beyond the first: reported
	Misrouted      int     `json:"misrouted"`       // FAIL
	Unexpected     int     `json:"unexpected"`      // in sync or pushed, never acked: reported
	MissingIDs     []int64 `json:"missing_ids,omitempty"`
}

// OK reports whether the sync answers held every acked message exactly
// once and nothing went to another device.
func (r SyncResult) OK() bool {
	return r.Missing == 0 && r.SyncDuplicates == 0 && r.Misrouted == 0
}

// CheckSync checks that the sync answers contain every acked message
// exactly once; pushes only add the informational counts.
func (l *Ledger) CheckSync() SyncResult {
	c := l.Classify(time.Time{}, time.Time{})
	l.mu.Lock()
	defer l.mu.Unlock()
	r := SyncResult{Acked: c.Acked, SyncDuplicates: c.SyncDuplicates, AlsoPushed: c.AlsoPushed,
		PushedTwice: c.PushedTwice, Misrouted: c.Misrouted, Unexpected: c.Unexpected}
	for id, a := range l.acked {
		if l.synced[id][a.recipient] == 0 {
			r.Missing++
			r.MissingIDs = append(r.MissingIDs, id)
		} else {
			r.Synced++
		}
	}
	sort.Slice(r.MissingIDs, func(i, j int) bool { return r.MissingIDs[i] < r.MissingIDs[j] })
	if len(r.MissingIDs) > 20 {
		r.MissingIDs = r.MissingIDs[:20]
	}
	return r
}
