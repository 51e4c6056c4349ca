// Package service assembles a deliver instance: consumer groups, partition
// leases, one consumer goroutine per owned partition, and the fan-out.
package service

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/deliver/internal/consumer"
	"github.com/sparkim/spark/deliver/internal/lease"
	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/retry"
)

// Config configures a Service.
type Config struct {
	ID         string
	Partitions int
	BatchSize  int
	LeaseTTL   time.Duration
	// Block is the XREADGROUP BLOCK time (default 1 s).
	Block time.Duration
	// Drain bounds how long in-flight jobs may finish after shutdown
	// starts (default 5 s); unfinished ones stay pending for the next owner.
	Drain time.Duration
	// SampleEvery is how often the per-partition queue gauges are read
	// from Redis (default 5 s, a typical scrape interval).
	SampleEvery time.Duration
}

// Service is one deliver instance.
type Service struct {
	rdb     redis.UniversalClient
	cfg     Config
	log     *zap.Logger
	leases  *lease.Manager
	cons    *consumer.Consumer
	m       *metrics.Metrics
	started chan struct{}
	groups  atomic.Bool
}

// New returns a Service that hands decoded jobs to proc.
func New(rdb redis.UniversalClient, cfg Config, proc consumer.Processor, log *zap.Logger, m *metrics.Metrics) *Service {
	if cfg.Drain <= 0 {
		cfg.Drain = 5 * time.Second
	}
	if cfg.Block <= 0 {
		cfg.Block = time.Second
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = 5 * time.Second
	}
	return &Service{
		rdb: rdb, cfg: cfg, log: log, m: m,
		leases:  lease.New(rdb, lease.Config{ID: cfg.ID, Partitions: cfg.Partitions, TTL: cfg.LeaseTTL}, log, m),
		cons:    consumer.New(rdb, consumer.Config{Name: cfg.ID, BatchSize: cfg.BatchSize, Block: cfg.Block}, proc, log, m),
		started: make(chan struct{}),
	}
}

// Started is closed once the consumer groups exist and partitions are being
// taken.
func (s *Service) Started() <-chan struct{} { return s.started }

// Owned returns the partitions this instance processes now.
func (s *Service) Owned() []int { return s.leases.Owned() }

// Ready reports nil when Redis is reachable and the groups exist.
func (s *Service) Ready(ctx context.Context) error {
	if !s.groups.Load() {
		return errors.New("consumer groups not created yet")
	}
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// Run serves until ctx ends, then stops reading, lets in-flight jobs finish
// within the drain time, releases the leases and returns.
func (s *Service) Run(ctx context.Context) error {
	bo := retry.NewBackoff(retry.Policy{Initial: 100 * time.Millisecond, Max: 3 * time.Second, Multiplier: 2, Jitter: true})
	for p := 0; p < s.cfg.Partitions; {
		if err := consumer.EnsureGroup(ctx, s.rdb, p); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Warn("create consumer group, retrying", zap.Error(err))
			if !bo.Sleep(ctx) {
				return nil
			}
			continue
		}
		p++
	}
	s.groups.Store(true)
	close(s.started)
	// Sampling starts once the groups exist: XPENDING on a stream without
	// its group fails.
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		consumer.SampleQueues(ctx, s.rdb, s.cfg.Partitions, s.cfg.SampleEvery, s.m, s.log)
	}()
	defer func() { <-sampled }()

	// In-flight jobs outlive ctx by the drain time, so a SIGTERM does not cut
	// a push in half; after it they are abandoned and stay pending.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopDrain := context.AfterFunc(ctx, func() { time.AfterFunc(s.cfg.Drain, cancelWork) })
	defer stopDrain()

	s.leases.Run(ctx, func(stop <-chan struct{}, p int) {
		s.cons.Run(work, stop, p)
	})
	return nil
}
