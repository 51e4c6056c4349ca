package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// readiness is what /readyz and the gRPC health service report.
type readiness struct {
	mu     sync.Mutex
	reason error // nil when ready
	health *health.Server
}

func newReadiness(reason string) *readiness {
	return &readiness{reason: errors.New(reason), health: health.NewServer()}
}

func (r *readiness) check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reason
}

func (r *readiness) set(reason error) {
	r.mu.Lock()
	r.reason = reason
	r.mu.Unlock()
	st := healthpb.HealthCheckResponse_SERVING
	if reason != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	for _, svc := range []string{"", "logic.v1.Gateway", "logic.v1.Api", "logic.v1.Internal"} {
		r.health.SetServingStatus(svc, st)
	}
}

// watch re-checks the dependencies every interval until ctx ends.
func (r *readiness) watch(ctx context.Context, interval time.Duration, probe func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		r.set(err)
	}
}
