package gatepush

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sparkim/spark/logic/internal/metrics"
	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/rpclimit"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
)

// Clients caches one gRPC client per gate Push address.
type Clients struct {
	secret string

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewClients returns Clients that authenticate with the cluster secret.
func NewClients(secret string) *Clients {
	return &Clients{secret: secret, conns: map[string]*grpc.ClientConn{}}
}

// Get returns the Push client of addr.
func (c *Clients) Get(addr string) (gatev1.PushClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return gatev1.NewPushClient(cc), nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), clusterauth.Credentials(c.secret), rpclimit.DialOption())
	if err != nil {
		return nil, fmt.Errorf("gatepush: dial %s: %w", addr, err)
	}
	c.conns[addr] = cc
	return gatev1.NewPushClient(cc), nil
}

// Close closes every client.
func (c *Clients) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, cc := range c.conns {
		_ = cc.Close()
		delete(c.conns, a)
	}
}

// Kicker kicks connections on their gates.
type Kicker struct {
	reg     *Registry
	clients *Clients
	timeout time.Duration
	log     *zap.Logger
	metrics *metrics.Metrics
}

// NewKicker returns a Kicker whose calls are bounded by timeout.
func NewKicker(reg *Registry, clients *Clients, timeout time.Duration, log *zap.Logger, m *metrics.Metrics) *Kicker {
	if log == nil {
		log = zap.NewNop()
	}
	if m == nil {
		m = metrics.New(nil)
	}
	return &Kicker{reg: reg, clients: clients, timeout: timeout, log: log, metrics: m}
}

// Kick sends KICK{reason} to one connection of gateID and closes it.
func (k *Kicker) Kick(ctx context.Context, gateID string, t *gatev1.Target, reason string) error {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	err := k.kick(ctx, gateID, t, reason)
	if err != nil {
		k.metrics.Kicks.WithLabelValues("error").Inc()
		k.log.Warn("kick failed", zap.String("gate_id", gateID), zap.Uint64("conn_id", t.ConnId),
			zap.Int64("user_id", t.UserId), zap.String("device_id", t.DeviceId), zap.Error(err))
		return err
	}
	k.metrics.Kicks.WithLabelValues("ok").Inc()
	return nil
}

func (k *Kicker) kick(ctx context.Context, gateID string, t *gatev1.Target, reason string) error {
	addr, err := k.reg.PushAddr(ctx, gateID)
	if err != nil {
		return err
	}
	c, err := k.clients.Get(addr)
	if err != nil {
		return err
	}
	_, err = c.Kick(ctx, &gatev1.KickRequest{Targets: []*gatev1.Target{t}, Reason: reason})
	return err
}
