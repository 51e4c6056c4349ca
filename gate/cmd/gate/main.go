// Command gate holds client connections and forwards their frames to logic.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sparkim/spark/gate/internal/server"
	"github.com/sparkim/spark/pkg/admin"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/logging"
	"github.com/sparkim/spark/pkg/tracing"
)

func main() {
	configPath := flag.String("config", "", "path to the YAML config (defaults and IM_* env when empty)")
	flag.Parse()
	if err := run(*configPath); err != nil {
		fmt.Fprintln(os.Stderr, "gate:", err)
		os.Exit(1)
	}
}

func run(configPath string) error {
	cfg, err := config.Load(configPath)
	if err != nil {
		return err
	}
	log, err := logging.New(cfg.Log.Level, "gate")
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	if err := server.TuneNetpoll(); err != nil {
		return err
	}
	stopTracing, err := tracing.Start(context.Background(), cfg.Tracing, "spark-gate")
	if err != nil {
		return err
	}
	defer tracing.Stop(stopTracing)

	reg := prometheus.NewRegistry()
	srv, err := server.New(server.Options{
		Gate:          cfg.Gate,
		ClusterSecret: cfg.Cluster.Secret,
		Logger:        log,
		Registry:      reg,
	})
	if err != nil {
		return err
	}

	// The server's own context outlives the signal: after SIGTERM it still
	// needs its logic streams to drain answers and send Closed.
	if err := srv.Start(context.Background()); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	adm, err := admin.Listen(cfg.Gate.AdminAddr, reg, srv.Ready)
	if err != nil {
		shutdown(srv, nil, log)
		return fmt.Errorf("admin: listen %s: %w", cfg.Gate.AdminAddr, err)
	}
	log.Info("listening, waiting for a logic stream",
		zap.String("tcp", srv.TCPAddr()), zap.String("tls", srv.TLSAddr()), zap.String("ws", srv.WSAddr()), zap.String("wss", srv.WSSAddr()), zap.String("push", srv.PushAddr()), zap.String("admin", adm.Addr()))

	// "ready to serve" means a client can AUTH right away, so it waits for
	// the first logic stream; the listeners already accept meanwhile.
	go func() {
		if err := srv.WaitReady(ctx); err != nil {
			return
		}
		log.Info("ready to serve",
			zap.String("tcp", srv.TCPAddr()), zap.String("tls", srv.TLSAddr()), zap.String("ws", srv.WSAddr()), zap.String("wss", srv.WSSAddr()), zap.String("push", srv.PushAddr()),
			zap.String("admin", adm.Addr()), zap.String("gate_id", cfg.Gate.ID))
	}()

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case runErr = <-srv.Errors():
		log.Error("listener failed", zap.Error(runErr))
	}
	shutdown(srv, adm, log)
	return runErr
}

func shutdown(srv *server.Server, adm *admin.Server, log *zap.Logger) {
	// The kick window plus the drain: the server bounds each step itself,
	// this only keeps a wedged step from holding the process forever.
	ctx, cancel := context.WithTimeout(context.Background(), srv.ShutdownBound())
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Warn("shutdown", zap.Error(err))
	}
	if adm != nil {
		_ = adm.Close(ctx)
	}
	log.Info("stopped")
}
