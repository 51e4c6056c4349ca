package lease_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/lease"
	"github.com/sparkim/spark/pkg/testredis"
)

// The three calls on a 3-master Redis Cluster, with keys on every master:
// each is one single-key script, so a key's slot alone picks the node.
// A lease then expires after the TTL it was given.
func TestLeaseOnEveryClusterMaster(t *testing.T) {
	rdb := testredis.OpenCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := make([]string, 9)
	for i := range keys {
		keys[i] = "im:test:lease:" + strconv.Itoa(i)
	}
	if n, err := testredis.Masters(ctx, rdb, keys...); err != nil || n != testredis.ClusterMasters {
		t.Fatalf("the keys are on %d masters (%v), want all %d", n, err, testredis.ClusterMasters)
	}
	const ttl = time.Minute
	type step struct {
		name   string
		op     func(key string) (bool, error)
		want   bool
		holder string // the key's value after the step, "" when absent
	}
	acquire := func(holder string) func(string) (bool, error) {
		return func(key string) (bool, error) { return lease.Acquire(ctx, rdb, key, holder, ttl) }
	}
	renew := func(holder string, ttl time.Duration) func(string) (bool, error) {
		return func(key string) (bool, error) { return lease.Renew(ctx, rdb, key, holder, ttl) }
	}
	release := func(holder string) func(string) (bool, error) {
		return func(key string) (bool, error) { return lease.Release(ctx, rdb, key, holder) }
	}
	steps := []step{
		{"renew of a free key", renew("a", ttl), false, ""},
		{"release of a free key", release("a"), false, ""},
		{"acquire a free key", acquire("a"), true, "a"},
		{"acquire again by its holder", acquire("a"), true, "a"},
		{"acquire held by another", acquire("b"), false, "a"},
		{"renew by another", renew("b", ttl), false, "a"},
		{"release by another", release("b"), false, "a"},
		{"renew by the holder", renew("a", 2*ttl), true, "a"},
		{"release by the holder", release("a"), true, ""},
		{"acquire after the release", acquire("b"), true, "b"},
	}
	for _, key := range keys {
		for _, s := range steps {
			got, err := s.op(key)
			if err != nil || got != s.want {
				t.Fatalf("%s: %s = %v, %v; want %v", key, s.name, got, err, s.want)
			}
			v, err := rdb.Get(ctx, key).Result()
			if s.holder == "" && err == nil || s.holder != "" && v != s.holder {
				t.Fatalf("%s after %s holds %q (%v), want %q", key, s.name, v, err, s.holder)
			}
		}
		// The renewal by the holder set the TTL it asked for.
		if d, err := rdb.PTTL(ctx, key).Result(); err != nil || d <= 0 || d > ttl {
			t.Fatalf("%s TTL %v (%v), want within (0, %v]", key, d, err, ttl)
		}
	}

	// A lease taken by its holder expires after the TTL it was given.
	const key = "im:test:lease:expiring"
	if ok, err := lease.Acquire(ctx, rdb, key, "a", 50*time.Millisecond); err != nil || !ok {
		t.Fatalf("acquire = %v, %v", ok, err)
	}
	time.Sleep(200 * time.Millisecond)
	if ok, err := lease.Renew(ctx, rdb, key, "a", time.Minute); err != nil || ok {
		t.Fatalf("renew after the TTL = %v, %v; want false (expired)", ok, err)
	}
	if ok, err := lease.Acquire(ctx, rdb, key, "b", time.Minute); err != nil || !ok {
		t.Fatalf("acquire by another after the TTL = %v, %v; want true", ok, err)
	}
}
