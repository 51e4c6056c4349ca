package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/gobwas/ws"
	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/frame"
)

// WebSocket on netpoll (docs/decisions.md 62):
// the event loop must never wait for bytes, so nothing here reads through
// a blocking reader. The HTTP upgrade request is collected from the
// connection's bytes (netpoll's buffer on ws, decrypted plaintext on wss;
// moved to the connection's own buffer while incomplete) up to its blank
// line and handed, exactly those bytes, to gobwas/ws's Upgrader, which
// writes the 101 or the refusal. Afterwards each WebSocket frame is cut
// from the bytes by hand (header length from its first bytes, then
// ws.ReadHeader on a complete header); a partial frame moves to the
// connection's own buffer, so OnRequest always consumes every byte. One
// binary message carries exactly one Spark frame, handed to the session
// like the stream decoder does; pings, closes and protocol errors are
// answered here and never reach the session.

const (
	// wsPath is the only path that upgrades; others get 404.
	wsPath = "/ws"
	// wsMaxRequest bounds the HTTP upgrade request; past it 431.
	wsMaxRequest = 8 << 10
	// wsUpgradeTimeout bounds PROXY header plus upgrade request from
	// accept; the session's AUTH deadline starts after the upgrade.
	wsUpgradeTimeout = 10 * time.Second
	// wsMaxHeader is the longest WebSocket frame header (RFC 6455 5.2).
	wsMaxHeader = 14
	// wsCloseWait bounds how long a closing connection waits for its
	// close frame to be written (awaitControl).
	wsCloseWait = 100 * time.Millisecond
)

// wsCloseError asks the transport to send a close frame with code and
// close the connection.
type wsCloseError struct {
	code   ws.StatusCode
	reason string
}

func (e *wsCloseError) Error() string { return fmt.Sprintf("ws: %d %s", e.code, e.reason) }

// wsTransport is the WebSocket carrier of the ws and wss listeners: after
// the HTTP upgrade, one Spark frame per binary message each way.
type wsTransport struct {
	socket
	// upgraded is set once the 101 is written; timer closes the
	// connection if it has not been by the deadline.
	upgraded atomic.Bool
	timer    stageTimer
	// req holds an upgrade request that has not fully arrived.
	req []byte
	// pending holds a WebSocket frame that has not fully arrived; msg a
	// fragmented binary message being reassembled. Event loop only.
	pending []byte
	msg     []byte
	inMsg   bool
	// wmu serialises the session's flusher and the event loop's pongs
	// and close frames: netpoll refuses concurrent writes, and frames
	// must not interleave.
	wmu sync.Mutex
	// ctrl holds control frames (pongs, a close) the event loop queued;
	// whoever holds wmu writes them (see writeControl), under cmu.
	cmu  sync.Mutex
	ctrl []byte
}

// wsPolicy is what the WebSocket listeners check at the upgrade: the
// Origin allow-list and where the client's real address comes from.
type wsPolicy struct {
	// origins is the allow-list, nil when any origin may connect. A
	// request without Origin is not a browser's, so the list (a
	// browser-side protection) does not apply; the token authenticates
	// either way.
	origins map[string]struct{}
	// realIPHeader, when set, carries the client's address from an HTTP
	// proxy in trusted; anyone else's header is ignored.
	realIPHeader string
	trusted      peerSet
}

// newWSPolicy parses gate.ws_allowed_origins and takes
// gate.ws_real_ip_header with the parsed trusted proxies (newTrustedPeers).
func newWSPolicy(origins []string, realIPHeader string, trusted peerSet) (*wsPolicy, error) {
	p := &wsPolicy{realIPHeader: realIPHeader}
	if len(origins) > 0 {
		p.origins = make(map[string]struct{}, len(origins))
		for _, o := range origins {
			p.origins[strings.ToLower(strings.TrimSuffix(o, "/"))] = struct{}{}
		}
	}
	if realIPHeader != "" {
		if len(trusted) == 0 {
			return nil, errors.New("server: gate.ws_real_ip_header is set but gate.proxy_trusted_cidrs is empty")
		}
		p.trusted = trusted
	}
	return p, nil
}

// upgrader builds one connection's upgrader: path /ws only, the Origin
// allow-list, and, from a trusted proxy, the client's address from the
// configured header into t.realIP (the session starts after the upgrade,
// so it never sees the proxy's address).
func (p *wsPolicy) upgrader(t *wsTransport) *ws.Upgrader {
	u := &ws.Upgrader{
		OnRequest: func(uri []byte) error {
			path := uri
			if i := bytes.IndexByte(path, '?'); i >= 0 {
				path = path[:i]
			}
			if string(path) != wsPath {
				return ws.RejectConnectionError(ws.RejectionStatus(404), ws.RejectionReason("not found"))
			}
			return nil
		},
	}
	fromProxy := p.realIPHeader != "" && p.trusted.contains(t.nc.RemoteAddr())
	if p.origins == nil && !fromProxy {
		return u
	}
	u.OnHeader = func(key, value []byte) error {
		switch {
		case p.origins != nil && strings.EqualFold(string(key), "Origin"):
			if _, ok := p.origins[strings.ToLower(string(value))]; !ok {
				return ws.RejectConnectionError(ws.RejectionStatus(403), ws.RejectionReason("origin not allowed"))
			}
		case fromProxy && strings.EqualFold(string(key), p.realIPHeader):
			ip, ok := lastForwardedAddr(value)
			if !ok {
				return ws.RejectConnectionError(ws.RejectionStatus(400), ws.RejectionReason("bad "+p.realIPHeader))
			}
			t.realIP = ip
		}
		return nil
	}
	return u
}

