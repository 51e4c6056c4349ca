package server

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"
)

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

// listener is one bound client listener: its event loop and everything
// its sockets need, handed down by the server once, so a socket never
// reaches back into the server's wiring. The stages it runs are fixed
// when it is built: nil proxy, tls or ws means the stage is off.
type listener struct {
	kind carrier
	ln   netpoll.Listener
	evl  netpoll.EventLoop

	// base is every connection's context; draining is the server's flag
	// (new sockets are closed at once).
	base     context.Context
	draining *atomic.Bool
	sessions sessionLayer
	log      *zap.Logger
	metrics  *Metrics

	proxy *proxyPolicy
	tls   *tlsStage
	ws    *wsPolicy
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

// listen binds a client listener and serves it on its own netpoll event
// loop in the background. It runs in Start, once s.ctx is set.
func (s *Server) listen(spec listenSpec) error {
	l := &listener{
		kind:     spec.kind,
		base:     s.ctx,
		draining: &s.draining,
		sessions: s.sess,
		log:      s.log,
		metrics:  s.metrics,
	}
	if s.proxy.on(spec.kind) {
		l.proxy = s.proxy
	}
	if spec.kind.secure() {
		l.tls = s.tls
	}
	if spec.kind.websocket() {
		l.ws = s.wsPolicy
	}
	ln, err := netpoll.CreateListener("tcp", spec.addr)
	if err != nil {
		return fmt.Errorf("server: listen %s %s: %w", spec.kind, spec.addr, err)
	}
	evl, err := netpoll.NewEventLoop(l.onRequest,
		netpoll.WithOnPrepare(l.onPrepare),
		netpoll.WithWriteTimeout(s.cfg.WriteTimeout),
	)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("server: %s event loop: %w", spec.kind, err)
	}
	l.ln, l.evl = ln, evl
	go func() {
		if err := evl.Serve(ln); err != nil && !s.draining.Load() {
			s.serveErr <- fmt.Errorf("server: %s: %w", spec.kind, err)
		}
	}()
	s.listeners = append(s.listeners, l)
	return nil
}

// shutdownListeners stops every client listener's event loop, which also
// closes its connections.
func (s *Server) shutdownListeners(ctx context.Context) {
	for _, l := range s.listeners {
		_ = l.evl.Shutdown(ctx)
	}
}

// connKey is the netpoll connection context's key for its carrierConn.
type connKey struct{}

// carrierConn is one accepted socket as the event loop drives it: the
// stages of its socket, then one of the two carriers.
type carrierConn interface {
	Transport
	sock() *socket
	// begin runs once the stages under the carrier are done, on each
	// OnRequest until the session is open: the byte stream opens its
	// session at once, WebSocket only after its upgrade. It reports
	// false when there is no session and the socket is closing.
	begin() bool
	// carry hands plaintext bytes to the carrier's own framing.
	carry(ctx context.Context, src byteSource) error
	// readFailed ends the session after carry failed.
	readFailed(err error)
	// stopTimers stops the deadlines of the stages not yet done.
	stopTimers()
	// onClosed is netpoll's close callback.
	onClosed(netpoll.Connection) error
}

// onPrepare runs once per accepted socket, before netpoll registers it.
// A plain TCP connection without PROXY header starts its session here;
// the others once the header has named the client and the handshake is
// done.
func (l *listener) onPrepare(nc netpoll.Connection) context.Context {
	if l.draining.Load() {
		_ = nc.Close()
		return l.base
	}
	var t carrierConn
	if l.ws != nil {
		t = newWSTransport(l, nc)
	} else {
		t = &streamTransport{socket: socket{l: l, nc: nc}}
	}
	sk := t.sock()
	if l.tls != nil {
		sk.armTLS()
	}
	if !sk.armProxy() {
		t.stopTimers()
		return l.base
	}
	if l.kind == carrierTCP && l.proxy == nil {
		sk.beginAtAccept(t)
	}
	_ = nc.AddCloseCallback(t.onClosed)
	return context.WithValue(l.base, connKey{}, t)
}

// onRequest consumes every readable byte, because returning with unread
// bytes makes netpoll call again at once, forever: whole frames go to the
// session straight out of netpoll's buffer, a partial one into the
// carrier's own, and anything after a close is discarded.
func (l *listener) onRequest(ctx context.Context, nc netpoll.Connection) error {
	t, ok := ctx.Value(connKey{}).(carrierConn)
	if !ok {
		return nc.Close()
	}
	sk := t.sock()
	r := nc.Reader()
	defer func() { _ = r.Release() }()
	if !sk.runStages(r) {
		return nil
	}
	if sk.refused != nil {
		// Refused at accept; now the refusal can be written.
		_ = r.Skip(r.Len())
		sk.refuse(t)
		return nil
	}
	if sk.c == nil && !t.begin() {
		_ = r.Skip(r.Len())
		return nil
	}
	err := sk.read(ctx, r, t)
	switch {
	case err == nil, errors.Is(err, errDecodeStopped):
	case sk.c == nil:
		// Before the session: a refused upgrade, a session that could
		// not start, or a broken TLS stream.
		l.log.Debug("connection refused before its session, closing", zap.String("real_ip", sk.realIP), zap.Error(err))
		_ = r.Skip(r.Len())
		return nc.Close()
	default:
		t.readFailed(err)
	}
	if err != nil || (sk.c != nil && sk.c.closing()) {
		// The connection is closing (maybe only after a last answer is
		// written): whatever else the client sent is discarded.
		_ = r.Skip(r.Len())
	}
	return nil
}
