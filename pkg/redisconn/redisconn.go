// Package redisconn opens the Redis client every process uses, from its
// config section: a cluster client for a Redis Cluster, a plain client for
// one server, both behind redis.UniversalClient so callers never care.
package redisconn

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/config"
)

// Options are what a process tunes beyond its config section.
type Options struct {
	// MinIdleConns is kept open per server (per master on a cluster).
	MinIdleConns int
}

// Open returns a client for cfg: a ClusterClient when cfg names a cluster
// (more than one address, or cluster: true), else a Client. A cluster
// with a non-zero DB is refused, since cluster nodes have only DB 0.
// Pool sizes are per server, so on a cluster each master gets PoolSize
// connections. Open does not dial; the first command does. Commands end
// at their context's deadline even on a server that accepts and never
// answers (a hung or partitioned Redis), so a caller's budget holds during
// an outage (docs/decisions.md 72); go-redis otherwise waits its own 3 s
// read timeout, and retries.
func Open(cfg config.Redis, o Options) (redis.UniversalClient, error) {
	section := "redis"
	if err := cfg.Validate(section); err != nil {
		return nil, fmt.Errorf("redisconn: %w", err)
	}
	if cfg.ClusterMode() {
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:        cfg.Endpoints(),
			Password:     cfg.Password,
			PoolSize:     cfg.PoolSize,
			MinIdleConns: o.MinIdleConns,

			ContextTimeoutEnabled: true,
		}), nil
	}
	return redis.NewClient(&redis.Options{
		Addr:         cfg.Endpoints()[0],
		Password:     cfg.Password,
		DB:           cfg.DB,
		PoolSize:     cfg.PoolSize,
		MinIdleConns: o.MinIdleConns,

		ContextTimeoutEnabled: true,
	}), nil
}
