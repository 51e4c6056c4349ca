// Command deliver consumes the deliver queue and pushes each job to the
// gates holding the recipients' devices.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sparkim/spark/deliver/internal/fanout"
	"github.com/sparkim/spark/deliver/internal/gateclient"
	"github.com/sparkim/spark/deliver/internal/logicclient"
	"github.com/sparkim/spark/deliver/internal/members"
	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/deliver/internal/service"
	"github.com/sparkim/spark/pkg/admin"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/logging"
	"github.com/sparkim/spark/pkg/redisconn"
	"github.com/sparkim/spark/pkg/tracing"
)

func main() {
	cfgPath := flag.String("config", "", "path of the YAML config (empty: defaults and IM_* environment)")
	flag.Parse()
	if err := run(*cfgPath); err != nil {
		fmt.Fprintln(os.Stderr, "deliver:", err)
		os.Exit(1)
	}
}

func run(cfgPath string) error {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	if err := config.RequireSecret("cluster.secret", cfg.Cluster.Secret); err != nil {
		return err
	}
	log, err := logging.New(cfg.Log.Level, "deliver")
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	log = log.With(zap.String("deliver_id", cfg.Deliver.ID))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	stopTracing, err := tracing.Start(ctx, cfg.Tracing, "spark-deliver")
	if err != nil {
		return err
	}
	defer tracing.Stop(stopTracing)

	d := cfg.Deliver
	// Every partition goroutine blocks in XREADGROUP on its own
	// connection; the pool (per master on a cluster) must hold them plus
	// the fan-out traffic.
	rdb, err := redisconn.Open(d.Redis, redisconn.Options{MinIdleConns: 2})
	if err != nil {
		return fmt.Errorf("deliver.redis: %w", err)
	}
	defer func() { _ = rdb.Close() }()
	if d.Redis.PoolSize > 0 && d.Redis.PoolSize < cfg.Queue.Partitions+8 {
		log.Warn("deliver.redis.pool_size is below partitions+8; blocked reads may starve the fan-out",
			zap.Int("pool_size", d.Redis.PoolSize), zap.Int("partitions", cfg.Queue.Partitions))
	}

	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	gates, err := gateclient.New(rdb, cfg.Cluster.Secret, d.GateAddrTTL)
	if err != nil {
		return err
	}
	defer func() { _ = gates.Close() }()
	logics, err := logicclient.New(d.LogicAddrs, cfg.Cluster.Secret, d.LogicTimeout)
	if err != nil {
		return err
	}
	defer func() { _ = logics.Close() }()
	fo, err := fanout.New(rdb, gates, logics, d.PushTimeout, log, m)
	if err != nil {
		return err
	}
	mc, err := members.New(logics, d.MemberCacheIDs)
	if err != nil {
		return err
	}
	fo.SetMembers(mc)
	if cfg.Push.Enabled {
		fo.SetPushPartitions(cfg.Push.Partitions)
	}
	svc, err := service.New(rdb, service.ConfigFrom(cfg), fo, log, m)
	if err != nil {
		return err
	}

	var shuttingDown atomic.Bool
	adm, err := admin.Listen(d.AdminAddr, reg, func() error {
		if shuttingDown.Load() {
			return errors.New("shutting down")
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return svc.Ready(rctx)
	})
	if err != nil {
		return fmt.Errorf("admin listen %s: %w", d.AdminAddr, err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = adm.Close(sctx)
	}()

	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	select {
	case <-svc.Started():
		// deliver_id is on every line through log.With.
		log.Info("ready to serve", zap.String("admin", adm.Addr()))
	case <-ctx.Done():
	}
	<-ctx.Done()
	shuttingDown.Store(true)
	log.Info("shutting down")
	if err := <-done; err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}
