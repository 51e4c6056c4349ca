// Package lease decides which deliver instance owns which queue partition.
// Each instance heartbeats into a members ZSET, takes a fair share
// ceil(P / live instances) of partition leases (SET NX PX), renews them at a
// third of their TTL, and hands extras back once their worker finished the
// job in hand. A partition has at most one owner while leases are renewed,
// so its jobs are processed in stream order. The lease keys are pkg/lease
// leases whose holder is the deliver id: after a crash and restart under
// the same id the partitions resume without waiting for the old leases to
// expire. (Two live processes must never share an id; they would share
// the consumer name too.)
package lease

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/deliver/internal/metrics"
	redislease "github.com/sparkim/spark/pkg/lease"
	"github.com/sparkim/spark/pkg/rediskey"
)

// Config configures a Manager.
type Config struct {
	// ID is this instance's member name and lease value (deliver.id).
	ID         string
	Partitions int
	// TTL is the lease lifetime and the liveness window of members.
	TTL time.Duration
}

// RunFunc processes partition p until stop is closed and returns after the
// job in hand. The Manager releases the lease after it returns.
type RunFunc func(stop <-chan struct{}, p int)

type part struct {
	stop      chan struct{}
	stopping  bool // told to stop; lease still held until the worker returns
	lost      bool // lease is no longer ours; do not release
	lastRenew time.Time
}

func (pt *part) halt() {
	if !pt.stopping {
		pt.stopping = true
		close(pt.stop)
	}
}

// Manager holds this instance's leases and runs a worker per owned
// partition.
type Manager struct {
	rdb    redis.Cmdable
	cfg    Config
	log    *zap.Logger
	m      *metrics.Metrics
	offset int

	mu       sync.Mutex
	snapshot []int
}

// New returns a Manager.
func New(rdb redis.Cmdable, cfg Config, log *zap.Logger, m *metrics.Metrics) *Manager {
	h := fnv.New32a()
	_, _ = h.Write([]byte(cfg.ID))
	return &Manager{
		rdb: rdb, cfg: cfg, log: log, m: m,
		// Instances starting together try partitions in different orders, so
		// they do not all race for partition 0 first.
		offset: int(h.Sum32() % uint32(max(cfg.Partitions, 1))),
	}
}

// Owned returns the partitions whose worker runs now, ascending.
func (m *Manager) Owned() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.snapshot)
}

// Run manages leases until ctx ends; then it stops every worker, waits for
// them, releases the leases and leaves the members set, so the others take
// over at once instead of after the TTL.
func (m *Manager) Run(ctx context.Context, run RunFunc) {
	owned := make(map[int]*part)
	exited := make(chan int, m.cfg.Partitions)
	ticker := time.NewTicker(m.interval())
	defer ticker.Stop()

	m.tick(ctx, owned, exited, run)
	for {
		select {
		case <-ctx.Done():
			m.shutdown(ctx, owned, exited)
			return
		case p := <-exited:
			m.reap(ctx, owned, p)
		case <-ticker.C:
			m.tick(ctx, owned, exited, run)
		}
	}
}

func (m *Manager) shutdown(ctx context.Context, owned map[int]*part, exited chan int) {
	for _, pt := range owned {
		pt.halt()
	}
	// The workers' own context bounds how long this takes.
	bg := context.WithoutCancel(ctx)
	for len(owned) > 0 {
		m.reap(bg, owned, <-exited)
	}
	cctx, cancel := context.WithTimeout(bg, 2*time.Second)
	defer cancel()
	if err := m.rdb.ZRem(cctx, rediskey.DeliverMembers(), m.cfg.ID).Err(); err != nil {
		m.log.Warn("leave members", zap.Error(err))
	}
}

// reap handles a worker that returned: its lease is released unless lost.
func (m *Manager) reap(ctx context.Context, owned map[int]*part, p int) {
	pt, ok := owned[p]
	if !ok {
		return
	}
	delete(owned, p)
	if !pt.lost {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := redislease.Release(cctx, m.rdb, rediskey.DeliverLease(p), m.cfg.ID)
		cancel()
		if err != nil && !errors.Is(err, redis.Nil) {
			// It expires by itself after the TTL.
			m.log.Warn("release lease", zap.Int("partition", p), zap.Error(err))
		} else {
			m.log.Info("partition released", zap.Int("partition", p))
		}
	}
	m.publish(owned)
}

