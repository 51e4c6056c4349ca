package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/retry"
)

// KickServerShutdown is the KICK reason of a gate that is stopping: the
// device should reconnect, to another gate. Every other reason (another
// connection of the device signed in, tokens revoked, user disabled)
// means stop: reconnecting would kick the newer connection or be refused.
const KickServerShutdown = "server_shutdown"

// KickReason returns the reason of a KICK frame; ok is false for any other
// frame.
func KickReason(f Frame) (reason string, ok bool) {
	if f.Command != protocol.CmdKick {
		return "", false
	}
	var k protocol.Kick
	if env, err := f.Envelope(); err == nil && len(env.Data) > 0 {
		_ = json.Unmarshal(env.Data, &k)
	}
	return k.Reason, true
}

// KickError ends a Session the server kicked for a reason that means stop.
type KickError struct{ Reason string }

func (e *KickError) Error() string { return "client: kicked: " + e.Reason }

// ErrSessionClosed is a Session's error after Close.
var ErrSessionClosed = errors.New("client: session closed")

// SessionOptions configure a Session.
type SessionOptions struct {
	// Addrs are the gates, tried in turn: a reconnect goes to the next
	// one, so a stopping gate's clients leave it. At least one.
	Addrs []string
	// Token is presented at each AUTH (a new token needs a new Session).
	Token                          string
	DeviceID, Platform, AppVersion string
	// Conn configures each connection.
	Conn Options
	// Runner, when set, syncs after every AUTH (docs/protocol.md §8), and
	// OnSync, when set, gets each sync's result.
	Runner *SyncRunner
	OnSync func(SyncResult, error)
	// ReconnectMin and ReconnectMax bound the reconnect backoff (defaults
	// 500 ms and 30 s); see backoffDelay.
	ReconnectMin, ReconnectMax time.Duration
	// Random returns a number in [0, 1) for the jitter (default
	// math/rand).
	Random func() float64
}

// Session keeps one device signed in across connections: after a drop or
// a KICK server_shutdown it reconnects, to the next address, with
// jittered backoff and syncs; a KICK for any other reason, a refused token
// or Close end it. Its methods are safe for concurrent use.
type Session struct {
	opts   SessionOptions
	ctx    context.Context
	cancel context.CancelFunc
	pushes chan Frame
	done   chan struct{}

	mu       sync.Mutex
	conn     *Conn         // the signed-in connection, nil between them
	ready    chan struct{} // closed when conn is set or the session ends
	err      error
	connects int
	addr     string
}

// StartSession starts signing in in the background; Conn waits for it.
func StartSession(opts SessionOptions) (*Session, error) {
	if len(opts.Addrs) == 0 {
		return nil, errors.New("client: session needs at least one address")
	}
	if opts.ReconnectMin <= 0 {
		opts.ReconnectMin = 500 * time.Millisecond
	}
	if opts.ReconnectMax < opts.ReconnectMin {
		opts.ReconnectMax = max(30*time.Second, opts.ReconnectMin)
	}
	if opts.Random == nil {
		opts.Random = rand.Float64
	}
	opts.Conn = opts.Conn.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		opts: opts, ctx: ctx, cancel: cancel,
		pushes: make(chan Frame, opts.Conn.PushBuffer),
		done:   make(chan struct{}),
		ready:  make(chan struct{}),
	}
	go s.run()
	return s, nil
}

// backoffDelay is the wait before reconnect attempt n (0-based), "equal
// jitter" like the browser SDK's: half of min(max, min·2ⁿ) plus a random
// share of the other half, so the clients of one stopping gate do not come
// back in lockstep.
func backoffDelay(n int, lo, hi time.Duration, random func() float64) time.Duration {
	return retry.Policy{Initial: lo, Max: hi, Multiplier: 2, Jitter: true, Random: random}.Delay(n)
}

// Pushes delivers every push of every connection, KICKs included, in
// order per connection; it is closed when the session ends. It must be
// read: like Conn's, a full channel holds the connection's reader, and
// with it the KICK that would move the session on.
func (s *Session) Pushes() <-chan Frame { return s.pushes }

// Done is closed when the session has ended; Err tells why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session runs, then a *KickError, the refused
// AUTH's *CodeError or ErrSessionClosed.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Connects counts the successful sign-ins so far.
func (s *Session) Connects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connects
}

// Addr is the address of the current or last connection.
func (s *Session) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Conn waits for a signed-in connection; it fails once the session has
// ended or ctx ends.
func (s *Session) Conn(ctx context.Context) (*Conn, error) {
	for {
		s.mu.Lock()
		c, ready, err := s.conn, s.ready, s.err
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if c != nil {
			return c, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("client: waiting for a connection: %w", ctx.Err())
		}
	}
}

// Send is Conn.Send across connections: when the connection ends before
// the answer (a KICK server_shutdown, a drop), it tries again with the
// same client_msg_id on the next one, so the server stores the message
// once whichever gate its answer was lost on.
func (s *Session) Send(ctx context.Context, req protocol.SendRequest) (protocol.SendAck, error) {
	if req.ClientMsgID == "" {
		req.ClientMsgID = NewClientMsgID()
	}
	return acrossConns(ctx, s, "send "+req.ClientMsgID, func(c *Conn) (protocol.SendAck, error) { return c.Send(ctx, req) })
}

