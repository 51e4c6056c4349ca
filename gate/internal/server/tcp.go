package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/frame"
)

// connKey is the netpoll connection context's key for its *tcpConn.
type connKey struct{}

// tcpConn is the stream transport of one netpoll connection: it reads
// the PROXY header when gate.proxy_protocol is on, then (on the TLS
// listener) runs the TLS handshake and decrypts, feeds the bytes to the
// stream decoder and the decoded frames to the session, and writes the
// session's frames to the socket.
type tcpConn struct {
	s   *Server
	nc  netpoll.Connection
	dec streamDecoder
	// sec is the TLS layer on the TLS listener, nil on plain TCP.
	sec *tlsLayer
	// ws is the WebSocket layer on the WS listener, nil elsewhere.
	ws *wsLayer
	// realIP is the client's address once known (socket peer or PROXY
	// header); the event loop alone touches it.
	realIP string

	// proxyBuf holds a PROXY header that has not fully arrived; awaiting
	// is set until the header is complete, for the header deadline's
	// timer.
	proxyBuf   []byte
	awaiting   atomic.Bool
	proxyTimer stageTimer

	// refused is why a connection over one of the gate's caps got no
	// session; refuseTimer closes it if it sends nothing (limits.go).
	// Event loop only.
	refused     string
	refuseTimer *time.Timer

	// c is the session; it is set in the event loop (onPrepare or
	// onRequest) and read by the close callback, hence mu.
	mu     sync.Mutex
	c      *Conn
	closed bool
}

// WriteFrames implements Transport. netpoll's Write blocks until the bytes
// are handed to the kernel or the connection's write timeout expires.
func (t *tcpConn) WriteFrames(b []byte) error {
	if t.ws != nil {
		return t.writeWS(b)
	}
	return t.writeRaw(b)
}

// writeRaw writes bytes to the client through TLS when the connection has
// it.
func (t *tcpConn) writeRaw(b []byte) error {
	if t.sec != nil {
		if _, err := t.sec.tc.Write(b); err != nil {
			return fmt.Errorf("tls: write: %w", err)
		}
		return nil
	}
	if _, err := t.nc.Write(b); err != nil {
		return fmt.Errorf("tcp: write: %w", err)
	}
	return nil
}

// Close implements Transport.
func (t *tcpConn) Close() error { return t.nc.Close() }

// Kind implements Transport.
func (t *tcpConn) Kind() string {
	if t.ws != nil {
		if t.sec != nil {
			return "wss"
		}
		return "ws"
	}
	if t.sec != nil {
		return "tls"
	}
	return "tcp"
}

// open starts the session with the client's real address, unless the
// socket closed meanwhile or a cap refuses it (then t.refused says why); a
// nil result means there is no session.
func (t *tcpConn) open(realIP string) *Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.s.draining.Load() {
		return nil
	}
	t.c, t.refused = t.s.openSession(t, realIP)
	return t.c
}

// onClosed is netpoll's close callback: it ends the session once.
func (t *tcpConn) onClosed(netpoll.Connection) error {
	t.mu.Lock()
	t.closed = true
	c := t.c
	t.mu.Unlock()
	t.proxyTimer.stop()
	if t.refuseTimer != nil {
		t.refuseTimer.Stop()
	}
	if t.sec != nil {
		t.sec.timer.stop()
	}
	if t.ws != nil {
		t.ws.timer.stop()
	}
	if c != nil {
		t.s.closeSession(c)
	}
	return nil
}

// onFrame implements frameSink: a closing session takes no more frames.
func (t *tcpConn) onFrame(ctx context.Context, h frame.Header, body []byte, aliased bool) bool {
	if t.c.out.Closing() {
		return false
	}
	return t.s.handleFrame(ctx, t.c, h, body, aliased)
}

// carrier names what a client listener speaks.
type carrier string

const (
	carrierTCP carrier = "tcp"
	carrierTLS carrier = "tls"
	carrierWS  carrier = "ws"
	carrierWSS carrier = "wss"
)

// secure reports whether the carrier runs inside TLS.
func (k carrier) secure() bool { return k == carrierTLS || k == carrierWSS }

