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
	proxyTimer *time.Timer

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
		return "ws"
	}
	if t.sec != nil {
		return "tls"
	}
	return "tcp"
}

// open starts the session with the client's real address, unless the
// socket closed meanwhile; a nil result means there is no session.
func (t *tcpConn) open(realIP string) *Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.s.draining.Load() {
		return nil
	}
	t.c = t.s.openSession(t, realIP)
	return t.c
}

// onClosed is netpoll's close callback: it ends the session once.
func (t *tcpConn) onClosed(netpoll.Connection) error {
	t.mu.Lock()
	t.closed = true
	c := t.c
	t.mu.Unlock()
	if t.proxyTimer != nil {
		t.proxyTimer.Stop()
	}
	if t.sec != nil {
		t.sec.timer.Stop()
	}
	if t.ws != nil {
		t.ws.timer.Stop()
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
)

// listenStream binds a client listener (plain TCP, TLS or WebSocket) and
// serves it on its own netpoll event loop in the background.
func (s *Server) listenStream(addr string, kind carrier) (netpoll.Listener, netpoll.EventLoop, error) {
	ln, err := netpoll.CreateListener("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("server: listen %s %s: %w", kind, addr, err)
	}
	evl, err := netpoll.NewEventLoop(s.onRequest,
		netpoll.WithOnPrepare(func(nc netpoll.Connection) context.Context { return s.onPrepare(nc, kind) }),
		netpoll.WithWriteTimeout(s.cfg.WriteTimeout),
	)
	if err != nil {
		_ = ln.Close()
		return nil, nil, fmt.Errorf("server: %s event loop: %w", kind, err)
	}
	go func() {
		if err := evl.Serve(ln); err != nil && !s.draining.Load() {
			s.serveErr <- fmt.Errorf("server: %s: %w", kind, err)
		}
	}()
	return ln, evl, nil
}

// onPrepare runs once per accepted socket, before netpoll registers it.
// A plain connection without PROXY header starts its session here; the
// others once the header has named the client and the handshake is done.
func (s *Server) onPrepare(nc netpoll.Connection, kind carrier) context.Context {
	if s.draining.Load() {
		_ = nc.Close()
		return s.ctx
	}
	t := &tcpConn{s: s, nc: nc, dec: streamDecoder{maxFrame: s.cfg.MaxFrameSize}}
	switch kind {
	case carrierTLS:
		t.armTLS(nc)
	case carrierWS:
		t.armWS(nc)
	}
	if s.proxy == nil {
		t.realIP = remoteIP(nc.RemoteAddr())
		if kind == carrierTCP {
			t.open(t.realIP)
		}
		_ = nc.AddCloseCallback(t.onClosed)
		return context.WithValue(s.ctx, connKey{}, t)
	}
	// The session starts only once the header names the client, so
	// nothing (logs, logic's real_ip) ever sees the balancer's address.
	if !s.proxy.trusts(nc.RemoteAddr()) {
		if t.sec != nil {
			t.sec.timer.Stop()
		}
		if t.ws != nil {
			t.ws.timer.Stop()
		}
		s.proxyReject(nc, "untrusted source", nil)
		return s.ctx
	}
	t.awaiting.Store(true)
	t.proxyTimer = time.AfterFunc(s.proxy.timeout, func() {
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
// decoder's own, and anything after a close is discarded.
func (s *Server) onRequest(ctx context.Context, nc netpoll.Connection) error {
	t, ok := ctx.Value(connKey{}).(*tcpConn)
	if !ok {
		return nc.Close()
	}
	r := nc.Reader()
	defer func() { _ = r.Release() }()
	if t.c == nil {
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
			t.proxyTimer.Stop()
			t.realIP = realIP
		} else if (t.sec == nil || t.sec.done.Load()) && (t.ws == nil || t.ws.upgraded.Load()) {
			// The session could not start (closed or draining).
			_ = r.Skip(r.Len())
			return nc.Close()
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
		if t.ws != nil && !t.ws.upgraded.Load() {
			if r.Len() == 0 {
				return nil
			}
			done, err := t.upgradeWS(r)
			if err != nil {
				s.log.Debug("ws upgrade refused, closing", zap.String("real_ip", t.realIP), zap.Error(err))
				_ = r.Skip(r.Len())
				return nc.Close()
			}
			if !done {
				return nil
			}
		}
		if t.open(t.realIP) == nil {
			_ = r.Skip(r.Len())
			return nc.Close()
		}
	}
	var err error
	switch {
	case t.ws != nil:
		err = t.feedWS(ctx, r)
	case t.sec != nil:
		err = t.readTLS(ctx)
	default:
		err = t.dec.feed(ctx, r, t)
	}
	var bad *badStreamError
	var wsErr *wsCloseError
	switch {
	case err == nil, errors.Is(err, errDecodeStopped):
	case errors.As(err, &wsErr):
		t.closeWS(wsErr)
	case errors.As(err, &bad):
		s.badFrame(t.c, err)
	default:
		t.c.Close("read failed")
	}
	if err != nil || t.c.out.Closing() {
		// The connection is closing (maybe only after a last answer is
		// written): whatever else the client sent is discarded.
		_ = r.Skip(r.Len())
	}
	return nil
}
