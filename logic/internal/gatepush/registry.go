// Package gatepush is logic's side of the gates: the gate registry in Redis
// (im:gate:{gate_id}, written on Hello and refreshed while a stream from the
// gate is open) and cached gRPC clients of the gates' Push services.
package gatepush

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// Registry keeps im:gate:{id} alive for the gates with open streams, and
// notices when Redis lost it (docs/internals.md "Route table after a Redis
// flush"): the refresh finds the key gone and asks the gate, on one of its
// streams, to re-report its connections.
type Registry struct {
	rdb redis.UniversalClient
	log *zap.Logger
	// Refresh is the refresh interval (default GateRefresh); set it before
	// the first Attach.
	Refresh time.Duration

	mu     sync.Mutex
	gates  map[string]*gate
	nextID uint64
}

type gate struct {
	addr      string
	clients   string // client addresses, comma-separated
	startedAt int64
	refs      int
	stop      chan struct{}
	// resync holds the Resync senders of the gate's attached streams.
	resync map[uint64]func()
}

// NewRegistry returns a Registry.
func NewRegistry(rdb redis.UniversalClient, log *zap.Logger) *Registry {
	if log == nil {
		log = zap.NewNop()
	}
	return &Registry{rdb: rdb, log: log, Refresh: GateRefresh, gates: map[string]*gate{}}
}

// Attach records a stream from gateID (its Hello: push address and the
// addresses clients connect to) and returns the function that detaches it. The entry is written at once and refreshed every
// Refresh while at least one stream from the gate is attached. resync (may
// be nil) sends Resync on this stream; it must not block for long.
func (r *Registry) Attach(ctx context.Context, gateID, pushAddr string, clientAddrs []string, resync func()) (detach func()) {
	clients := strings.Join(clientAddrs, ",")
	r.mu.Lock()
	g, ok := r.gates[gateID]
	if !ok {
		g = &gate{addr: pushAddr, startedAt: time.Now().UnixMilli(), stop: make(chan struct{}), resync: map[uint64]func(){}}
		r.gates[gateID] = g
		go r.refresh(gateID, g)
	}
	g.refs++
	g.addr = pushAddr
	g.clients = clients
	r.nextID++
	sid := r.nextID
	if resync != nil {
		g.resync[sid] = resync
	}
	r.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err := r.renew(wctx, gateID, pushAddr, clients, g.startedAt)
	cancel()
	if err != nil {
		r.log.Warn("gate registry write failed", zap.String("gate_id", gateID), zap.Error(err))
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			delete(g.resync, sid)
			g.refs--
			if g.refs == 0 {
				close(g.stop)
				delete(r.gates, gateID)
			}
		})
	}
}

func (r *Registry) refresh(gateID string, g *gate) {
	every := r.Refresh
	if every <= 0 {
		every = GateRefresh
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		addr, clients := g.addr, g.clients
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		existed, err := r.renew(ctx, gateID, addr, clients, g.startedAt)
		cancel()
		if err != nil {
			r.log.Warn("gate registry refresh failed", zap.String("gate_id", gateID), zap.Error(err))
			continue
		}
		if !existed {
			r.resyncGate(gateID, g)
		}
	}
}

// resyncGate asks one stream of the gate to re-report its connections:
// Redis lost the gate's key, so it may have lost the route table too.
func (r *Registry) resyncGate(gateID string, g *gate) {
	r.mu.Lock()
	var send func()
	for _, f := range g.resync {
		send = f
		break
	}
	r.mu.Unlock()
	if send == nil {
		return
	}
	r.log.Warn("gate registry entry was gone (Redis lost data?); asking the gate to rebind its connections", zap.String("gate_id", gateID))
	send()
}

// renew refreshes the entry and reports whether it still existed (EXPIRE
// answered 1) before this refresh rewrote it.
func (r *Registry) renew(ctx context.Context, gateID, addr, clients string, startedAt int64) (bool, error) {
	key := rediskey.Gate(gateID)
	var probe *redis.BoolCmd
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		probe = p.Expire(ctx, key, GateTTL)
		p.HSet(ctx, key, "push_addr", addr, "started_at", strconv.FormatInt(startedAt, 10), "client_addrs", clients)
		p.Expire(ctx, key, GateTTL)
		return nil
	})
	if err != nil {
		return false, err
	}
	// The index of gate ids is another key (another Cluster slot), so it is
	// written outside the transaction; List checks each id's key anyway.
	if err := r.rdb.ZAdd(ctx, rediskey.Gates(), redis.Z{Score: float64(time.Now().UnixMilli()), Member: gateID}).Err(); err != nil {
		return false, err
	}
	return probe.Val(), nil
}

// Gate is a live gate as the registry knows it.
type Gate struct {
	ID          string
	PushAddr    string
	ClientAddrs []string
	StartedAtMs int64
}

// List returns the live gates (those whose im:gate:{id} key exists), by
// id, as any logic instance registered them. Ids not refreshed within
// GateTTL are dropped from the index on the way.
func (r *Registry) List(ctx context.Context) ([]Gate, error) {
	stale := strconv.FormatInt(time.Now().Add(-GateTTL).UnixMilli(), 10)
	if err := r.rdb.ZRemRangeByScore(ctx, rediskey.Gates(), "-inf", "("+stale).Err(); err != nil {
		return nil, fmt.Errorf("gatepush: trim gate index: %w", err)
	}
	ids, err := r.rdb.ZRange(ctx, rediskey.Gates(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("gatepush: read gate index: %w", err)
	}
	slices.Sort(ids)
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	if _, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, rediskey.Gate(id))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("gatepush: read gates: %w", err)
	}
	out := make([]Gate, 0, len(ids))
	for i, id := range ids {
		h := cmds[i].Val()
		if h["push_addr"] == "" {
			continue // expired: the gate is gone
		}
		g := Gate{ID: id, PushAddr: h["push_addr"]}
		g.StartedAtMs, _ = strconv.ParseInt(h["started_at"], 10, 64)
		if c := h["client_addrs"]; c != "" {
			g.ClientAddrs = strings.Split(c, ",")
		}
		out = append(out, g)
	}
	return out, nil
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
