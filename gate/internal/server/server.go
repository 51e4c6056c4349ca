// Package server is the gate: a netpoll client listener that parses frames,
// answers HEARTBEAT itself and forwards everything else to logic over
// Gateway streams, and the gate.v1.Push gRPC server that writes frames to
// its connections.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/rpclimit"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
)

// TuneNetpoll sets netpoll's process-wide buffer sizes. An idle connection
// keeps one input node (BufferSize, later as large as the most bytes it
// ever had unread) and one output node (the last write that needed a new
// node, at least LinkBufferCap, rounded up to a power of two); both stay
// until filled. The defaults keep 8 KiB in and 4 KiB out per connection.
// An AUTH frame fits in 512 bytes and the answers an idle client gets
// (AUTH's, HEARTBEAT's) in 256, so those sizes keep 768 bytes per idle
// connection instead of 2 KiB (docs/decisions.md 64); larger frames span
// more nodes and reads (a 64 KiB frame up to 128 reads of 512 bytes; such
// frames are rare on a chat connection). Call it once before the first
// connection.
func TuneNetpoll() error {
	netpoll.LinkBufferCap = 256
	if err := netpoll.Configure(netpoll.Config{BufferSize: 512}); err != nil {
		return fmt.Errorf("netpoll: configure: %w", err)
	}
	return nil
}

// Options configure a Server.
type Options struct {
	// Gate is the gate section of a loaded configuration (config.Load, or
	// config.Default with changes); New refuses one that does not
	// validate.
	Gate          config.Gate
	ClusterSecret string
	Logger        *zap.Logger
	Registry      prometheus.Registerer
}

// Server is one gate process's serving state.
type Server struct {
	cfg     config.Gate
	secret  string
	log     *zap.Logger
	metrics *Metrics
	table   *Table
	// sess is the session layer; the server wires it to the listeners,
	// the upstream and the Push service.
	sess    *sessions
	sweeper *Sweeper
	drain   time.Duration
	// proxy is the PROXY protocol stage, nil when gate.proxy_protocol is
	// off.
	proxy *proxyPolicy
	// certs and tls serve the tls and wss listeners; nil when
	// gate.tls_cert_file is unset.
	certs *certStore
	tls   *tlsStage

	// ctx is the base of every connection's context; set once by Start.
	ctx    context.Context
	cancel context.CancelFunc

	up *Upstream
	// listeners are the client listeners in start order, plain TCP
	// first; each has its own event loop.
	listeners []*listener
	// wsPolicy answers WebSocket upgrades on the ws and wss listeners.
	wsPolicy *wsPolicy
	// limits are the connection caps per address and before AUTH.
	limits   *connLimits
	pushSrv  *grpc.Server
	pushLn   net.Listener
	health   *health.Server
	serveErr chan error

	listening atomic.Bool
	// draining refuses new connections and fails readiness (Drain or
	// Shutdown); stopping makes Shutdown run once.
	draining atomic.Bool
	stopping atomic.Bool
}

