// Package server wires the logic process: dependencies (retried at
// start-up), the MsgId generator and its machine lease, the gRPC services,
// the admin port, and the graceful shutdown.
package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/sparkim/spark/logic/internal/api"
	"github.com/sparkim/spark/logic/internal/auth"
	"github.com/sparkim/spark/logic/internal/console"
	"github.com/sparkim/spark/logic/internal/conversation"
	"github.com/sparkim/spark/logic/internal/gatepush"
	"github.com/sparkim/spark/logic/internal/gateway"
	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/logic/internal/inbox"
	"github.com/sparkim/spark/logic/internal/internalapi"
	"github.com/sparkim/spark/logic/internal/lease"
	"github.com/sparkim/spark/logic/internal/mailbox"
	"github.com/sparkim/spark/logic/internal/media"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/metrics"
	"github.com/sparkim/spark/logic/internal/notify"
	"github.com/sparkim/spark/logic/internal/online"
	"github.com/sparkim/spark/logic/internal/push"
	"github.com/sparkim/spark/logic/internal/ratelimit"
	"github.com/sparkim/spark/logic/internal/relation"
	"github.com/sparkim/spark/logic/internal/routesweep"
	"github.com/sparkim/spark/logic/internal/sendhook"
	"github.com/sparkim/spark/logic/internal/signal"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/upstream"
	"github.com/sparkim/spark/logic/internal/user"
	"github.com/sparkim/spark/logic/internal/webhook"
	"github.com/sparkim/spark/pkg/admin"
	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/logging"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/redisconn"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/rpclimit"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// Timings of the process.
const (
	// MachineLeaseTTL is the life of the MsgId machine-id lease in Redis;
	// a killed logic's id is free again at most this long after its last
	// renewal (every MachineLeaseTTL/5).
	MachineLeaseTTL = 15 * time.Second
	// MachineLeaseMargin is how long before the lease could expire a
	// logic whose renewals fail stops issuing ids (50301), so the next
	// holder never overlaps it: ids stop MachineLeaseTTL -
	// MachineLeaseMargin (10 s) after the last confirmed renewal.
	MachineLeaseMargin = 5 * time.Second
	drainTimeout       = 5 * time.Second
	kickTimeout        = 3 * time.Second
	// consoleErrors is how many warnings and errors the console keeps.
	consoleErrors = 100
)

// AutoMachineID as logic.machine_id makes logic lease the first free
// machine id from Redis (trying from a random one), so identical replicas
// need no id of their own.
const AutoMachineID = -1

