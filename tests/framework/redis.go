package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisModeEnv selects the Redis every test cluster gets: "single" (or
// unset) for one redis-server, "cluster" for a private 3-master Redis
// Cluster, so the same e2e suite runs on either (make e2e-cluster).
const RedisModeEnv = "SPARK_E2E_REDIS"

// Redis is the private Redis of one test cluster: one redis-server, or
// the masters of a Redis Cluster. It keeps an append-only file so a stop
// and start keeps its data, as a production Redis with persistence would.
type Redis struct {
	// Addr is the server, or on a cluster its first master.
	Addr string
	// Addrs are a cluster's masters; nil for a single server.
	Addrs []string
	procs []*Process
}

// launchRedis starts the private Redis that RedisModeEnv asks for and
// returns ready, which waits until it serves: a cluster's nodes are
// joined then (launchRedisCluster), so other set-up can run meanwhile.
func launchRedis(t testing.TB) (r *Redis, ready func()) {
	t.Helper()
	switch mode := os.Getenv(RedisModeEnv); mode {
	case "", "single":
		return StartSingleRedis(t), func() {}
	case "cluster":
		return launchRedisCluster(t)
	default:
		t.Fatalf("%s=%q: want single or cluster", RedisModeEnv, mode)
		return nil, nil
	}
}

// StartSingleRedis starts one private redis-server on a free loopback port.
func StartSingleRedis(t testing.TB) *Redis {
	t.Helper()
	bin := redisServer(t)
	port := FreePort(t)
	r := &Redis{Addr: "127.0.0.1:" + strconv.Itoa(port)}
	r.procs = []*Process{NewProcess(t, "redis", bin, append([]string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", t.TempDir(), "--save", "",
	}, persistence...), nil)}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Kill() })
	return r
}

// persistence makes every acknowledged write survive a stop and start.
var persistence = []string{"--appendonly", "yes", "--appendfsync", "always", "--loglevel", "warning"}

func redisServer(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (make test installs it): %v", err)
	}
	return bin
}

// Cluster reports whether r is a Redis Cluster.
func (r *Redis) Cluster() bool { return len(r.Addrs) > 0 }

// Start (re)starts every server and waits until each answers PING and,
// on a cluster, until every node reports cluster_state:ok again.
func (r *Redis) Start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, p := range r.procs {
		if _, err := p.Launch(); err != nil {
			return err
		}
	}
	for i, p := range r.procs {
		if err := waitRedisPing(ctx, r.nodeAddr(i)); err != nil {
			return fmt.Errorf("%w:\n%s", err, p.Tail(20))
		}
	}
	if r.Cluster() {
		return waitClusterOK(ctx, r.Addrs)
	}
	return nil
}

func (r *Redis) nodeAddr(i int) string {
	if r.Cluster() {
		return r.Addrs[i]
	}
	return r.Addr
}

func waitRedisPing(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	var err error
	for ctx.Err() == nil {
		if err = c.Ping(ctx).Err(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("redis on %s did not start: %v", addr, err)
}

// Stop shuts every server down (the data stays on disk).
func (r *Redis) Stop() error {
	var errs []error
	for _, p := range r.procs {
		errs = append(errs, p.Stop())
	}
	return errors.Join(errs...)
}

// Kill kills every server (SIGKILL); what was fsynced stays on disk.
func (r *Redis) Kill() error {
	var errs []error
	for _, p := range r.procs {
		errs = append(errs, p.Kill())
	}
	return errors.Join(errs...)
}

// Client returns a client of this Redis (a cluster client on a cluster);
// the test closes it.
func (r *Redis) Client() redis.UniversalClient {
	if r.Cluster() {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: r.Addrs})
	}
	return redis.NewClient(&redis.Options{Addr: r.Addr})
}

// FlushAll empties the whole Redis, every master of a cluster: a plain
// FLUSHALL through a cluster client reaches one node only.
func (r *Redis) FlushAll(ctx context.Context) error {
	c := r.Client()
	defer c.Close()
	if cc, ok := c.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.FlushAll(ctx).Err()
		})
		if err != nil {
			return fmt.Errorf("flush redis cluster: %w", err)
		}
		return nil
	}
	if err := c.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("flush redis %s: %w", r.Addr, err)
	}
	return nil
}

// ConfigYAML is the flow mapping of a logic.redis / deliver.redis section
// that points at this Redis.
func (r *Redis) ConfigYAML() string {
	if r.Cluster() {
		return `{addrs: ["` + strings.Join(r.Addrs, `", "`) + `"]}`
	}
	return `{addr: "` + r.Addr + `"}`
}