// New validates the options and prepares a server; nothing listens until
// Start.
func New(opts Options) (*Server, error) {
	if err := config.RequireSecret("cluster.secret", opts.ClusterSecret); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		return nil, errors.New("server: logger is required")
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	cfg := opts.Gate
	// The gate trusts a validated section and substitutes nothing: a zero
	// here is a caller's mistake, refused like a bad config file.
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	trusted, err := newTrustedPeers(&cfg)
	if err != nil {
		return nil, err
	}
	var proxy *proxyPolicy
	if cfg.ProxyProtocol {
		p, err := newProxyPolicy(trusted, cfg.ProxyHeaderTimeout, cfg.ProxyProtocolListeners)
		if err != nil {
			return nil, err
		}
		proxy = p
	}
	wsp, err := newWSPolicy(cfg.WSAllowedOrigins, cfg.WSRealIPHeader, trusted)
	if err != nil {
		return nil, err
	}
	metrics := NewMetrics(opts.Registry)
	limits := newConnLimits(cfg.MaxConnsPerIP, cfg.MaxUnauthenticated)
	limits.register(opts.Registry)
	var certs *certStore
	var tlsSt *tlsStage
	if cfg.TLSEnabled() {
		c, err := newCertStore(cfg.TLSCertFile, cfg.TLSKeyFile, opts.Logger, metrics)
		if err != nil {
			return nil, fmt.Errorf("server: tls: %w", err)
		}
		certs = c
		tlsSt = &tlsStage{conf: newTLSConfig(c), slots: make(chan struct{}, cfg.TLSMaxHandshakes), timeout: cfg.TLSHandshakeTimeout}
	}
	t := NewTable(cfg.Shards)
	srv := &Server{
		certs:    certs,
		tls:      tlsSt,
		proxy:    proxy,
		wsPolicy: wsp,
		limits:   limits,
		cfg:      cfg,
		secret:   opts.ClusterSecret,
		log:      opts.Logger,
		metrics:  metrics,
		table:    t,
		sweeper:  NewSweeper(t, cfg.AuthTimeout, cfg.IdleTimeout, cfg.SweepInterval),
		drain:    cfg.DrainTimeout,
		serveErr: make(chan error, 8),
	}
	srv.sess = &sessions{
		maxFrame:        cfg.MaxFrameSize,
		preAuthMaxFrame: cfg.PreAuthMaxFrameSize,
		outboundQueue:   cfg.OutboundQueue,
		log:             opts.Logger,
		metrics:         metrics,
		table:           t,
		limits:          limits,
		ids:             envelope.NewIDSource(),
		connIDs:         NewConnIDs(time.Now()),
		draining:        &srv.draining,
	}
	return srv, nil
}

// Start binds the client and Push listeners and starts the logic streams.
// It returns once both listeners accept; the streams connect in the
// background (see Ready).
func (s *Server) Start(ctx context.Context) error {
	s.ctx, s.cancel = context.WithCancel(ctx)

	pushLn, err := net.Listen("tcp", s.cfg.PushAddr)
	if err != nil {
		return fmt.Errorf("server: listen push %s: %w", s.cfg.PushAddr, err)
	}
	s.pushLn = pushLn
	advertise := s.cfg.PushAdvertise
	if advertise == "" {
		advertise = pushLn.Addr().String()
	}

	up, err := NewUpstream(UpstreamConfig{
		GateID:          s.cfg.ID,
		PushAdvertise:   advertise,
		Secret:          s.secret,
		LogicAddrs:      s.cfg.LogicAddrs,
		StreamsPerLogic: s.cfg.StreamsPerLogic,
		MaxInflight:     s.cfg.MaxInflight,
		MaxPerConn:      s.cfg.MaxInflightPerConn,
		RequestTimeout:  s.cfg.RequestTimeout,
	}, s.log, s.metrics, s.sess)
	if err != nil {
		_ = pushLn.Close()
		return err
	}
	s.up, s.sess.up = up, up

	guard := clusterauth.NewGuard(s.secret, clusterauth.HealthPrefix, clusterauth.ReflectionPrefix)
	s.pushSrv = grpc.NewServer(append(guard.ServerOptions(), rpclimit.ServerOptions()...)...)
	gatev1.RegisterPushServer(s.pushSrv, &pushService{sess: s.sess, gateID: s.cfg.ID, drain: s.Drain})
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.pushSrv, s.health)
	reflection.Register(s.pushSrv)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	go func() {
		if err := s.pushSrv.Serve(pushLn); err != nil {
			s.serveErr <- fmt.Errorf("server: push: %w", err)
		}
	}()

	for _, l := range s.wantListeners() {
		if err := s.listen(l); err != nil {
			s.shutdownListeners(ctx)
			s.pushSrv.Stop()
			up.closeConns()
			return err
		}
	}
	if s.certs != nil {
		go s.certs.watch(s.ctx, s.cfg.TLSReloadInterval)
	}

	up.cfg.ClientAddrs = s.clientAddrs()
	up.Start(s.ctx)
	go s.sweeper.Run(s.ctx)
	go s.watchReady(s.ctx)
	s.listening.Store(true)
	return nil
}

