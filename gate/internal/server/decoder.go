package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/sparkim/spark/pkg/frame"
)

// byteSource is the part of netpoll.Reader the carriers read through: a
// plain socket passes its netpoll reader, the TLS stage its plaintext
// buffer. Peek and Next may return slices of the source's own
// buffer, valid until it is released.
type byteSource interface {
	Len() int
	Peek(n int) ([]byte, error)
	Next(n int) ([]byte, error)
}

// frameSink receives decoded frames. onFrame's aliased says body points
// into the source's buffer and must be copied to be kept; it reports false
// when the connection is closing and decoding should stop. frameLimit is
// the largest frame the connection may send now, asked at every header:
// the session raises it once the connection has authenticated, so a
// header announcing 64 KiB before AUTH closes the connection instead of
// making it buffer 64 KiB.
type frameSink interface {
	onFrame(ctx context.Context, h frame.Header, body []byte, aliased bool) bool
	frameLimit() int
}

// errDecodeStopped reports that the sink asked to stop.
var errDecodeStopped = errors.New("decode: stopped by the session")

// badStreamError marks a byte stream that is not Spark frames (bad magic,
// version or length): the connection must close without reading further.
type badStreamError struct{ err error }

func (e *badStreamError) Error() string { return "decode: " + e.err.Error() }
func (e *badStreamError) Unwrap() error { return e.err }

// streamDecoder cuts a byte stream into Spark frames. Whole frames are
// handed out straight from the source's buffer; the start of a frame that
// has not fully arrived is moved to the decoder's own buffer, so a caller
// on netpoll can always consume every readable byte (returning from
// OnRequest with unread bytes makes netpoll call again at once, forever).
type streamDecoder struct {
	pending []byte
}

// feed decodes every complete frame in src into sink and keeps a trailing
// partial one. It returns nil when src is empty, errDecodeStopped when the
// sink stopped, a *badStreamError for a broken stream, or a read error.
func (d *streamDecoder) feed(ctx context.Context, src byteSource, sink frameSink) error {
	for {
		n := src.Len()
		if n == 0 {
			return nil
		}
		if len(d.pending) > 0 || n < frame.HeaderSize {
			if err := d.assemble(ctx, src, sink); err != nil {
				return err
			}
			continue
		}
		hb, err := src.Peek(frame.HeaderSize)
		if err != nil {
			return fmt.Errorf("decode: peek header: %w", err)
		}
		h, err := frame.ParseHeader(hb, sink.frameLimit())
		if err != nil {
			return &badStreamError{err}
		}
		total := frame.HeaderSize + int(h.BodyLength)
		if n < total {
			if err := d.assemble(ctx, src, sink); err != nil {
				return err
			}
			continue
		}
		b, err := src.Next(total)
		if err != nil {
			return fmt.Errorf("decode: read frame: %w", err)
		}
		if !sink.onFrame(ctx, h, b[frame.HeaderSize:], true) {
			return errDecodeStopped
		}
	}
}

// assemble moves bytes of a partial frame into d.pending and hands the
// frame out once it is complete.
func (d *streamDecoder) assemble(ctx context.Context, src byteSource, sink frameSink) error {
	if len(d.pending) < frame.HeaderSize {
		take := min(frame.HeaderSize-len(d.pending), src.Len())
		b, err := src.Next(take)
		if err != nil {
			return fmt.Errorf("decode: read header: %w", err)
		}
		d.pending = append(d.pending, b...)
		if len(d.pending) < frame.HeaderSize {
			// Garbage is visible before the header is complete.
			if _, _, _, err := frame.Decode(d.pending, sink.frameLimit()); err != nil {
				return &badStreamError{err}
			}
			return nil
		}
	}
	h, err := frame.ParseHeader(d.pending, sink.frameLimit())
	if err != nil {
		return &badStreamError{err}
	}
	total := frame.HeaderSize + int(h.BodyLength)
	if d.pending, err = fillTo(d.pending, total, src); err != nil {
		return fmt.Errorf("decode: read body: %w", err)
	}
	if len(d.pending) < total {
		return nil
	}
	body := d.pending[frame.HeaderSize:total]
	// The body may now be owned by a forwarded request; never reuse it.
	d.pending = nil
	if !sink.onFrame(ctx, h, body, false) {
		return errDecodeStopped
	}
	return nil
}

// fillTo appends to pending what src holds of a unit (a frame, a
// WebSocket message) of total bytes, never past its end. The first call
// sizes pending for the whole unit, so a large one arriving in many reads
// is copied once.
func fillTo(pending []byte, total int, src byteSource) ([]byte, error) {
	need := total - len(pending)
	if need <= 0 {
		return pending, nil
	}
	if cap(pending) < total {
		grown := make([]byte, len(pending), total)
		copy(grown, pending)
		pending = grown
	}
	b, err := src.Next(min(need, src.Len()))
	if err != nil {
		return pending, err
	}
	return append(pending, b...), nil
}