// Run serves until ctx ends (SIGTERM), then shuts down gracefully. It
// returns an error when the process could not start or lost its MsgId
// machine lease.
func Run(ctx context.Context, cfg *config.Config, log *zap.Logger) error {
	if err := config.RequireSecret("cluster.secret", cfg.Cluster.Secret); err != nil {
		return err
	}
	if err := config.RequireSecret("logic.jwt_secret", cfg.Logic.JWTSecret); err != nil {
		return err
	}
	lc := cfg.Logic
	if lc.MachineID != AutoMachineID && (lc.MachineID < 0 || lc.MachineID > msgid.MaxMachineID) {
		return fmt.Errorf("logic.machine_id %d outside 0..%d (or %d: lease a free one)", lc.MachineID, msgid.MaxMachineID, AutoMachineID)
	}

	// The console shows this process's last warnings and errors.
	recent := logging.NewRecent(consoleErrors)
	log = recent.Tee(log)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	rd := newReadiness("starting")
	adm, err := admin.Listen(lc.AdminAddr, reg, rd.check)
	if err != nil {
		return fmt.Errorf("admin listen %s: %w", lc.AdminAddr, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = adm.Close(cctx)
		cancel()
	}()
	ln, err := net.Listen("tcp", lc.GRPCAddr)
	if err != nil {
		return fmt.Errorf("grpc listen %s: %w", lc.GRPCAddr, err)
	}
	defer ln.Close()
	hln, err := net.Listen("tcp", lc.HTTPAddr)
	if err != nil {
		return fmt.Errorf("http listen %s: %w", lc.HTTPAddr, err)
	}
	defer hln.Close()

	// Dependencies, retried until reachable.
	db, err := store.Open(lc.MySQL.DSN, lc.MySQL.MaxOpenConns, lc.MySQL.MaxIdleConns)
	if err != nil {
		return err
	}
	defer db.Close()
	hwdb, err := store.Open(lc.MySQL.DSN, 2, 2)
	if err != nil {
		return err
	}
	defer hwdb.Close()
	st := store.New(db)
	if err := awaitDep(ctx, log, "mysql", st.Ping); err != nil {
		return err
	}
	if err := awaitDep(ctx, log, "mysql isolation", func(ctx context.Context) error {
		err := st.CheckIsolation(ctx)
		if errors.Is(err, store.ErrIsolation) {
			return backoffStop{err}
		}
		return err
	}); err != nil {
		return err
	}
	rdb, err := redisconn.Open(lc.Redis, redisconn.Options{})
	if err != nil {
		return fmt.Errorf("logic.redis: %w", err)
	}
	defer rdb.Close()
	if err := awaitDep(ctx, log, "redis", func(ctx context.Context) error { return rdb.Ping(ctx).Err() }); err != nil {
		return err
	}

	// MsgId machine lease and generator. Ids are issued only while the
	// lease is certainly held (lease.GuardedIDs), and after a lapse only
	// above what another holder of the machine id may have issued.
	fatal := make(chan error, 1)
	hw := store.NewHighWater(hwdb)
	var (
		ml    *lease.Lease
		floor lease.Floor
		// machine is the id the lease is for, stored before OnRetake can
		// run (a renewal, MachineLeaseTTL/5 later) and read there.
		machine atomic.Int64
	)
	opts := lease.Options{
		TTL: MachineLeaseTTL, Margin: MachineLeaseMargin,
		OnLost: func(err error) {
			select {
			case fatal <- err:
			default:
			}
		},
		OnRetake: func(ctx context.Context) error {
			id := int(machine.Load())
			mark, err := hw.LoadHighWater(ctx, id)
			if err != nil {
				return fmt.Errorf("high-water mark after retaking the machine lease: %w", err)
			}
			floor.RaiseToMs(mark)
			log.Warn("msgid machine lease had expired and was taken again; ids continue above its high-water mark",
				zap.Int("machine_id", id), zap.Int64("high_water_ms", mark))
			return nil
		},
	}
	if err := awaitDep(ctx, log, "msgid machine lease", func(context.Context) error {
		if lc.MachineID == AutoMachineID {
			// Every id held is worth waiting for: one frees up when its
			// logic stops or its lease expires.
			l, id, err := lease.AcquireFree(ctx, rdb, rediskey.MachineLease, msgid.MaxMachineID+1, rand.IntN(msgid.MaxMachineID+1), opts)
			if err == nil {
				machine.Store(int64(id))
				ml = l
			}
			return err
		}
		machine.Store(int64(lc.MachineID))
		o := opts
		o.Wait = MachineLeaseTTL + time.Second
		var err error
		ml, err = lease.Acquire(ctx, rdb, rediskey.MachineLease(lc.MachineID), o)
		if errors.Is(err, lease.ErrHeld) {
			return backoffStop{err}
		}
		return err
	}); err != nil {
		var bs backoffStop
		if errors.As(err, &bs) {
			return fmt.Errorf("logic.machine_id %d: %w", lc.MachineID, bs.err)
		}
		return err
	}
	machineID := int(machine.Load())
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := ml.Release(cctx); err != nil {
			log.Warn("release msgid machine lease", zap.Error(err))
		}
		cancel()
	}()
	gen, err := msgid.New(ctx, msgid.Settings{MachineID: machineID, Store: hw})
	if err != nil {
		return err
	}
	ids := lease.Guard(gen, ml, &floor)

	// Services.
	base, stopRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRequests()
	wc := lc.Webhook
	var hooks *webhook.Service
	if wc.Enabled {
		hooks = webhook.NewService(st, wc, lc.Upstream.Services)
		st.RecordWebhookEvents(ids.Next)
		if err := awaitDep(ctx, log, "webhook endpoints of logic.webhook.urls", func(ctx context.Context) error {
			err := hooks.EnsureConfigEndpoints(ctx)
			if code, _ := errcode.Of(err); code == errcode.InvalidArgument {
				return backoffStop{err}
			}
			return err
		}); err != nil {
			return err
		}
	}
	upstreams := upstream.New(st, ids, lc.Upstream, wc)
	gates := gatepush.NewRegistry(rdb, log)
	clients := gatepush.NewClients(cfg.Cluster.Secret)
	defer clients.Close()
	mb := mailbox.New(st, ids)
	authSvc := auth.New(st, rdb, []byte(lc.JWTSecret), gatepush.NewKicker(gates, clients, kickTimeout, log, m), log)
	authSvc.RecordKicks(mb)
	var sweeper *routesweep.Sweeper
	if wc.Enabled {
		authSvc.RecordPresence(st)
		idx := routesweep.NewIndex(rdb, log)
		authSvc.IndexRoutes(idx)
		sweeper = routesweep.NewSweeper(rdb, idx, st, wc.GateSweepInterval, log)
	}
	limits, err := ratelimit.New(rdb, ratelimit.FromConfig(lc.RateLimit), log, reg)
	if err != nil {
		return err
	}
	authSvc.LimitDevices(limits)
	relSvc, err := relation.New(st, ids, relation.Options{Policy: relation.Policy(lc.P2PPolicy)})
	if err != nil {
		return err
	}
	groupSvc, err := group.New(st, ids, group.Config{MaxMembers: lc.GroupMaxMembers})
	if err != nil {
		return err
	}
	mediaStore, err := media.Open(lc.Media, hln.Addr().String())
	if err != nil {
		return err
	}
	if mediaStore.Check != nil {
		if err := awaitDep(ctx, log, "media store "+lc.Media.S3.Endpoint+"/"+lc.Media.S3.Bucket, mediaStore.Check); err != nil {
			return err
		}
	}
	mediaSvc := media.NewService(st, mediaStore.Storage, lc.Media)
	sendCfg := message.ConfigFrom(cfg)
	sendCfg.Media = func(ctx context.Context, from message.Sender, cid int64, messageType int, content []byte) error {
		return mediaSvc.CheckMessage(ctx, media.Sender{UserID: from.UserID, Trusted: from.API || from.System}, cid, messageType, content)
	}
	sendCfg.Conversations = conversation.NewResolver(st, ids.Next, relSvc, groupSvc)
	if sendCfg.BeforeSend, err = sendhook.New(lc.BeforeSend, log, m); err != nil {
		return err
	}
	sendSvc, err := message.New(st, rdb, ids, sendCfg, log, m)
	if err != nil {
		return err
	}
	defer sendSvc.Close() // after the drain below: no send is in flight by then
	inboxSvc := inbox.New(st, rdb, mb, log)
	pushTokens := push.NewTokens(st)
	var unacked *push.Unacked
	if cfg.Push.Enabled {
		unacked = push.NewUnacked(rdb, cfg.Push.Partitions)
		providers, err := push.ProvidersFrom(cfg.Push)
		if err != nil {
			return err
		}
		pc := cfg.Push
		worker, err := push.NewWorker(rdb, st, providers, push.WorkerConfig{
			Name:       fmt.Sprintf("logic-%d-%d", machineID, time.Now().UnixNano()),
			Partitions: pc.Partitions, CollapseInterval: pc.CollapseInterval, TTL: pc.TTL,
			ClaimIdle: pc.ClaimIdle, SendTimeout: pc.SendTimeout, MaxAttempts: pc.MaxAttempts,
		}, log.Named("push"), push.NewMetrics(reg))
		if err != nil {
			return err
		}
		// The worker stops with the requests (base), after the gateway
		// drained; an entry it was on stays pending for the next worker.
		pushDone := make(chan struct{})
		go func() { defer close(pushDone); worker.Run(base) }()
		defer func() { stopRequests(); <-pushDone }()
	}
	// One notifier for both front doors: a change pushes its control
	// events the same way whichever door made it.
	notifier, err := notify.New(rdb, cfg.Queue.Partitions)
	if err != nil {
		return err
	}
	onlineSvc := online.New(rdb, gates, clients, kickTimeout, log)
	signals := signal.New(sendCfg.Conversations, groupSvc, onlineSvc)
	gw, err := gateway.NewServer(base, &gateway.Handler{
		Auth: authSvc, Messages: sendSvc, Inbox: inboxSvc, MaxFrameSize: lc.MaxFrameSize, IDs: ids,
		Relations: relSvc, Groups: groupSvc, Notifier: notifier, Push: pushTokens, Unacked: unacked, Upstream: upstreams,
		Signals: signals, Media: mediaSvc,
		Limits: limits, Log: log, Metrics: m, Timeout: lc.RequestTimeout,
	}, gates, log)
	if err != nil {
		return err
	}

	guard := clusterauth.NewGuard(cfg.Cluster.Secret, clusterauth.HealthPrefix, clusterauth.ReflectionPrefix, api.Prefix)
	keys := api.NewKeyGuard(lc.APIKeys)
	gs := grpc.NewServer(append(rpclimit.ServerOptions(),
		grpc.ChainUnaryInterceptor(guard.Unary, keys.Unary),
		grpc.ChainStreamInterceptor(guard.Stream, keys.Stream),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	)...)
	logicv1.RegisterGatewayServer(gs, gw)
	adm.Handle("/gates", api.GatesHandler(onlineSvc))
	pushPartitions := 0
	if cfg.Push.Enabled {
		pushPartitions = cfg.Push.Partitions
	}
	con := console.Handler(console.Sources{Online: onlineSvc, Redis: rdb, DeliverPartitions: cfg.Queue.Partitions,
		PushPartitions: pushPartitions, Webhooks: hooks, Recent: recent, Keys: keys})
	adm.Handle("/console", con)
	adm.Handle("/console/state", con)
	logicv1.RegisterApiServer(gs, api.New(api.Services{
		Store: st, Users: user.New(st, onlineSvc), Relations: relSvc, Groups: groupSvc,
		Messages: sendSvc, Inbox: inboxSvc, Online: onlineSvc, Push: pushTokens, Webhooks: hooks, Upstream: upstreams,
		Media: mediaSvc, Signals: signals,
	}, api.Config{JWTSecret: []byte(lc.JWTSecret), TokenTTL: lc.TokenTTL, SystemUserID: lc.SystemUserID},
		notifier, log))
	logicv1.RegisterInternalServer(gs, internalapi.New(mb, groupSvc, log))
	healthpb.RegisterHealthServer(gs, rd.health)
	reflection.Register(gs)

	probe := func(ctx context.Context) error {
		if err := st.Ping(ctx); err != nil {
			return fmt.Errorf("mysql: %w", err)
		}
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		return nil
	}
	dispatchCtx, stopDispatch := context.WithCancel(base)
	dispatched := make(chan struct{})
	switch {
	case wc.Enabled:
		d := webhook.NewDispatcher(st, rdb, wc, log, webhook.NewMetrics(reg))
		swept := make(chan struct{})
		go func() { defer close(swept); sweeper.Run(dispatchCtx) }()
		go func() { defer close(dispatched); d.Run(dispatchCtx); <-swept }()
	case len(lc.Upstream.Services) > 0:
		// Pulled upstream items are pruned like events even with no
		// dispatcher to do it.
		go func() { defer close(dispatched); upstreams.RunPrune(dispatchCtx, log) }()
	default:
		close(dispatched)
	}
	defer func() { stopDispatch(); <-dispatched }()

	rd.set(nil)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go rd.watch(watchCtx, 2*time.Second, probe)

	// The HTTP/JSON door calls the gRPC listener over loopback, so its
	// calls pass every interceptor a gRPC call does (docs/decisions.md 86).
	self, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), rpclimit.DialOption())
	if err != nil {
		return fmt.Errorf("http/json door: dial own grpc listener: %w", err)
	}
	defer self.Close()
	hh, err := api.NewHTTPHandler(ctx, self)
	if err != nil {
		return err
	}
	if mediaStore.Handler != nil {
		mux := http.NewServeMux()
		mux.Handle("/media/", mediaStore.Handler)
		mux.Handle("/", hh)
		hh = mux
	}
	hs := &http.Server{Handler: hh, ReadHeaderTimeout: 10 * time.Second, ErrorLog: zap.NewStdLog(log.Named("http"))}

	serveErr := make(chan error, 2)
	go func() { serveErr <- gs.Serve(ln) }()
	go func() {
		if err := hs.Serve(hln); !errors.Is(err, http.ErrServerClosed) {
			serveErr <- fmt.Errorf("http: %w", err)
		}
	}()
	log.Info("ready to serve", zap.String("grpc", ln.Addr().String()), zap.String("http", hln.Addr().String()),
		zap.String("admin", adm.Addr()), zap.Int("machine_id", machineID))

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-fatal:
		runErr = err
		log.Error("msgid machine lease lost; stopping", zap.Error(err))
	case err := <-serveErr:
		runErr = fmt.Errorf("serve: %w", err)
	}

	// Not ready, stop taking work, drain, stop.
	stopWatch()
	rd.set(errors.New("shutting down"))
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	gw.Drain(dctx)
	// HTTP calls in flight finish through the gRPC server, which stops
	// after them.
	if err := hs.Shutdown(dctx); err != nil {
		_ = hs.Close()
	}
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-dctx.Done():
		gs.Stop()
		<-stopped
	}
	authSvc.Wait(dctx)
	stopRequests()
	log.Info("stopped")
	return runErr
}

// backoffStop ends awaitDep for an error that waiting will not fix.
type backoffStop struct{ err error }

func (b backoffStop) Error() string { return b.err.Error() }
