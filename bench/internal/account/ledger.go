// Package account checks that every acknowledged message reached its
// recipient exactly once: the ledger records what the server acknowledged
// and what each recipient received, and Check reports losses, duplicates,
// misrouted and unexpected messages.
package account

import (
	"sort"
	"sync"
)

// Ledger is safe for concurrent use.
type Ledger struct {
	mu       sync.Mutex
	acked    map[int64]uint64 // msg_id → recipient key
	received map[int64]map[uint64]int
}

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{acked: map[int64]uint64{}, received: map[int64]map[uint64]int{}}
}

// Acked records that the server acknowledged msgID for recipient (any key
// naming the recipient device, e.g. its connection index).
func (l *Ledger) Acked(msgID int64, recipient uint64) {
	l.mu.Lock()
	l.acked[msgID] = recipient
	l.mu.Unlock()
}

// Received records that recipient got msgID (a push or a sync item).
func (l *Ledger) Received(msgID int64, recipient uint64) {
	l.mu.Lock()
	m := l.received[msgID]
	if m == nil {
		m = map[uint64]int{}
		l.received[msgID] = m
	}
	m[recipient]++
	l.mu.Unlock()
}

// Has reports whether recipient received msgID at least once.
func (l *Ledger) Has(msgID int64, recipient uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.received[msgID][recipient] > 0
}

// Result is the outcome of Check.
type Result struct {
	Acked      int `json:"acked"`
	Delivered  int `json:"delivered_once"` // acked and received exactly once by its recipient
	Lost       int `json:"lost"`           // acked, never received by its recipient
	Duplicates int `json:"duplicates"`     // extra copies of acked messages
	Misrouted  int `json:"misrouted"`      // copies received by someone else than the recipient
	// Unexpected counts messages received but never acked (e.g. a send
	// that committed but whose ack timed out): not a failure, reported.
	Unexpected int     `json:"unexpected"`
	LostIDs    []int64 `json:"lost_ids,omitempty"` // first few, for debugging
}

// OK reports whether nothing acked was lost, duplicated or misrouted.
func (r Result) OK() bool { return r.Lost == 0 && r.Duplicates == 0 && r.Misrouted == 0 }

// Missing returns the acked messages their recipient has not received, by
// recipient (for a sync pass that fetches them).
func (l *Ledger) Missing() map[uint64][]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[uint64][]int64{}
	for id, rcpt := range l.acked {
		if l.received[id][rcpt] == 0 {
			out[rcpt] = append(out[rcpt], id)
		}
	}
	return out
}

// Check compares acks and receipts.
func (l *Ledger) Check() Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := Result{Acked: len(l.acked)}
	for id, rcpt := range l.acked {
		got := l.received[id]
		switch n := got[rcpt]; {
		case n == 0:
			r.Lost++
			r.LostIDs = append(r.LostIDs, id)
		case n == 1:
			r.Delivered++
		default:
			r.Delivered++
			r.Duplicates += n - 1
		}
		for who, n := range got {
			if who != rcpt {
				r.Misrouted += n
			}
		}
	}
	for id := range l.received {
		if _, ok := l.acked[id]; !ok {
			r.Unexpected++
		}
	}
	sort.Slice(r.LostIDs, func(i, j int) bool { return r.LostIDs[i] < r.LostIDs[j] })
	if len(r.LostIDs) > 20 {
		r.LostIDs = r.LostIDs[:20]
	}
	return r
}
