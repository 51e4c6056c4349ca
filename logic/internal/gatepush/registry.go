// Package gatepush is logic's side of the gates: the gate registry in Redis
// (im:gate:{gate_id}, written on Hello and refreshed while a stream from the
// gate is open) and cached gRPC clients of the gates' Push services.
package gatepush

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/rediskey"
)

// Registry timings (docs/internals.md).
const (
	GateTTL     = 30 * time.Second
	GateRefresh = 10 * time.Second
)

// ErrUnknownGate is returned for a gate with no registry entry.
var ErrUnknownGate = errors.New("gatepush: unknown gate")

// Registry keeps im:gate:{id} alive for the gates with open streams.
type Registry struct {
	rdb redis.UniversalClient
	log *zap.Logger

	mu    sync.Mutex
	gates map[string]*gate
}

type gate struct {
	addr      string
	startedAt int64
	refs      int
	stop      chan struct{}
}

// NewRegistry returns a Registry.
func NewRegistry(rdb redis.UniversalClient, log *zap.Logger) *Registry {
	if log == nil {
		log = zap.NewNop()
	}
	return &Registry{rdb: rdb, log: log, gates: map[string]*gate{}}
}

// Attach records a stream from gateID (its Hello) and returns the function
// that detaches it. The entry is written at once and refreshed every
// GateRefresh while at least one stream from the gate is attached.
func (r *Registry) Attach(ctx context.Context, gateID, pushAddr string) (detach func()) {
	r.mu.Lock()
	g, ok := r.gates[gateID]
	if !ok {
		g = &gate{addr: pushAddr, startedAt: time.Now().UnixMilli(), stop: make(chan struct{})}
		r.gates[gateID] = g
		go r.refresh(gateID, g)
	}
	g.refs++
	g.addr = pushAddr
	r.mu.Unlock()
	if err := r.write(ctx, gateID, pushAddr, g.startedAt); err != nil {
		r.log.Warn("gate registry write failed", zap.String("gate_id", gateID), zap.Error(err))
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			g.refs--
			if g.refs == 0 {
				close(g.stop)
				delete(r.gates, gateID)
			}
		})
	}
}

func (r *Registry) refresh(gateID string, g *gate) {
	t := time.NewTicker(GateRefresh)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		addr := g.addr
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		if err := r.write(ctx, gateID, addr, g.startedAt); err != nil {
			r.log.Warn("gate registry refresh failed", zap.String("gate_id", gateID), zap.Error(err))
		}
		cancel()
	}
}

func (r *Registry) write(ctx context.Context, gateID, addr string, startedAt int64) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	key := rediskey.Gate(gateID)
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, "push_addr", addr, "started_at", strconv.FormatInt(startedAt, 10))
		p.Expire(ctx, key, GateTTL)
		return nil
	})
	return err
}

// PushAddr returns the Push address of a gate: from an attached stream's
// Hello, else from Redis.
func (r *Registry) PushAddr(ctx context.Context, gateID string) (string, error) {
	r.mu.Lock()
	g, ok := r.gates[gateID]
	var addr string
	if ok {
		addr = g.addr
	}
	r.mu.Unlock()
	if addr != "" {
		return addr, nil
	}
	addr, err := r.rdb.HGet(ctx, rediskey.Gate(gateID), "push_addr").Result()
	if errors.Is(err, redis.Nil) || (err == nil && addr == "") {
		return "", ErrUnknownGate
	}
	return addr, err
}
