package server

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/ipkey"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// inflateFactor bounds how far a gzip body may expand: enough for JSON,
// too little for a decompression bomb.
const inflateFactor = 4

// sessions is the session layer: every client connection's session from
// its start to its end. It holds what the layer needs, shared with the
// server that built it, and nothing of the server's wiring (listeners,
// the Push server, health); carriers reach it through sessionLayer, the
// upstream through responder, the Push service directly.
type sessions struct {
	maxFrame        int
	preAuthMaxFrame int
	outboundQueue   int

	log     *zap.Logger
	metrics *Metrics
	table   *Table
	limits  *connLimits
	ids     *envelope.IDSource
	connIDs *ConnIDs
	// draining is the server's flag: no session starts once it is set.
	draining *atomic.Bool
	// up is set by Server.Start before any listener accepts.
	up *Upstream
}

// sessionLayer is what a carrier hands a connection's life to: its
// start, its frames and its end. Carriers reach the session layer only
// through it, never the server's wiring.
type sessionLayer interface {
	// openSession starts the session of a carrier ready to carry
	// frames, or refuses it (the carrier writes the refusal and
	// closes); both nil when the gate is draining.
	openSession(tr Transport, realIP string) (*Conn, *refusal)
	// handleFrame takes one decoded frame; false means the connection
	// is closing and the carrier should stop decoding.
	handleFrame(ctx context.Context, c *Conn, h frame.Header, body []byte, aliased bool) bool
	// badFrame closes a connection whose byte stream broke.
	badFrame(c *Conn, err error)
	// closeSession ends c once its carrier has closed.
	closeSession(c *Conn)
	// frameLimit is the largest frame c (nil: no session yet) may send.
	frameLimit(c *Conn) int
}

// openSession starts the session of a connection whose transport is ready
// to carry frames; realIP is the client's address as the transport knows it
// (the socket peer, the PROXY header's source, a trusted proxy's header).
// A connection over one of the gate's caps gets no session but a refusal
// to write. It never blocks.
func (s *sessions) openSession(tr Transport, realIP string) (*Conn, *refusal) {
	if s.draining.Load() {
		return nil, nil
	}
	key := ipkey.Of(realIP)
	if reason := s.limits.admit(key); reason != "" {
		return nil, s.refuse(reason)
	}
	c := newConn(s.connIDs.Next(), tr, realIP, time.Now())
	c.addrKey = key
	c.out = NewOutbound(c, s.outboundQueue, func(n int) { s.metrics.FramesOut.Add(uint64(n)) })
	s.table.Add(c)
	s.metrics.Connections.Add(1)
	// A transport's Kind never changes, so closing finds the same gauge.
	s.metrics.carrierConns(tr.Kind()).Add(1)
	return c, nil
}

// closeSession runs once when the transport has closed, whoever closed it.
func (s *sessions) closeSession(c *Conn) {
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
	s.metrics.carrierConns(c.tr.Kind()).Add(-1)
	s.limits.release(c.addrKey, prev == stateConnecting)
	why, reason := c.reason()
	s.metrics.Closes[why].Add(1)
	if prev == stateAuthenticated {
		s.metrics.Authenticated.Add(-1)
		s.up.SendClosed(&c.upLink, sess, reason, c.takeUnacked())
		s.log.Debug("connection closed", zap.Uint64("conn_id", c.id), zap.Int64("user_id", sess.GetUserId()),
			zap.String("device_id", sess.GetDeviceId()), zap.String("real_ip", c.realIP), zap.String("reason", reason))
		return
	}
	s.log.Debug("connection closed", zap.Uint64("conn_id", c.id), zap.String("real_ip", c.realIP), zap.String("reason", reason))
}

// badFrame closes a connection whose byte stream cannot be trusted any more
// (bad magic, version or length) without reading further.
func (s *sessions) badFrame(c *Conn, err error) {
	if errors.Is(err, frame.ErrTooLarge) && !c.Authenticated() {
		s.limits.preAuthTooLarge.Add(1)
	}
	s.log.Debug("bad frame, closing", zap.Uint64("conn_id", c.id), zap.String("real_ip", c.realIP), zap.Error(err))
	c.Close(closeBadFrame)
}