// websocket reports whether the carrier runs WebSocket.
func (k carrier) websocket() bool { return k == carrierWS || k == carrierWSS }

// clientListener is one bound client listener and its event loop.
type clientListener struct {
	kind carrier
	ln   netpoll.Listener
	evl  netpoll.EventLoop
}

// listenSpec is a client listener the configuration asks for.
type listenSpec struct {
	kind carrier
	addr string
}

// wantListeners lists the configured client listeners: plain TCP always,
// TLS and WebSocket-over-TLS when certificates are set, WebSocket when
// its address is set.
func (s *Server) wantListeners() []listenSpec {
	want := []listenSpec{{carrierTCP, s.cfg.TCPAddr}}
	if s.certs != nil {
		want = append(want, listenSpec{carrierTLS, s.cfg.TLSAddr})
	}
	if s.cfg.WSAddr != "" {
		want = append(want, listenSpec{carrierWS, s.cfg.WSAddr})
	}
	if s.certs != nil && s.cfg.WSSAddr != "" {
		want = append(want, listenSpec{carrierWSS, s.cfg.WSSAddr})
	}
	return want
}

// listenStream binds a client listener and serves it on its own netpoll
// event loop in the background.
func (s *Server) listenStream(addr string, kind carrier) error {
	ln, err := netpoll.CreateListener("tcp", addr)
	if err != nil {
		return fmt.Errorf("server: listen %s %s: %w", kind, addr, err)
	}
	evl, err := netpoll.NewEventLoop(s.onRequest,
		netpoll.WithOnPrepare(func(nc netpoll.Connection) context.Context { return s.onPrepare(nc, kind) }),
		netpoll.WithWriteTimeout(s.cfg.WriteTimeout),
	)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("server: %s event loop: %w", kind, err)
	}
	go func() {
		if err := evl.Serve(ln); err != nil && !s.draining.Load() {
			s.serveErr <- fmt.Errorf("server: %s: %w", kind, err)
		}
	}()
	s.listeners = append(s.listeners, clientListener{kind: kind, ln: ln, evl: evl})
	return nil
}

// shutdownListeners stops every client listener's event loop, which also
// closes its connections.
func (s *Server) shutdownListeners(ctx context.Context) {
	for _, l := range s.listeners {
		_ = l.evl.Shutdown(ctx)
	}
}

// onPrepare runs once per accepted socket, before netpoll registers it.
// A plain connection without PROXY header starts its session here; the
// others once the header has named the client and the handshake is done.
func (s *Server) onPrepare(nc netpoll.Connection, kind carrier) context.Context {
	if s.draining.Load() {
		_ = nc.Close()
		return s.ctx
	}
	t := &tcpConn{s: s, nc: nc}
	t.dec.limit = t.frameLimit
	if kind.secure() {
		t.armTLS(nc)
	}
	if kind.websocket() {
		t.armWS(nc)
	}
	if !s.proxy.on(kind) {
		t.realIP = remoteIP(nc.RemoteAddr())
		if kind == carrierTCP && t.open(t.realIP) == nil && t.refused != "" {
			// netpoll cannot write here: the refusal goes out with the
			// first bytes, or the connection closes after refuseGrace.
			t.refuseTimer = time.AfterFunc(refuseGrace, func() { _ = nc.Close() })
		}
		_ = nc.AddCloseCallback(t.onClosed)
		return context.WithValue(s.ctx, connKey{}, t)
	}
	// The session starts only once the header names the client, so
	// nothing (logs, logic's real_ip) ever sees the balancer's address.
	if !s.proxy.trusts(nc.RemoteAddr()) {
		if t.sec != nil {
			t.sec.timer.stop()
		}
		if t.ws != nil {
			t.ws.timer.stop()
		}
		s.proxyReject(nc, "untrusted source", nil)
		return s.ctx
	}
	t.awaiting.Store(true)
	t.proxyTimer.arm(s.proxy.timeout, func() {
		if t.awaiting.Load() {
			s.proxyReject(nc, "header timeout", nil)
		}
	})
	_ = nc.AddCloseCallback(t.onClosed)
	return context.WithValue(s.ctx, connKey{}, t)
}

