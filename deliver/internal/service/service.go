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
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/retry"
)

// Config configures a Service.
type Config struct {
	ID         string
	Partitions int
	BatchSize  int
	LeaseTTL   time.Duration
	// Block is the XREADGROUP BLOCK time.
	Block time.Duration
	// Drain bounds how long in-flight jobs may finish after shutdown
	// starts; unfinished ones stay pending for the next owner.
	Drain time.Duration
	// SampleEvery is how often the per-partition queue gauges are read
	// from Redis.
	SampleEvery time.Duration
}

// Timings of a deliver instance that are not configuration keys.
const (
	// readBlock is one XREADGROUP's wait: short enough that a partition
	// given up is noticed within it.
	readBlock = time.Second
	// drainTimeout bounds the jobs in flight at shutdown.
	drainTimeout = 5 * time.Second
	// sampleEvery is a typical scrape interval.
	sampleEvery = 5 * time.Second
)

// ConfigFrom takes the instance's settings from a loaded configuration,
// with the timings above.
func ConfigFrom(c *config.Config) Config {
	return Config{
		ID: c.Deliver.ID, Partitions: c.Queue.Partitions, BatchSize: c.Deliver.BatchSize, LeaseTTL: c.Deliver.LeaseTTL,
		Block: readBlock, Drain: drainTimeout, SampleEvery: sampleEvery,
	}
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

// New returns a Service that hands decoded jobs to proc; it refuses a
// Config with an empty ID or a value that is not positive (start from
// ConfigFrom).
func New(rdb redis.UniversalClient, cfg Config, proc consumer.Processor, log *zap.Logger, m *metrics.Metrics) (*Service, error) {
	if cfg.ID == "" || cfg.Partitions < 1 || cfg.LeaseTTL <= 0 || cfg.Drain <= 0 || cfg.SampleEvery <= 0 {
		return nil, fmt.Errorf("service: invalid config (deliver.id %q, queue.partitions %d, deliver.lease_ttl %v, drain %v, sample every %v)",
			cfg.ID, cfg.Partitions, cfg.LeaseTTL, cfg.Drain, cfg.SampleEvery)
	}
	cons, err := consumer.New(rdb, consumer.Config{Name: cfg.ID, BatchSize: cfg.BatchSize, Block: cfg.Block}, proc, log, m)
	if err != nil {
		return nil, err
	}
	return &Service{
		rdb: rdb, cfg: cfg, log: log, m: m,
		leases:  lease.New(rdb, lease.Config{ID: cfg.ID, Partitions: cfg.Partitions, TTL: cfg.LeaseTTL}, log, m),
		cons:    cons,
		started: make(chan struct{}),
	}, nil
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