// Upstream is Conn.Upstream across connections, like Send: a frame whose
// answer was lost goes again on the next connection with the same
// upstream_id (a fresh one when upstreamID is empty), so the service
// gets it once.
func (s *Session) Upstream(ctx context.Context, service, body, upstreamID string) (protocol.UpstreamReply, error) {
	if upstreamID == "" {
		upstreamID = NewClientMsgID()
	}
	return acrossConns(ctx, s, "upstream "+upstreamID, func(c *Conn) (protocol.UpstreamReply, error) {
		return c.Upstream(ctx, service, body, upstreamID)
	})
}

// acrossConns runs call on the session's connection until it answers: a
// server's answer (success or a code) or ctx ending is final; a
// connection that failed under the call is closed, so the session moves
// on, and the call goes again on the next one. call must be idempotent.
func acrossConns[T any](ctx context.Context, s *Session, what string, call func(*Conn) (T, error)) (T, error) {
	for {
		c, err := s.Conn(ctx)
		if err != nil {
			var zero T
			return zero, fmt.Errorf("client: %s: %w", what, err)
		}
		v, err := call(c)
		if err == nil {
			return v, nil
		}
		var ce *CodeError
		if ctx.Err() != nil || errors.As(err, &ce) {
			return v, err
		}
		if errors.Is(err, ErrTimeout) && c.Err() == nil {
			return v, err // the connection lives; the call gave up by itself
		}
		_ = c.Close()
	}
}

// Close ends the session and its connection.
func (s *Session) Close() error {
	s.cancel()
	<-s.done
	return nil
}

func (s *Session) run() {
	defer close(s.done)
	defer close(s.pushes)
	idx, attempt := 0, 0
	for {
		addr := s.opts.Addrs[idx%len(s.opts.Addrs)]
		c, err := s.connect(addr)
		var ce *CodeError
		switch {
		case s.ctx.Err() != nil:
			if c != nil {
				_ = c.Close()
			}
			s.end(ErrSessionClosed)
			return
		case errors.As(err, &ce) && ce.Code == errcode.BadToken:
			s.end(err)
			return
		case err != nil:
			idx++
			if !s.sleep(backoffDelay(attempt, s.opts.ReconnectMin, s.opts.ReconnectMax, s.opts.Random)) {
				s.end(ErrSessionClosed)
				return
			}
			attempt++
			continue
		}
		attempt = 0
		kick := s.serve(c, addr)
		if s.ctx.Err() != nil {
			s.end(ErrSessionClosed)
			return
		}
		if kick != "" && kick != KickServerShutdown {
			s.end(&KickError{Reason: kick})
			return
		}
		// A stopping gate (or a lost one): the next address, after a
		// jittered pause even the first time, so a gate's clients spread
		// out beyond the spread of its KICKs.
		idx++
		if !s.sleep(backoffDelay(attempt, s.opts.ReconnectMin, s.opts.ReconnectMax, s.opts.Random)) {
			s.end(ErrSessionClosed)
			return
		}
		attempt++
	}
}

// connect dials addr and signs in.
func (s *Session) connect(addr string) (*Conn, error) {
	c, err := Dial(s.ctx, addr, s.opts.Conn)
	if err != nil {
		return nil, err
	}
	if _, err := c.Auth(s.ctx, s.opts.Token, s.opts.DeviceID, s.opts.Platform, s.opts.AppVersion); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("client: auth at %s: %w", addr, err)
	}
	return c, nil
}

// serve publishes c, forwards its pushes, syncs, and returns when c has
// ended with the reason of the KICK that ended it ("" for none).
func (s *Session) serve(c *Conn, addr string) string {
	s.mu.Lock()
	s.conn, s.addr = c, addr
	s.connects++
	close(s.ready)
	s.mu.Unlock()

	kicked := make(chan string, 1)
	go func() {
		reason := ""
		for f := range c.Pushes() {
			if r, ok := KickReason(f); ok && reason == "" {
				// A KICK is the connection's last frame: close it now
				// rather than wait for the gate to. One without a
				// reason still means stop.
				reason = r
				if reason == "" {
					reason = "kicked"
				}
				go func() { _ = c.Close() }()
			}
			select {
			case s.pushes <- f:
			case <-s.ctx.Done():
			}
		}
		kicked <- reason
	}()
	if s.opts.Runner != nil {
		res, err := s.opts.Runner.Sync(s.ctx, c)
		if s.opts.OnSync != nil {
			s.opts.OnSync(res, err)
		}
	}
	select {
	case <-c.Done():
	case <-s.ctx.Done():
		_ = c.Close()
	}
	reason := <-kicked

	s.mu.Lock()
	s.conn = nil
	s.ready = make(chan struct{})
	s.mu.Unlock()
	return reason
}

// sleep waits d; false when the session was closed meanwhile.
func (s *Session) sleep(d time.Duration) bool {
	return retry.Sleep(s.ctx, d) == nil
}

// end records why the session ended and wakes Conn's waiters.
func (s *Session) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
	s.conn = nil
	close(s.ready)
}
