package server

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// reqKey pairs a Response with its Request: logic echoes all three.
type reqKey struct {
	conn uint64
	req  uint64
	seq  uint32
}

// pendingReq is a request forwarded to logic and not answered yet.
type pendingReq struct {
	key     reqKey
	command uint16
	sent    time.Time
	st      *stream
	// slots is the owning connection's in-flight count, released when the
	// request leaves the set however it leaves (nil in tests).
	slots *atomic.Int32
	elem  *list.Element
	// next chains requests with the same key (a client reusing ids while
	// one is in flight); logic answers a connection in order, so FIFO.
	next *pendingReq
	// span is the gate's span of a SEND, nil unless tracing is on.
	span trace.Span
}

// release gives the request's slot back to its connection and ends its
// span: the request left the set, answered or not.
func (p *pendingReq) release() {
	if p.slots != nil {
		p.slots.Add(-1)
	}
	if p.span != nil {
		p.span.End()
	}
}

// inflight tracks one stream's unanswered requests, bounded by max. Each
// request leaves it exactly once — answered, timed out or failed — and
// whoever removes it answers the client, so no request is answered twice.
type inflight struct {
	max int

	mu    sync.Mutex
	byKey map[reqKey]*pendingReq
	// order is by sent time; every request has the same timeout, so the
	// front is always the next to expire.
	order list.List
}

// newInflight bounds a stream's pending requests at max
// (gate.max_inflight, at least 1).
func newInflight(max int) *inflight {
	return &inflight{max: max, byKey: make(map[reqKey]*pendingReq)}
}

// add registers p, or reports false when the stream is at its bound.
func (f *inflight) add(p *pendingReq) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.order.Len() >= f.max {
		return false
	}
	p.elem = f.order.PushBack(p)
	if head := f.byKey[p.key]; head != nil {
		for head.next != nil {
			head = head.next
		}
		head.next = p
	} else {
		f.byKey[p.key] = p
	}
	return true
}

// take removes and returns the oldest request with key, or nil.
func (f *inflight) take(key reqKey) *pendingReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.byKey[key]
	if p == nil {
		return nil
	}
	f.unlinkLocked(p)
	return p
}

// remove removes p and reports whether it was still pending.
func (f *inflight) remove(p *pendingReq) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.elem == nil {
		return false
	}
	f.unlinkLocked(p)
	return true
}

func (f *inflight) unlinkLocked(p *pendingReq) {
	f.order.Remove(p.elem)
	p.elem = nil
	p.release()
	head := f.byKey[p.key]
	if head == p {
		if p.next != nil {
			f.byKey[p.key] = p.next
		} else {
			delete(f.byKey, p.key)
		}
	} else {
		for q := head; q != nil; q = q.next {
			if q.next == p {
				q.next = p.next
				break
			}
		}
	}
	p.next = nil
}

// expire removes and returns the requests sent before cutoff.
func (f *inflight) expire(cutoff time.Time) []*pendingReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*pendingReq
	for e := f.order.Front(); e != nil; e = f.order.Front() {
		p := e.Value.(*pendingReq)
		if !p.sent.Before(cutoff) {
			break
		}
		f.unlinkLocked(p)
		out = append(out, p)
	}
	return out
}

// drain removes and returns every pending request.
func (f *inflight) drain() []*pendingReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*pendingReq, 0, f.order.Len())
	for e := f.order.Front(); e != nil; e = e.Next() {
		p := e.Value.(*pendingReq)
		p.elem, p.next = nil, nil
		p.release()
		out = append(out, p)
	}
	f.order.Init()
	clear(f.byKey)
	return out
}

// len returns the number of pending requests.
func (f *inflight) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.order.Len()
}
