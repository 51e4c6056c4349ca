package server

import (
	"context"
	"errors"

	"github.com/cloudwego/netpoll"
)

// streamTransport is the byte-stream carrier of the tcp and tls listeners:
// Spark frames back to back, cut by the stream decoder (decoder.go) and
// written back to back in one socket write.
type streamTransport struct {
	socket
	dec streamDecoder
}

// WriteFrames implements Transport.
func (t *streamTransport) WriteFrames(b *frameBatch) error { return t.write(b.bytes()) }

// begin implements carrierConn: the session starts as soon as the client
// is known and its handshake done, so the AUTH deadline runs from then.
func (t *streamTransport) begin() bool {
	if t.open(t) != nil {
		return true
	}
	if t.refused != nil {
		t.refuse(t)
		return false
	}
	_ = t.nc.Close()
	return false
}

// carry implements carrierConn.
func (t *streamTransport) carry(ctx context.Context, src byteSource) error {
	if t.c == nil {
		return errNoSession
	}
	return t.dec.feed(ctx, src, t)
}

// readFailed implements carrierConn: a stream that is not Spark frames
// cannot be trusted any more.
func (t *streamTransport) readFailed(err error) {
	var bad *badStreamError
	if errors.As(err, &bad) {
		t.l.sessions.badFrame(t.c, err)
		return
	}
	t.c.Close(closeReadFailed)
}

// stopTimers implements carrierConn.
func (t *streamTransport) stopTimers() { t.stopStages() }

// onClosed implements carrierConn.
func (t *streamTransport) onClosed(netpoll.Connection) error {
	t.end()
	return nil
}

// errNoSession reports that the session could not start (the socket
// closed meanwhile, or the gate is draining).
var errNoSession = errors.New("session could not start")
