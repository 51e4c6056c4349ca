package server

import (
	"sync"

	"github.com/sparkim/spark/pkg/frame"
)

// frameKind decides how a frame is treated when the queue is full.
type frameKind uint8

const (
	// kindPush frames are realtime pushes: dropped when the queue is full,
	// the client catches up by sync.
	kindPush frameKind = iota
	// kindResponse frames answer a request; they get their own headroom so
	// a push storm cannot starve a client's answers.
	kindResponse
	// kindControl frames (KICK, the last answer before a close) are always
	// queued: the connection is about to close, so they cannot grow it.
	kindControl
	// kindSignal frames (SIGNAL: typing, custom signals) are dropped first:
	// once a quarter of the push budget waits, so a connection that falls
	// behind spends what room it has on messages (decision 102).
	kindSignal
)

// signalShare is the part of the push budget signals may fill.
const signalShare = 4

// enqueueResult tells the caller what happened to a frame.
type enqueueResult uint8

const (
	queued enqueueResult = iota
	queueFull
	queueClosed
)

// outFrame is one frame waiting to be written. body may be shared by many
// connections (one Push to many targets) and is never modified.
type outFrame struct {
	hdr   frame.Header
	body  []byte
	kind  frameKind
	close bool // close the connection once this frame is written
}

// sink is where an Outbound writes. write must return within the write
// timeout; an error means the connection is unusable.
type sink interface {
	write(b *frameBatch) error
	shutdown(r closeReason)
}

// Outbound is a connection's bounded write queue. At most one flusher runs
// at a time (netpoll rejects concurrent writes), and it only exists while
// there is something to write: an idle connection costs no goroutine.
type Outbound struct {
	sink  sink
	limit int
	// written is called with the number of frames each successful write
	// carried.
	written func(n int)

	mu       sync.Mutex
	queue    []outFrame
	flushing bool
	closed   bool // a closing frame is queued or the connection is gone
	// finishing closes the connection once the queue is written out.
	finishing bool
}

// NewOutbound returns a queue holding at most limit pushes
// (gate.outbound_queue, at least 1).
func NewOutbound(s sink, limit int, written func(int)) *Outbound {
	return &Outbound{sink: s, limit: limit, written: written}
}

// Enqueue adds f and starts a flusher when none runs. It never blocks.
func (o *Outbound) Enqueue(f outFrame) enqueueResult {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return queueClosed
	}
	n := len(o.queue)
	switch {
	case f.kind == kindSignal && n >= max(o.limit/signalShare, 1),
		f.kind == kindPush && n >= o.limit,
		f.kind == kindResponse && n >= 2*o.limit:
		o.mu.Unlock()
		return queueFull
	}
	o.queue = append(o.queue, f)
	if f.close {
		o.closed = true
	}
	start := !o.flushing
	o.flushing = true
	o.mu.Unlock()
	if start {
		go o.flush()
	}
	return queued
}

// Closing reports whether the queue takes no more frames: the connection
// is closing once what is queued has been written.
func (o *Outbound) Closing() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed
}

// Len returns the number of queued frames.
func (o *Outbound) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.queue)
}

// Finish refuses further frames and closes the connection once what is
// queued has been written. It reports true when nothing was queued, in
// which case the caller closes the connection itself.
func (o *Outbound) Finish() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	if !o.flushing {
		return true
	}
	o.finishing = true
	return false
}

// Close refuses further frames and discards queued ones; the connection
// is gone.
func (o *Outbound) Close() {
	o.mu.Lock()
	o.closed = true
	o.queue = nil
	o.mu.Unlock()
}

func (o *Outbound) flush() {
	for {
		o.mu.Lock()
		batch := o.queue
		o.queue = nil
		if len(batch) == 0 {
			o.flushing = false
			fin := o.finishing
			o.mu.Unlock()
			if fin {
				o.sink.shutdown(closeShutdown)
			}
			return
		}
		o.mu.Unlock()

		// One write per batch: every Write is a syscall.
		b := getBatch()
		closeAfter := false
		for i := range batch {
			b.add(batch[i].hdr, batch[i].body)
			if batch[i].close {
				closeAfter = true
				break
			}
		}
		n := len(batch)
		clear(batch) // drop references to shared bodies early
		err := o.sink.write(b)
		putBatch(b)
		if err != nil {
			o.stop()
			o.sink.shutdown(closeWriteFailed)
			return
		}
		if o.written != nil {
			o.written(n)
		}
		if closeAfter {
			o.stop()
			o.sink.shutdown(closeAfterAnswer)
			return
		}
	}
}

// stop ends flushing for good: the connection is being closed.
func (o *Outbound) stop() {
	o.mu.Lock()
	o.closed = true
	o.queue = nil
	o.flushing = false
	o.mu.Unlock()
}
