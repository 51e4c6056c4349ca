package server

import (
	"sync"

	"github.com/sparkim/spark/pkg/frame"
)

// The gate has two layers, and data flows one way through them: listener
// → carrier → session → upstream for what a client sends, push or logic's
// answer → session → carrier for what it is sent.
//
// A carrier carries one client's Spark frames and nothing else. Each
// accepted socket runs the stages its listener asks for, each done before
// the next sees a byte: a PROXY header (proxy.go), a TLS handshake
// (tls.go), then one of two carriers: streamTransport (stream.go), Spark
// frames back to back on a byte stream (the tcp and tls listeners), or
// wsTransport (ws.go), one Spark frame per WebSocket binary message (ws
// and wss). The stages and their socket are socket.go; the listeners and
// netpoll's callbacks listener.go.
//
// The session layer (session.go, conn.go, outbound.go, push.go) owns
// everything else: whether a connection gets a session at all (the caps,
// limits.go), the frame size it may send, the AUTH deadline, forwarding,
// the outbound queue, pushes, kicks and close reasons. It never learns
// which carrier carried a frame: a carrier hands decoded frames up through
// sessionLayer and the session writes and closes only through Transport,
// so a new carrier adds a file, not a copy of the session loop.

// Transport is the session layer's view of whatever carries a connection's
// frames.
type Transport interface {
	// WriteFrames writes the whole frames of b within the write timeout:
	// a byte stream back to back, WebSocket one binary message each, in
	// one socket write either way. Only the connection's single flusher
	// calls it (and a refusal, before any session), so an implementation
	// needs no lock against itself.
	WriteFrames(b *frameBatch) error
	// Close closes the carrier at once. The carrier then calls
	// sessionLayer.closeSession exactly once, whoever closed it.
	Close() error
	// Kind names the carrier in logs and the per-carrier gauge: "tcp",
	// "tls", "ws" or "wss".
	Kind() string
}

// frameBatch is whole encoded Spark frames back to back in one buffer,
// with where each ends, so a carrier can write them as one run of bytes
// or one message each without parsing them apart again.
type frameBatch struct {
	buf  []byte
	ends []int
}

// add encodes one frame at the end of the batch.
func (b *frameBatch) add(h frame.Header, body []byte) {
	b.buf = frame.Append(b.buf, h, body)
	b.ends = append(b.ends, len(b.buf))
}

// bytes returns every frame, back to back.
func (b *frameBatch) bytes() []byte { return b.buf }

// len returns the number of frames.
func (b *frameBatch) len() int { return len(b.ends) }

// frame returns the i-th encoded frame.
func (b *frameBatch) frame(i int) []byte {
	start := 0
	if i > 0 {
		start = b.ends[i-1]
	}
	return b.buf[start:b.ends[i]]
}

// batches recycles frame batches so an idle connection holds none.
var batches = sync.Pool{New: func() any { return &frameBatch{buf: make([]byte, 0, 4096)} }}

// maxPooledBuf keeps one large frame from pinning a big buffer in the pool;
// maxPooledEnds does the same for a long batch.
const (
	maxPooledBuf  = 64 << 10
	maxPooledEnds = 1024
)

// getBatch returns an empty batch from the pool.
func getBatch() *frameBatch { return batches.Get().(*frameBatch) }

// putBatch returns b to the pool unless it grew too large to keep.
func putBatch(b *frameBatch) {
	if cap(b.buf) > maxPooledBuf || cap(b.ends) > maxPooledEnds {
		return
	}
	b.buf, b.ends = b.buf[:0], b.ends[:0]
	batches.Put(b)
}
