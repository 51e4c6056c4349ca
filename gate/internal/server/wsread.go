package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/gobwas/ws"

	"github.com/sparkim/spark/pkg/frame"
)

// wsHeaderLen returns the length of the frame header starting b, or 0
// when b does not yet show it.
func wsHeaderLen(b []byte) int {
	if len(b) < 2 {
		return 0
	}
	n := 2
	switch b[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if b[1]&0x80 != 0 {
		n += 4
	}
	return n
}

// parseWSHeader parses the complete header at the start of b and checks
// the limits that must hold before any payload is read.
func (t *wsTransport) parseWSHeader(b []byte) (ws.Header, int, error) {
	hl := wsHeaderLen(b)
	h, err := ws.ReadHeader(bytes.NewReader(b[:hl]))
	if err != nil {
		return h, 0, &wsCloseError{ws.StatusProtocolError, "bad frame header"}
	}
	switch {
	case !h.Masked:
		return h, 0, &wsCloseError{ws.StatusProtocolError, "client frame not masked"}
	case h.Rsv != 0:
		return h, 0, &wsCloseError{ws.StatusProtocolError, "reserved bits set"}
	case h.OpCode.IsControl() && (!h.Fin || h.Length > ws.MaxControlFramePayloadSize):
		return h, 0, &wsCloseError{ws.StatusProtocolError, "bad control frame"}
	case h.OpCode == ws.OpText:
		return h, 0, &wsCloseError{ws.StatusUnsupportedData, "text messages are not accepted"}
	case h.OpCode.IsReserved():
		return h, 0, &wsCloseError{ws.StatusProtocolError, "reserved opcode"}
	case h.Length > int64(t.frameLimit()) || (!h.OpCode.IsControl() && int64(len(t.msg))+h.Length > int64(t.frameLimit())):
		return h, 0, &wsCloseError{ws.StatusMessageTooBig, "message over the frame size limit"}
	}
	return h, hl, nil
}

// feedWS decodes every complete WebSocket frame in r and keeps a trailing
// partial one. It returns nil when r is empty, errDecodeStopped when the
// session stopped, a *wsCloseError for a protocol violation, or a read
// error.
func (t *wsTransport) feedWS(ctx context.Context, r byteSource) error {
	for {
		n := r.Len()
		if n == 0 {
			return nil
		}
		if len(t.pending) == 0 {
			peek, err := r.Peek(min(n, wsMaxHeader))
			if err != nil {
				return fmt.Errorf("ws: peek header: %w", err)
			}
			if hl := wsHeaderLen(peek); hl > 0 && hl <= len(peek) {
				h, hl, err := t.parseWSHeader(peek)
				if err != nil {
					return err
				}
				if total := hl + int(h.Length); n >= total {
					b, err := r.Next(total)
					if err != nil {
						return fmt.Errorf("ws: read frame: %w", err)
					}
					if err := t.wsFrame(ctx, h, b[hl:], true); err != nil {
						return err
					}
					continue
				}
			}
		}
		if err := t.assembleWS(ctx, r); err != nil {
			return err
		}
	}
}

// assembleWS moves bytes of a partial frame into the connection's buffer,
// never past the frame's end, and handles the frame once complete.
func (t *wsTransport) assembleWS(ctx context.Context, r byteSource) error {
	hl := wsHeaderLen(t.pending)
	if hl == 0 || len(t.pending) < hl {
		need := 2 - len(t.pending)
		if hl > 0 {
			need = hl - len(t.pending)
		}
		b, err := r.Next(min(need, r.Len()))
		if err != nil {
			return fmt.Errorf("ws: read header: %w", err)
		}
		t.pending = append(t.pending, b...)
		return nil
	}
	h, hl, err := t.parseWSHeader(t.pending)
	if err != nil {
		return err
	}
	total := hl + int(h.Length)
	if t.pending, err = fillTo(t.pending, total, r); err != nil {
		return fmt.Errorf("ws: read payload: %w", err)
	}
	if len(t.pending) < total {
		return nil
	}
	payload := t.pending[hl:total]
	// The payload may now be owned by a forwarded request; never reuse it.
	t.pending = nil
	return t.wsFrame(ctx, h, payload, false)
}

// wsFrame handles one complete, checked client frame. aliased says payload
// points into a buffer that is reused once OnRequest returns.
func (t *wsTransport) wsFrame(ctx context.Context, h ws.Header, payload []byte, aliased bool) error {
	ws.Cipher(payload, h.Mask, 0)
	switch h.OpCode {
	case ws.OpPing:
		return t.writeControl(ws.NewPongFrame(payload))
	case ws.OpPong:
		return nil
	case ws.OpClose:
		code, _ := ws.ParseCloseFrameData(payload)
		if code == 0 {
			code = ws.StatusNormalClosure
		}
		_ = t.writeControl(ws.NewCloseFrame(ws.NewCloseFrameBody(code, "")))
		return &wsCloseError{code: 0, reason: "client closed"}
	case ws.OpBinary:
		if t.inMsg {
			return &wsCloseError{ws.StatusProtocolError, "new message inside a fragmented one"}
		}
		if !h.Fin {
			t.inMsg, t.msg = true, append([]byte(nil), payload...)
			return nil
		}
		return t.wsMessage(ctx, payload, aliased)
	case ws.OpContinuation:
		if !t.inMsg {
			return &wsCloseError{ws.StatusProtocolError, "continuation without a message"}
		}
		t.msg = append(t.msg, payload...)
		if !h.Fin {
			return nil
		}
		msg := t.msg
		t.inMsg, t.msg = false, nil
		return t.wsMessage(ctx, msg, false)
	}
	return &wsCloseError{ws.StatusProtocolError, "unexpected opcode"}
}

// wsMessage hands a binary message, which must be exactly one Spark frame,
// to the session.
func (t *wsTransport) wsMessage(ctx context.Context, msg []byte, aliased bool) error {
	fh, body, n, err := frame.Decode(msg, t.frameLimit())
	switch {
	case errors.Is(err, frame.ErrTooLarge):
		return &wsCloseError{ws.StatusMessageTooBig, "frame over the frame size limit"}
	case err != nil, n == 0, n != len(msg):
		return &wsCloseError{ws.StatusInvalidFramePayloadData, "message is not exactly one Spark frame"}
	}
	if !t.onFrame(ctx, fh, body, aliased) {
		return errDecodeStopped
	}
	return nil
}