// watchReady keeps the gRPC health status in step with Ready. Setting the
// same status again is cheap: the health server only notifies watchers of
// changes.
func (s *Server) watchReady(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if s.Ready() == nil {
			st = healthpb.HealthCheckResponse_SERVING
		}
		s.health.SetServingStatus("", st)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Errors returns a channel reporting listeners that stopped unexpectedly.
func (s *Server) Errors() <-chan error { return s.serveErr }

// clientAddrs returns the addresses clients are told to connect to:
// gate.client_advertise, else every bound client listener as a URL.
func (s *Server) clientAddrs() []string {
	if len(s.cfg.ClientAdvertise) > 0 {
		return s.cfg.ClientAdvertise
	}
	addrs := make([]string, 0, len(s.listeners))
	for _, l := range s.listeners {
		u := string(l.kind) + "://" + l.ln.Addr().String()
		if l.kind == carrierWS || l.kind == carrierWSS {
			u += wsPath
		}
		addrs = append(addrs, u)
	}
	return addrs
}

// listenerAddr returns the bound address of a kind of client listener, ""
// when it is off.
func (s *Server) listenerAddr(kind carrier) string {
	for _, l := range s.listeners {
		if l.kind == kind {
			return l.ln.Addr().String()
		}
	}
	return ""
}

// WSAddr returns the bound WebSocket address, "" when it is off.
func (s *Server) WSAddr() string { return s.listenerAddr(carrierWS) }

// WSSAddr returns the bound WebSocket-over-TLS address, "" when it is off.
func (s *Server) WSSAddr() string { return s.listenerAddr(carrierWSS) }

// TLSAddr returns the bound TLS address, "" when TLS is off.
func (s *Server) TLSAddr() string { return s.listenerAddr(carrierTLS) }

// TCPAddr returns the bound client address.
func (s *Server) TCPAddr() string { return s.listenerAddr(carrierTCP) }

// PushAddr returns the bound Push address.
func (s *Server) PushAddr() string { return s.pushLn.Addr().String() }

// Ready reports nil when the gate can serve: listening, not shutting down,
// and at least one logic stream up.
func (s *Server) Ready() error {
	switch {
	case s.draining.Load():
		return errors.New("draining")
	case !s.listening.Load():
		return errors.New("not listening")
	case s.up.Live() == 0:
		return errors.New("no logic stream up")
	}
	return nil
}

// WaitReady blocks until Ready reports nil or ctx ends. It also reports
// SERVING on gRPC health at once, so whoever acts on its return (the ready
// line) never sees a health check lag behind watchReady's ticker.
func (s *Server) WaitReady(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if err := s.Ready(); err == nil {
			s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("server: waiting for readiness: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Shutdown fails readiness and stops accepting (new connections are
// closed at once), then sends every connection KICK server_shutdown spread
// over gate.shutdown_kick_window, each after the answers of its requests
// already with logic (bounded by the drain timeout) and closed once the
// KICK is written, so logic gets Closed for each; then it stops the
// streams and the Push server (docs/decisions.md 70). It returns within
// ShutdownBound, sooner when ctx ends (what is left is then kicked at
// once).
func (s *Server) Shutdown(ctx context.Context) error {
	if s.stopping.Swap(true) {
		return nil
	}
	s.draining.Store(true)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)

	window := max(s.cfg.ShutdownKickWindow, 0)
	kctx, cancel := context.WithTimeout(ctx, window+s.drain)
	defer cancel()
	kicked := s.kickAll(kctx, window)
	// A connection whose session started just as draining began may have
	// missed the snapshot kickAll took; it is kicked now, after the
	// answers already queued.
	kicked = append(kicked, s.kickAll(kctx, 0)...)

	// Each KICK write returns within the write timeout.
	wctx, wcancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer wcancel()
	s.waitFor(wctx, func() bool { return kickedClosed(kicked) })
	for _, c := range kicked {
		if c.state.Load() != stateClosed {
			c.Close(closeKickLate)
		}
	}
	s.table.Range(func(c *Conn) bool { c.Close(closeShutdown); return true })

	// The listener was kept open while kicking (netpoll's Shutdown also
	// closes every idle connection, which must wait for its KICK);
	// onPrepare refused new connections meanwhile.
	lctx, lcancel := context.WithTimeout(ctx, time.Second)
	defer lcancel()
	s.shutdownListeners(lctx)

	uctx, ucancel := context.WithTimeout(ctx, 2*time.Second)
	defer ucancel()
	s.up.Close(uctx)

	stopped := make(chan struct{})
	go func() { s.pushSrv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Second):
		s.pushSrv.Stop()
	}
	s.cancel()
	return nil
}

func (s *Server) waitFor(ctx context.Context, done func() bool) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !done() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
