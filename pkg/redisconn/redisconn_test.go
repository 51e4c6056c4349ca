package redisconn

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/testredis"
)

func TestOpenPicksClusterClientForSeveralAddressesOrClusterFlag(t *testing.T) {
	tests := []struct {
		name        string
		cfg         config.Redis
		wantCluster bool
		wantErr     bool
	}{
		{"one address is a single server", config.Redis{Addr: "127.0.0.1:6379", DB: 3}, false, false},
		{"a one-element list is a single server", config.Redis{Addrs: []string{"127.0.0.1:6379"}}, false, false},
		{"several addresses are a cluster", config.Redis{Addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}}, true, false},
		{"cluster flag with one seed is a cluster", config.Redis{Addr: "127.0.0.1:7000", Cluster: true}, true, false},
		{"addrs win over addr", config.Redis{Addr: "127.0.0.1:6379", Addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001"}}, true, false},
		{"cluster with a non-zero db is refused", config.Redis{Addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001"}, DB: 2}, false, true},
		{"cluster flag with a non-zero db is refused", config.Redis{Addr: "127.0.0.1:7000", Cluster: true, DB: 1}, false, true},
		{"no address is refused", config.Redis{}, false, true},
		{"an address without a port is refused", config.Redis{Addrs: []string{"127.0.0.1", "127.0.0.1:7001"}}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Open(tt.cfg, Options{})
			if tt.wantErr {
				if err == nil {
					_ = c.Close()
					t.Fatalf("Open(%+v) accepted", tt.cfg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, isCluster := c.(*redis.ClusterClient)
			if isCluster != tt.wantCluster {
				t.Fatalf("Open(%+v) is a %T, want cluster client %v", tt.cfg, c, tt.wantCluster)
			}
		})
	}
}

// Open's client must reach keys on every master of a real cluster (the
// client follows the slot map) and a single server's configured DB.
func TestOpenReachesKeysOnEveryClusterMasterAndASingleServer(t *testing.T) {
	tests := []struct {
		name string
		cfg  func(t *testing.T) config.Redis
	}{
		{"single server", func(t *testing.T) config.Redis {
			// A DB other than 0, so the configured one is the one used.
			return config.Redis{Addr: testredis.Open(t).Options().Addr, DB: 3}
		}},
		{"three-master cluster", func(t *testing.T) config.Redis {
			return config.Redis{Addrs: testredis.StartCluster(t)}
		}},
		{"cluster from one seed", func(t *testing.T) config.Redis {
			return config.Redis{Addr: testredis.StartCluster(t)[1], Cluster: true}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Open(tt.cfg(t), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// 64 keys without a common hash tag spread over all masters.
			for i := range 64 {
				k := fmt.Sprintf("im:test:redisconn:%d", i)
				if err := c.Set(ctx, k, i, time.Minute).Err(); err != nil {
					t.Fatalf("SET %s: %v", k, err)
				}
				if v, err := c.Get(ctx, k).Int(); err != nil || v != i {
					t.Fatalf("GET %s = %d, %v; want %d", k, v, err, i)
				}
			}
		})
	}
}

// A command to a Redis that never answers ends at its context's deadline,
// not after go-redis's own read timeouts and retries: logic's enqueue
// budget relies on it (docs/decisions.md 72).
func TestOpenedClientEndsCommandsAtTheDeadlineWhenRedisHangs(t *testing.T) {
	const deadline, slack = 300 * time.Millisecond, 700 * time.Millisecond
	tests := []struct {
		name string
		cfg  func(t *testing.T) config.Redis
	}{
		{"single server", func(t *testing.T) config.Redis { return config.Redis{Addr: testredis.HungAddr(t)} }},
		{"cluster", func(t *testing.T) config.Redis {
			return config.Redis{Addrs: []string{testredis.HungAddr(t), testredis.HungAddr(t)}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Open(tt.cfg(t), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i := range 2 { // the first dials, the second reuses the pool
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := time.Now()
				err := c.XAdd(ctx, &redis.XAddArgs{Stream: "im:test:redisconn:hung", Values: []any{"f", "v"}}).Err()
				took := time.Since(start)
				cancel()
				if err == nil {
					t.Fatalf("command %d: a server that never answers answered", i)
				}
				if took > deadline+slack {
					t.Fatalf("command %d returned after %v (%v), want by the %v deadline", i, took, err, deadline)
				}
			}
		})
	}
}
