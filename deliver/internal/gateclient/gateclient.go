// Package gateclient resolves gate ids to their Push addresses (from the gate
// registry in Redis) and keeps one gRPC client per address, authenticated
// with the cluster secret.
package gateclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/rpclimit"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
)

// ErrGateGone reports a gate whose registry key has expired: the gate is
// dead, and routes naming it are stale.
var ErrGateGone = errors.New("gateclient: gate is not registered")

type cachedAddr struct {
	addr    string
	expires time.Time
}

// Pool caches gate addresses and Push clients. It is safe for concurrent use.
type Pool struct {
	rdb     redis.Cmdable
	secret  string
	addrTTL time.Duration
	now     func() time.Time

	mu    sync.Mutex
	addrs map[string]cachedAddr
	conns map[string]*grpc.ClientConn
}

// New returns a Pool that looks gates up in rdb and authenticates its calls
// with secret, trusting a resolved address for addrTTL
// (deliver.gate_addr_ttl): short, so a restarted gate on a new address is
// found quickly, and long enough that a busy partition does not look the
// gate up once per job.
func New(rdb redis.Cmdable, secret string, addrTTL time.Duration) (*Pool, error) {
	if addrTTL <= 0 {
		return nil, fmt.Errorf("gateclient: deliver.gate_addr_ttl %v must be positive", addrTTL)
	}
	return &Pool{
		rdb: rdb, secret: secret, addrTTL: addrTTL, now: time.Now,
		addrs: make(map[string]cachedAddr), conns: make(map[string]*grpc.ClientConn),
	}, nil
}

// Addr returns the push address of gateID, ErrGateGone when the gate is not
// registered, or a Redis error (retryable).
func (p *Pool) Addr(ctx context.Context, gateID string) (string, error) {
	now := p.now()
	p.mu.Lock()
	c, ok := p.addrs[gateID]
	p.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.addr, nil
	}
	addr, err := p.rdb.HGet(ctx, rediskey.Gate(gateID), "push_addr").Result()
	if errors.Is(err, redis.Nil) || (err == nil && addr == "") {
		p.mu.Lock()
		delete(p.addrs, gateID)
		p.mu.Unlock()
		return "", fmt.Errorf("%w: %s", ErrGateGone, gateID)
	}
	if err != nil {
		return "", fmt.Errorf("gateclient: look up gate %s: %w", gateID, err)
	}
	p.mu.Lock()
	p.addrs[gateID] = cachedAddr{addr: addr, expires: now.Add(p.addrTTL)}
	p.mu.Unlock()
	return addr, nil
}

// Client returns the Push client for addr, dialing lazily on first use.
func (p *Pool) Client(addr string) (gatev1.PushClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cc, ok := p.conns[addr]; ok {
		return gatev1.NewPushClient(cc), nil
	}
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		clusterauth.Credentials(p.secret),
		rpclimit.DialOption(),
	)
	if err != nil {
		return nil, fmt.Errorf("gateclient: dial %s: %w", addr, err)
	}
	p.conns[addr] = cc
	return gatev1.NewPushClient(cc), nil
}

// Forget drops the cached address of gateID, so the next lookup asks Redis
// again (used after a Push to it failed: the gate may have moved).
func (p *Pool) Forget(gateID string) {
	p.mu.Lock()
	delete(p.addrs, gateID)
	p.mu.Unlock()
}

// Close closes every client connection.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for addr, cc := range p.conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("gateclient: close %s: %w", addr, err))
		}
		delete(p.conns, addr)
	}
	return errors.Join(errs...)
}