// lastForwardedAddr returns the last address of an X-Forwarded-For style
// list (or a lone X-Real-IP value): the one the nearest, trusted proxy
// appended; earlier entries are whatever the client claimed.
func lastForwardedAddr(v []byte) (string, bool) {
	s := string(v)
	if i := strings.LastIndexByte(s, ','); i >= 0 {
		s = s[i+1:]
	}
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return "", false
	}
	return a.Unmap().String(), true
}

// newWSTransport starts the upgrade deadline, counted from accept so a
// slow PROXY header or a trickled request cannot extend it.
func newWSTransport(l *listener, nc netpoll.Connection) *wsTransport {
	t := &wsTransport{socket: socket{l: l, nc: nc}}
	t.timer.arm(wsUpgradeTimeout, func() {
		if !t.upgraded.Load() {
			l.log.Debug("ws upgrade timeout, closing", zap.String("peer", remoteIP(nc.RemoteAddr())))
			_ = nc.Close()
		}
	})
	return t
}

// begin implements carrierConn: the session opens after the upgrade.
func (t *wsTransport) begin() bool { return true }

// stopTimers implements carrierConn.
func (t *wsTransport) stopTimers() {
	t.timer.stop()
	t.stopStages()
}

// onClosed implements carrierConn.
func (t *wsTransport) onClosed(netpoll.Connection) error {
	t.timer.stop()
	t.end()
	return nil
}

// carry implements carrierConn: the upgrade first (the session starts
// once it is answered), then WebSocket messages.
func (t *wsTransport) carry(ctx context.Context, src byteSource) error {
	if t.c == nil {
		if t.upgraded.Load() {
			return errNoSession
		}
		done, err := t.upgradeWS(src)
		if err != nil || !done {
			return err
		}
		if t.open(t) == nil {
			if t.refused != nil {
				t.refuse(t)
				return errDecodeStopped
			}
			return errNoSession
		}
	}
	return t.feedWS(ctx, src)
}

// readFailed implements carrierConn.
func (t *wsTransport) readFailed(err error) {
	var wsErr *wsCloseError
	if errors.As(err, &wsErr) {
		t.closeWS(wsErr)
		return
	}
	t.c.Close(closeReadFailed)
}

// requestWriter is the Upgrader's view of the connection: the request
// bytes already collected, and the connection (through TLS on wss) for
// the response.
type requestWriter struct {
	*bytes.Reader
	t *wsTransport
}

func (w requestWriter) Write(p []byte) (int, error) {
	if err := w.t.write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// upgradeWS collects the upgrade request and answers it. It reports true
// once upgraded; false with a nil error while the request is incomplete.
// Bytes after the request stay in src for the frame decoder.
func (t *wsTransport) upgradeWS(src byteSource) (bool, error) {
	avail := src.Len()
	peek, err := src.Peek(avail)
	if err != nil {
		return false, fmt.Errorf("ws: peek request: %w", err)
	}
	// buf is the connection's own memory when anything is pending.
	buf := peek
	if len(t.req) > 0 {
		buf = append(t.req, peek...)
	}
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		if len(buf) > wsMaxRequest {
			_ = t.write([]byte("HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n"))
			return false, errors.New("ws: upgrade request too large")
		}
		if len(t.req) == 0 {
			buf = append([]byte(nil), peek...)
		}
		t.req = buf
		if _, err := src.Next(avail); err != nil {
			return false, fmt.Errorf("ws: skip request: %w", err)
		}
		return false, nil
	}
	end += 4
	req := buf[:end]
	if len(t.req) == 0 {
		req = append([]byte(nil), req...)
	}
	if _, err := src.Next(end - len(t.req)); err != nil {
		return false, fmt.Errorf("ws: skip request: %w", err)
	}
	t.req = nil
	if _, err := t.l.ws.upgrader(t).Upgrade(requestWriter{Reader: bytes.NewReader(req), t: t}); err != nil {
		return false, fmt.Errorf("ws: upgrade: %w", err)
	}
	t.upgraded.Store(true)
	t.timer.stop()
	return true, nil
}

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
	if need := total - len(t.pending); need > 0 {
		if cap(t.pending) < total {
			grown := make([]byte, len(t.pending), total)
			copy(grown, t.pending)
			t.pending = grown
		}
		b, err := r.Next(min(need, r.Len()))
		if err != nil {
			return fmt.Errorf("ws: read payload: %w", err)
		}
		t.pending = append(t.pending, b...)
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