func (m *Manager) publish(owned map[int]*part) {
	ps := make([]int, 0, len(owned))
	for p, pt := range owned {
		if !pt.stopping {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	m.mu.Lock()
	m.snapshot = ps
	m.mu.Unlock()
	m.m.OwnedPartitions.Set(float64(len(ps)))
}

func (m *Manager) tick(ctx context.Context, owned map[int]*part, exited chan int, run RunFunc) {
	now := time.Now()
	interval := m.interval()
	tctx, cancel := context.WithTimeout(ctx, m.cfg.TTL/3+time.Second)
	defer cancel()
	live, hbErr := m.heartbeat(tctx, now)
	if hbErr != nil {
		m.m.RedisErrors.Inc()
		m.log.Warn("deliver heartbeat", zap.Error(hbErr))
	}

	for p, pt := range owned {
		if pt.lost {
			continue
		}
		ours, err := redislease.Renew(tctx, m.rdb, rediskey.DeliverLease(p), m.cfg.ID, m.cfg.TTL)
		switch {
		case err != nil:
			// Unknown whether it still holds. Stop at the last tick
			// before the lease could expire, the second failing one (two
			// thirds of the TTL after the renewal): the next comes a
			// whole TTL after it, when another instance may already own
			// the partition. Comparing with TTL - 1.5 intervals (half
			// the TTL) rather than two thirds keeps the tick's own jitter
			// from deferring the stop to that next tick.
			if now.Sub(pt.lastRenew) >= m.cfg.TTL-interval*3/2 {
				pt.lost = true
				pt.halt()
				m.log.Warn("lease not renewed in time, stopping partition", zap.Int("partition", p), zap.Error(err))
			}
		case !ours:
			pt.lost = true
			pt.halt()
			m.log.Warn("lease lost, stopping partition", zap.Int("partition", p))
		default:
			pt.lastRenew = now
		}
	}
	if hbErr != nil {
		m.publish(owned)
		return
	}

	share := (m.cfg.Partitions + live - 1) / live
	var active []int
	for p, pt := range owned {
		if !pt.stopping {
			active = append(active, p)
		}
	}
	if len(active) > share {
		// Hand back the ones furthest from our offset, keeping a stable set.
		slices.SortFunc(active, func(a, b int) int { return m.rank(b) - m.rank(a) })
		for _, p := range active[:len(active)-share] {
			owned[p].halt()
			m.log.Info("releasing partition above fair share", zap.Int("partition", p), zap.Int("share", share), zap.Int("live", live))
		}
	}
	for i := 0; i < m.cfg.Partitions && len(active) < share; i++ {
		p := (m.offset + i) % m.cfg.Partitions
		if _, ok := owned[p]; ok {
			continue
		}
		got, err := redislease.Acquire(tctx, m.rdb, rediskey.DeliverLease(p), m.cfg.ID, m.cfg.TTL)
		if err != nil {
			m.m.RedisErrors.Inc()
			m.log.Warn("acquire lease", zap.Int("partition", p), zap.Error(err))
			break
		}
		if !got {
			continue
		}
		pt := &part{stop: make(chan struct{}), lastRenew: now}
		owned[p] = pt
		active = append(active, p)
		m.log.Info("partition acquired", zap.Int("partition", p), zap.Int("share", share), zap.Int("live", live))
		go func() {
			defer func() { exited <- p }()
			run(pt.stop, p)
		}()
	}
	m.publish(owned)
}

// interval is the time between ticks: renewals, heartbeats, takeovers.
func (m *Manager) interval() time.Duration {
	if iv := m.cfg.TTL / 3; iv > 0 {
		return iv
	}
	return time.Second
}

func (m *Manager) rank(p int) int {
	return (p - m.offset + m.cfg.Partitions) % m.cfg.Partitions
}

// heartbeat records this instance as alive, drops members not seen within
// the TTL, and returns how many are live (at least 1: this one).
func (m *Manager) heartbeat(ctx context.Context, now time.Time) (int, error) {
	key := rediskey.DeliverMembers()
	nowMs := now.UnixMilli()
	var card *redis.IntCmd
	_, err := m.rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		tx.ZAdd(ctx, key, redis.Z{Score: float64(nowMs), Member: m.cfg.ID})
		tx.ZRemRangeByScore(ctx, key, "-inf", "("+strconv.FormatInt(nowMs-m.cfg.TTL.Milliseconds(), 10))
		card = tx.ZCard(ctx, key)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return max(int(card.Val()), 1), nil
}
