package server

import (
	"context"
	"errors"
	"time"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

type connKey struct{}

// inflateFactor bounds how far a gzip body may expand: enough for JSON,
// too little for a decompression bomb.
const inflateFactor = 4

// onPrepare runs once per accepted socket, before netpoll registers it.
func (s *Server) onPrepare(nc netpoll.Connection) context.Context {
	if s.draining.Load() {
		_ = nc.Close()
		return s.ctx
	}
	now := time.Now()
	c := newConn(s.connIDs.Next(), nc, remoteIP(nc.RemoteAddr()), now)
	c.out = NewOutbound(c, s.cfg.OutboundQueue, func(n int) { s.metrics.FramesOut.Add(uint64(n)) })
	s.table.Add(c)
	s.metrics.Connections.Add(1)
	_ = nc.AddCloseCallback(func(netpoll.Connection) error {
		s.onClose(c)
		return nil
	})
	return context.WithValue(s.ctx, connKey{}, c)
}

// onClose runs once when netpoll has closed the socket, whoever closed it.
func (s *Server) onClose(c *Conn) {
	c.mu.Lock()
	prev := c.state.Swap(stateClosed)
	sess := c.session
	c.mu.Unlock()
	if prev == stateClosed {
		return
	}
	s.table.Remove(c)
	c.out.Close()
	s.metrics.Connections.Add(-1)
	reason := c.reason()
	if prev == stateAuthenticated {
		s.metrics.Authenticated.Add(-1)
		s.up.SendClosed(c, sess, reason)
		s.log.Debug("connection closed", zap.Uint64("conn_id", c.id), zap.Int64("user_id", sess.GetUserId()),
			zap.String("device_id", sess.GetDeviceId()), zap.String("real_ip", c.realIP), zap.String("reason", reason))
		return
	}
	s.log.Debug("connection closed", zap.Uint64("conn_id", c.id), zap.String("real_ip", c.realIP), zap.String("reason", reason))
}

// onRequest consumes every readable byte: whole frames are handled straight
// out of netpoll's buffer and a partial one is moved to the connection's own
// buffer, because returning with unread bytes makes netpoll call again at
// once, forever.
func (s *Server) onRequest(ctx context.Context, nc netpoll.Connection) error {
	c, ok := ctx.Value(connKey{}).(*Conn)
	if !ok {
		return nc.Close()
	}
	r := nc.Reader()
	defer func() { _ = r.Release() }()
	if !s.readFrames(ctx, c, r) || c.out.Closing() {
		// The connection is closing (maybe only after a last answer is
		// written): whatever else the client sent is discarded, or netpoll
		// would call again at once for the unread bytes.
		_ = r.Skip(r.Len())
	}
	return nil
}

// readFrames handles every complete frame in r and keeps a trailing partial
// one. It reports false when the connection is closing.
func (s *Server) readFrames(ctx context.Context, c *Conn, r netpoll.Reader) bool {
	for {
		if c.out.Closing() {
			return false
		}
		n := r.Len()
		if n == 0 {
			return true
		}
		if len(c.pending) > 0 || n < frame.HeaderSize {
			if !s.assemble(ctx, c, r) {
				return false
			}
			continue
		}
		hb, err := r.Peek(frame.HeaderSize)
		if err != nil {
			c.Close("read failed")
			return false
		}
		h, err := frame.ParseHeader(hb, s.cfg.MaxFrameSize)
		if err != nil {
			s.badFrame(c, err)
			return false
		}
		total := frame.HeaderSize + int(h.BodyLength)
		if n < total {
			if !s.assemble(ctx, c, r) {
				return false
			}
			continue
		}
		b, err := r.Next(total)
		if err != nil {
			c.Close("read failed")
			return false
		}
		if !s.handleFrame(ctx, c, h, b[frame.HeaderSize:], true) {
			return false
		}
	}
}

// assemble moves bytes of a partial frame into c.pending, and handles the
// frame once it is complete. It reports false when the connection closed.
func (s *Server) assemble(ctx context.Context, c *Conn, r netpoll.Reader) bool {
	if len(c.pending) < frame.HeaderSize {
		take := min(frame.HeaderSize-len(c.pending), r.Len())
		b, err := r.Next(take)
		if err != nil {
			c.Close("read failed")
			return false
		}
		c.pending = append(c.pending, b...)
		if len(c.pending) < frame.HeaderSize {
			// Garbage is visible before the header is complete.
			if _, _, _, err := frame.Decode(c.pending, s.cfg.MaxFrameSize); err != nil {
				s.badFrame(c, err)
				return false
			}
			return true
		}
	}
	h, err := frame.ParseHeader(c.pending, s.cfg.MaxFrameSize)
	if err != nil {
		s.badFrame(c, err)
		return false
	}
	total := frame.HeaderSize + int(h.BodyLength)
	if cap(c.pending) < total {
		grown := make([]byte, len(c.pending), total)
		copy(grown, c.pending)
		c.pending = grown
	}
	if need := total - len(c.pending); need > 0 {
		b, err := r.Next(min(need, r.Len()))
		if err != nil {
			c.Close("read failed")
			return false
		}
		c.pending = append(c.pending, b...)
	}
	if len(c.pending) < total {
		return true
	}
	body := c.pending[frame.HeaderSize:total]
	// The body may now be owned by a forwarded request; never reuse it.
	c.pending = nil
	return s.handleFrame(ctx, c, h, body, false)
}

// badFrame closes a connection whose byte stream cannot be trusted any more
// (bad magic, version or length) without reading further.
func (s *Server) badFrame(c *Conn, err error) {
	s.log.Debug("bad frame, closing", zap.Uint64("conn_id", c.id), zap.String("real_ip", c.realIP), zap.Error(err))
	c.Close("bad frame")
}

// handleFrame runs the connection's state machine for one frame. aliased
// says body points into netpoll's buffer and must be copied to be kept. It
// reports false when the connection is closing.
func (s *Server) handleFrame(ctx context.Context, c *Conn, h frame.Header, body []byte, aliased bool) bool {
	s.metrics.FramesIn.Add(1)
	c.touch(time.Now())
	if h.Gzip() {
		inflated, err := frame.Inflate(body, inflateFactor*s.cfg.MaxFrameSize)
		if err != nil {
			code := errcode.InvalidArgument
			if errors.Is(err, frame.ErrInflatedTooLarge) {
				code = errcode.TooLarge
			}
			s.log.Debug("bad gzip body, closing", zap.Uint64("conn_id", c.id), zap.String("real_ip", c.realIP), zap.Uint16("command", h.Command))
			s.failAndClose(c, h, code, "bad gzip body")
			return false
		}
		body, aliased = inflated, false
	}

	if h.Command == protocol.CmdHeartbeat {
		s.answer(c, h, nil, kindResponse, false)
		return true
	}
	if !c.Authenticated() {
		if h.Command != protocol.CmdAuth {
			s.fail(c, h, errcode.NotAuthed, "")
			return true
		}
		if !c.authInflight.CompareAndSwap(false, true) {
			s.fail(c, h, errcode.InvalidArgument, "auth already in progress")
			return true
		}
		if !s.up.Forward(ctx, c, nil, h, own(body, aliased)) {
			c.authInflight.Store(false)
			s.busy(c, h)
		}
		return true
	}
	switch h.Command {
	case protocol.CmdAuth:
		s.fail(c, h, errcode.InvalidArgument, "already authenticated")
	case protocol.CmdPushAck:
		s.metrics.PushAcks.Add(1)
	default:
		if !s.up.Forward(ctx, c, c.Session(), h, own(body, aliased)) {
			s.busy(c, h)
		}
	}
	return true
}

// own returns a body the caller may keep after netpoll releases its buffer.
func own(body []byte, aliased bool) []byte {
	if !aliased || len(body) == 0 {
		return body
	}
	return append([]byte(nil), body...)
}

// answer queues a reply to the request h. Answers never block; a full
// queue drops them and counts it.
func (s *Server) answer(c *Conn, h frame.Header, body []byte, kind frameKind, closeAfter bool) {
	f := outFrame{
		hdr:   frame.Header{Command: h.Command, RequestID: h.RequestID, SequenceID: h.SequenceID},
		body:  body,
		kind:  kind,
		close: closeAfter,
	}
	switch c.out.Enqueue(f) {
	case queueFull:
		s.metrics.ResponsesDropped.Add(1)
	case queueClosed:
		if closeAfter {
			c.Close("closed after answer")
		}
	}
}

func (s *Server) fail(c *Conn, h frame.Header, code errcode.Code, msg string) {
	s.answer(c, h, envelope.Fail(s.ids.Next(), code, msg), kindResponse, false)
}

func (s *Server) busy(c *Conn, h frame.Header) {
	s.metrics.BusyRejects.Add(1)
	s.fail(c, h, errcode.Busy, "")
}

// failAndClose answers and closes the connection once the answer is out.
func (s *Server) failAndClose(c *Conn, h frame.Header, code errcode.Code, msg string) {
	c.setCloseReason(msg)
	s.answer(c, h, envelope.Fail(s.ids.Next(), code, msg), kindControl, true)
}

// onResponse implements responder: logic answered p.
func (s *Server) onResponse(_ context.Context, resp *logicv1.Response, p *pendingReq) {
	c := s.table.Get(resp.ConnId)
	if c == nil {
		if resp.Bind != nil {
			// Logic recorded a route for a connection that is already
			// gone; tell it so the route does not linger.
			s.up.sendClosedOn(p.st, resp.ConnId, resp.Bind, "closed before auth completed")
		}
		return
	}
	if resp.Bind != nil {
		// Bind before queueing the answer: a client that has read the AUTH
		// answer may send its next request at once.
		if c.bind(resp.Bind) {
			s.metrics.Authenticated.Add(1)
			s.log.Debug("authenticated", zap.Uint64("conn_id", c.id), zap.Int64("user_id", resp.Bind.UserId),
				zap.String("device_id", resp.Bind.DeviceId), zap.String("real_ip", c.realIP))
		} else if c.state.Load() == stateClosed {
			s.up.sendClosedOn(p.st, c.id, resp.Bind, c.reason())
		}
	}
	if p.command == protocol.CmdAuth {
		c.authInflight.Store(false)
	}
	h := frame.Header{Command: uint16(resp.Command), RequestID: resp.RequestId, SequenceID: resp.SequenceId}
	if resp.Close {
		c.setCloseReason("closed by logic")
		s.answer(c, h, resp.Body, kindControl, true)
		return
	}
	s.answer(c, h, resp.Body, kindResponse, false)
}

// onBusy implements responder: logic will not answer p.
func (s *Server) onBusy(_ context.Context, p *pendingReq) {
	c := s.table.Get(p.key.conn)
	if c == nil {
		return
	}
	if p.command == protocol.CmdAuth {
		c.authInflight.Store(false)
	}
	s.busy(c, frame.Header{Command: p.command, RequestID: p.key.req, SequenceID: p.key.seq})
}

// rangeBindings implements responder: every authenticated connection with
// its session, for a Rebind after logic lost the route table. Table.Range
// calls fn outside its locks, so a slow fn never stalls accepts or pushes.
func (s *Server) rangeBindings(fn func(*logicv1.Binding) bool) {
	s.table.Range(func(c *Conn) bool {
		if !c.Authenticated() {
			return true
		}
		sess := c.Session()
		if sess == nil {
			return true
		}
		return fn(&logicv1.Binding{ConnId: c.id, Session: sess})
	})
}