// proxyReject closes a connection that failed the PROXY stage.
func (s *Server) proxyReject(nc netpoll.Connection, reason string, err error) {
	s.metrics.ProxyRejects.Add(1)
	s.log.Debug("proxy header refused, closing", zap.String("peer", remoteIP(nc.RemoteAddr())),
		zap.String("reason", reason), zap.Error(err))
	_ = nc.Close()
}

// onRequest consumes every readable byte, because returning with unread
// bytes makes netpoll call again at once, forever: whole frames go to the
// session straight out of netpoll's buffer, a partial one into the
// decoder's own, and anything after a close is discarded. The layers run
// in order, each finishing before the next sees a byte: PROXY header, TLS
// handshake, WebSocket upgrade, then frames.
func (s *Server) onRequest(ctx context.Context, nc netpoll.Connection) error {
	t, ok := ctx.Value(connKey{}).(*tcpConn)
	if !ok {
		return nc.Close()
	}
	r := nc.Reader()
	defer func() { _ = r.Release() }()
	if t.awaiting.Load() {
		realIP, err := t.readProxyHeader(r)
		if err != nil {
			_ = r.Skip(r.Len())
			s.proxyReject(nc, "bad header", err)
			return nil
		}
		if realIP == "" {
			return nil
		}
		t.awaiting.Store(false)
		t.proxyTimer.stop()
		t.realIP = realIP
	}
	if t.sec != nil && !t.sec.done.Load() {
		if r.Len() == 0 {
			// Exactly the PROXY header so far.
			return nil
		}
		if err := t.handshake(); err != nil {
			s.log.Debug("tls handshake failed, closing", zap.String("real_ip", t.realIP), zap.Error(err))
			_ = r.Skip(r.Len())
			return nc.Close()
		}
	}
	if t.refused != "" {
		// Refused in onPrepare; now the refusal can be written.
		_ = r.Skip(r.Len())
		s.refuse(t)
		return nil
	}
	if t.c == nil && t.ws == nil {
		// A stream session starts as soon as its client is known and
		// its handshake done, so the AUTH deadline runs from then.
		if t.open(t.realIP) == nil {
			_ = r.Skip(r.Len())
			if t.refused != "" {
				s.refuse(t)
				return nil
			}
			return nc.Close()
		}
	}
	var err error
	if t.sec != nil {
		err = t.readTLS(ctx)
	} else {
		err = t.consume(ctx, r)
	}
	var bad *badStreamError
	var wsErr *wsCloseError
	switch {
	case err == nil, errors.Is(err, errDecodeStopped):
	case t.c == nil:
		// Before the session: a refused upgrade, a session that could
		// not start, or a broken TLS stream.
		s.log.Debug("connection refused before its session, closing", zap.String("real_ip", t.realIP), zap.Error(err))
		_ = r.Skip(r.Len())
		return nc.Close()
	case errors.As(err, &wsErr):
		t.closeWS(wsErr)
	case errors.As(err, &bad):
		s.badFrame(t.c, err)
	default:
		t.c.Close(closeReadFailed)
	}
	if err != nil || (t.c != nil && t.c.out.Closing()) {
		// The connection is closing (maybe only after a last answer is
		// written): whatever else the client sent is discarded.
		_ = r.Skip(r.Len())
	}
	return nil
}

// errNoSession reports that the session could not start (the socket
// closed meanwhile, or the gate is draining).
var errNoSession = errors.New("session could not start")

// consume hands the bytes of src, plaintext after any TLS, to the
// carrier's decoder: the WebSocket upgrade first (the session starts once
// it is answered), then WebSocket messages or the Spark byte stream.
func (t *tcpConn) consume(ctx context.Context, src byteSource) error {
	if src.Len() == 0 {
		return nil
	}
	if t.c == nil {
		if t.ws == nil || t.ws.upgraded.Load() {
			return errNoSession
		}
		done, err := t.upgradeWS(src)
		if err != nil || !done {
			return err
		}
		if t.open(t.realIP) == nil {
			if t.refused != "" {
				t.s.refuse(t)
				return errDecodeStopped
			}
			return errNoSession
		}
	}
	if t.ws != nil {
		return t.feedWS(ctx, src)
	}
	return t.dec.feed(ctx, src, t)
}