// handleFrame runs the connection's state machine for one frame. aliased
// says body points into the transport's buffer and must be copied to be
// kept. It reports false when the connection is closing: a closing
// session takes no more frames.
func (s *sessions) handleFrame(ctx context.Context, c *Conn, h frame.Header, body []byte, aliased bool) bool {
	if c.closing() {
		return false
	}
	s.metrics.FramesIn.Add(1)
	c.touch(time.Now())
	if h.Gzip() {
		inflated, err := frame.Inflate(body, inflateFactor*s.frameLimit(c))
		if err != nil {
			code := errcode.InvalidArgument
			if errors.Is(err, frame.ErrInflatedTooLarge) {
				code = errcode.TooLarge
			}
			s.log.Debug("bad gzip body, closing", zap.Uint64("conn_id", c.id), zap.String("real_ip", c.realIP), zap.Uint16("command", h.Command))
			s.failAndClose(c, h, code, closeBadGzip, "bad gzip body")
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
		if !s.forward(ctx, c, nil, h, own(body, aliased)) {
			c.authInflight.Store(false)
		}
		return true
	}
	switch h.Command {
	case protocol.CmdAuth:
		s.fail(c, h, errcode.InvalidArgument, "already authenticated")
	case protocol.CmdPushAck:
		s.metrics.PushAcks.Add(1)
		c.ackPush(h.SequenceID)
	default:
		s.forward(ctx, c, c.Session(), h, own(body, aliased))
	}
	return true
}

// forward hands a request to logic, or answers it 50301 itself and
// reports false: when the upstream refuses it, and when the connection is
// about to be kicked on shutdown (its client retries on the gate it
// reconnects to). awaiting is raised before leaving is read and the
// shutdown sets leaving before it reads awaiting, so either the kick
// waits for this request's answer or the request is refused; it is never
// answered after the KICK.
func (s *sessions) forward(ctx context.Context, c *Conn, sess *logicv1.Session, h frame.Header, body []byte) bool {
	c.awaiting.Add(1)
	if c.leaving.Load() {
		c.awaiting.Add(-1)
		s.fail(c, h, errcode.Busy, "server shutting down")
		return false
	}
	if !s.up.Forward(ctx, &c.upLink, sess, h, body) {
		c.awaiting.Add(-1)
		s.busy(c, h)
		return false
	}
	return true
}

// frameLimit is the largest frame (and a quarter of the largest inflated
// body) c may send now: gate.preauth_max_frame_size until it has
// authenticated (or while it has no session), then gate.max_frame_size.
func (s *sessions) frameLimit(c *Conn) int {
	if c != nil && c.Authenticated() {
		return s.maxFrame
	}
	return s.preAuthMaxFrame
}

// own returns a body the caller may keep after netpoll releases its buffer.
func own(body []byte, aliased bool) []byte {
	if !aliased || len(body) == 0 {
		return body
	}
	return append([]byte(nil), body...)
}

// answer queues a reply to the request h. Answers never block. A queue
// full of answers (twice gate.outbound_queue) means the client sends
// requests far faster than it reads their answers: it gets what is
// queued and is then closed, rather than left waiting for answers that
// were dropped, and reconnects and syncs like after any lost connection.
func (s *sessions) answer(c *Conn, h frame.Header, body []byte, kind frameKind, closeAfter bool) {
	f := outFrame{
		hdr:   frame.Header{Command: h.Command, RequestID: h.RequestID, SequenceID: h.SequenceID},
		body:  body,
		kind:  kind,
		close: closeAfter,
	}
	switch c.out.Enqueue(f) {
	case queueFull:
		// The answers already queued still go out, then the close.
		s.metrics.ResponsesDropped.Add(1)
		s.log.Debug("answers not read, closing", zap.Uint64("conn_id", c.id), zap.String("real_ip", c.realIP))
		c.setCloseReason(closeAnswersNotRead)
		if c.out.Finish() {
			c.Close(closeAnswersNotRead)
		}
	case queueClosed:
		if closeAfter {
			c.Close(closeAfterAnswer)
		}
	}
}

func (s *sessions) fail(c *Conn, h frame.Header, code errcode.Code, msg string) {
	s.answer(c, h, envelope.Fail(s.ids.Next(), code, msg), kindResponse, false)
}

func (s *sessions) busy(c *Conn, h frame.Header) {
	s.metrics.BusyRejects.Add(1)
	s.fail(c, h, errcode.Busy, "")
}

// failAndClose answers and closes the connection once the answer is out.
func (s *sessions) failAndClose(c *Conn, h frame.Header, code errcode.Code, why closeReason, msg string) {
	c.setCloseReason(why)
	s.answer(c, h, envelope.Fail(s.ids.Next(), code, msg), kindControl, true)
}

// onResponse implements responder: logic answered p.
func (s *sessions) onResponse(_ context.Context, resp *logicv1.Response, p *pendingReq) {
	c := s.table.Get(resp.ConnId)
	if c == nil {
		if resp.Bind != nil {
			// Logic recorded a route for a connection that is already
			// gone; tell it so the route does not linger.
			s.up.SendClosedAfter(p, resp.ConnId, resp.Bind, closeBeforeAuth.String())
		}
		return
	}
	// Lowered once the answer (and a deferred kick) is queued.
	defer c.awaiting.Add(-1)
	if resp.Bind != nil {
		// Bind before queueing the answer: a client that has read the AUTH
		// answer may send its next request at once.
		if c.bind(resp.Bind) {
			s.metrics.Authenticated.Add(1)
			s.limits.authenticated()
			s.log.Debug("authenticated", zap.Uint64("conn_id", c.id), zap.Int64("user_id", resp.Bind.UserId),
				zap.String("device_id", resp.Bind.DeviceId), zap.String("real_ip", c.realIP))
		} else if c.state.Load() == stateClosed {
			_, reason := c.reason()
			s.up.SendClosedAfter(p, c.id, resp.Bind, reason)
		}
	}
	if p.command == protocol.CmdAuth {
		c.authInflight.Store(false)
	}
	h := frame.Header{Command: uint16(resp.Command), RequestID: resp.RequestId, SequenceID: resp.SequenceId}
	if resp.Close {
		c.setCloseReason(closeByLogic)
		s.answer(c, h, resp.Body, kindControl, true)
		return
	}
	s.answer(c, h, resp.Body, kindResponse, false)
	if resp.Bind != nil {
		if k := c.takeDeferredKick(); k != nil {
			s.kick(c, k.reason, k.body) // after the AUTH answer, like any kick
		}
	}
}

// onBusy implements responder: logic will not answer p.
func (s *sessions) onBusy(_ context.Context, p *pendingReq) {
	c := s.table.Get(p.key.conn)
	if c == nil {
		return
	}
	defer c.awaiting.Add(-1)
	if p.command == protocol.CmdAuth {
		c.authInflight.Store(false)
	}
	s.busy(c, frame.Header{Command: p.command, RequestID: p.key.req, SequenceID: p.key.seq})
}

// rangeBindings implements responder: every authenticated connection with
// its session, for a Rebind after logic lost the route table. Table.Range
// calls fn outside its locks, so a slow fn never stalls accepts or pushes.
func (s *sessions) rangeBindings(fn func(*logicv1.Binding) bool) {
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
