package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/lease"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/testredis"
)

// On a 3-master Redis Cluster, machine-id leases on every master are
// taken once, renewed by the compare-and-PEXPIRE script past their TTL,
// released by the compare-and-DEL script, and a release never deletes
// another holder's lease.
func TestMachineLeasesOnEveryClusterMaster(t *testing.T) {
	rdb := testredis.OpenCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Long enough that a renewal delayed by a loaded machine (Check
	// fails past TTL - Margin) is not mistaken for a broken script.
	const ttl = 1500 * time.Millisecond
	keys := make([]string, 12)
	for i := range keys {
		keys[i] = rediskey.MachineLease(i + 1)
	}
	if n, err := testredis.Masters(ctx, rdb, keys...); err != nil || n != testredis.ClusterMasters {
		t.Fatalf("the leases are on %d masters (%v), want all %d", n, err, testredis.ClusterMasters)
	}
	held := make([]*lease.Lease, len(keys))
	for i, k := range keys {
		l, err := lease.Acquire(ctx, rdb, k, lease.Options{TTL: ttl})
		if err != nil {
			t.Fatalf("acquire %s: %v", k, err)
		}
		held[i] = l
	}
	time.Sleep(2 * ttl)
	for i, k := range keys {
		if err := held[i].Check(); err != nil {
			t.Fatalf("%s after twice its TTL: %v, want still held (renewed)", k, err)
		}
		if _, err := lease.Acquire(ctx, rdb, k, lease.Options{TTL: ttl, Wait: 100 * time.Millisecond}); !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("second holder of %s: %v, want ErrHeld", k, err)
		}
	}
	for i, k := range keys {
		if i%2 == 0 {
			if err := held[i].Release(ctx); err != nil {
				t.Fatalf("release %s: %v", k, err)
			}
			if n, err := rdb.Exists(ctx, k).Result(); err != nil || n != 0 {
				t.Fatalf("%s still exists after its release (%v)", k, err)
			}
			continue
		}
		// Taken over behind the holder's back: its release leaves the
		// new holder's value alone.
		if err := rdb.Set(ctx, k, "thief", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		_ = held[i].Release(ctx)
		if v, err := rdb.Get(ctx, k).Result(); err != nil || v != "thief" {
			t.Fatalf("release of a lost %s left %q (%v), want the thief's value", k, v, err)
		}
	}
}
