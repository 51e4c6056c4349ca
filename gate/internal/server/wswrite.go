package server

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/gobwas/ws"
	"go.uber.org/zap"
)

// writeControl queues a control frame (pong, close) from the event loop
// and writes it at once if no one is writing. It never waits for the
// flusher: a flusher stuck on a client that does not read would hold the
// connection's handler for the whole write timeout. The flusher writes
// what was queued meanwhile when its write ends (unlockWrite).
func (t *wsTransport) writeControl(f ws.Frame) error {
	b, err := ws.CompileFrame(f)
	if err != nil {
		return fmt.Errorf("ws: compile control frame: %w", err)
	}
	t.cmu.Lock()
	t.ctrl = append(t.ctrl, b...)
	t.cmu.Unlock()
	if !t.wmu.TryLock() {
		return nil
	}
	err = t.writeQueuedControl()
	t.unlockWrite()
	return err
}

// writeQueuedControl writes the queued control frames; wmu must be held.
// The frames leave the queue only once written, so awaitControl does not
// let the socket close under a close frame still being written. Frames
// queued meanwhile are appended past b, which therefore stays intact.
func (t *wsTransport) writeQueuedControl() error {
	t.cmu.Lock()
	b := t.ctrl
	t.cmu.Unlock()
	if len(b) == 0 {
		return nil
	}
	err := t.write(b)
	// Dropped even on error: a socket that failed once is closing, and
	// unlockWrite would otherwise retry the same bytes for ever.
	t.cmu.Lock()
	t.ctrl = t.ctrl[len(b):]
	if len(t.ctrl) == 0 {
		t.ctrl = nil
	}
	t.cmu.Unlock()
	if err != nil {
		return fmt.Errorf("ws: write control frame: %w", err)
	}
	return nil
}

// unlockWrite releases wmu, then writes control frames the event loop
// queued after the holder's last look, unless someone else took the lock
// (and with it the duty).
func (t *wsTransport) unlockWrite() {
	for {
		t.wmu.Unlock()
		t.cmu.Lock()
		empty := len(t.ctrl) == 0
		t.cmu.Unlock()
		if empty || !t.wmu.TryLock() {
			return
		}
		_ = t.writeQueuedControl()
	}
}

// awaitControl waits, at most bound, until queued control frames are
// written, so a close frame goes out before the socket closes. A flusher
// that cannot finish within the bound is writing to a client that does
// not read; that client gets the bare TCP close.
func (t *wsTransport) awaitControl(bound time.Duration) {
	const step = 500 * time.Microsecond
	for waited := time.Duration(0); waited < bound; waited += step {
		t.cmu.Lock()
		empty := len(t.ctrl) == 0
		t.cmu.Unlock()
		if empty {
			return
		}
		time.Sleep(step)
	}
}

// WriteFrames implements Transport: each Spark frame of b goes as one
// binary message, all of them in one socket write.
func (t *wsTransport) WriteFrames(b *frameBatch) error {
	op := wsOutBufs.Get().(*[]byte)
	out := (*op)[:0]
	for i := range b.len() {
		f := b.frame(i)
		out = appendBinaryHeader(out, len(f))
		out = append(out, f...)
	}
	t.wmu.Lock()
	err := t.write(out)
	if err == nil {
		err = t.writeQueuedControl()
	} else {
		err = fmt.Errorf("ws: write: %w", err)
	}
	t.unlockWrite()
	if cap(out) <= maxPooledBuf {
		*op = out[:0]
		wsOutBufs.Put(op)
	}
	return err
}

// wsOutBufs recycles the buffers messages are framed in, so an idle
// connection holds none.
var wsOutBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// appendBinaryHeader appends the header of a server's (unmasked) final
// binary frame of n payload bytes (RFC 6455 5.2).
func appendBinaryHeader(dst []byte, n int) []byte {
	const finBinary = 0x80 | byte(ws.OpBinary)
	switch {
	case n < 126:
		return append(dst, finBinary, byte(n))
	case n <= 0xffff:
		return append(dst, finBinary, 126, byte(n>>8), byte(n))
	default:
		return binary.BigEndian.AppendUint64(append(dst, finBinary, 127), uint64(n))
	}
}

// closeWS ends a connection that broke the WebSocket rules: a close frame
// with the reason's code first (code 0: the client's close was already
// answered), then the socket.
func (t *wsTransport) closeWS(e *wsCloseError) {
	if e.code != 0 {
		_ = t.writeControl(ws.NewCloseFrame(ws.NewCloseFrameBody(e.code, e.reason)))
		t.l.log.Debug("ws protocol error, closing", zap.Uint64("conn_id", t.c.id), zap.String("real_ip", t.realIP),
			zap.Int("code", int(e.code)), zap.String("reason", e.reason))
	}
	t.awaitControl(wsCloseWait)
	why := closeWSProtocol
	if e.code == 0 {
		why = closeWSClient
	}
	t.c.Close(why)
}
