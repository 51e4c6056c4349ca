package service

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sparkim/spark/deliver/internal/fanout"
	"github.com/sparkim/spark/deliver/internal/gatetest"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/testredis"
)

// On a 3-master Redis Cluster, with the partitions' streams spread over
// every master: two deliver instances split the partition leases (acquire,
// renew and release scripts, the members heartbeat's transaction), consume
// every stream (XREADGROUP one stream a call), fan out (route lookups, the
// list scripts pipelined across users on different masters, the stale
// route's compare-and-delete), ack with the done marker in the stream's
// slot, and hand every partition over when one stops.
func TestQueueLeasesAndFanOutWorkOnRedisCluster(t *testing.T) {
	rdb := testredis.OpenCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	streams := make([]string, partitions)
	for p := range partitions {
		streams[p] = rediskey.Deliver(p)
	}
	if n, err := testredis.Masters(ctx, rdb, streams...); err != nil || n != testredis.ClusterMasters {
		t.Fatalf("the %d streams are on %d masters (%v), want all %d", partitions, n, err, testredis.ClusterMasters)
	}
	g1, g2 := startRoutedGates(t, ctx, rdb)
	newFanout := func() *fanout.Fanout {
		pool := gatetest.Pool(t, rdb, secret)
		return mustFanout(t, rdb, pool)
	}
	a := start(t, rdb, "a", newFanout())
	b := start(t, rdb, "b", newFanout())
	eventually(t, 10*time.Second, "8 partitions each", func() bool {
		return len(a.svc.Owned()) == partitions/2 && len(b.svc.Owned()) == partitions/2
	})
	for _, p := range a.svc.Owned() {
		if slices.Contains(b.svc.Owned(), p) {
			t.Fatalf("partition %d owned by both: a=%v b=%v", p, a.svc.Owned(), b.svc.Owned())
		}
	}

	drained := func() bool {
		var n int64
		for _, s := range streams {
			l, err := rdb.XLen(ctx, s).Result()
			if err != nil {
				return false
			}
			n += l
		}
		return n == 0 && pending(t, rdb) == 0
	}
	// One job per partition, so every stream and every master is used.
	for _, conv := range convPerPartition() {
		enqueue(t, rdb, conv, 1000+conv, fmt.Sprintf(`{"msg_id":"%d"}`, 1000+conv))
	}
	if p1, p2 := g1.WaitPushes(partitions, 10*time.Second), g2.WaitPushes(partitions, 10*time.Second); len(p1) != partitions || len(p2) != partitions {
		t.Fatalf("pushes g1=%d g2=%d, want %d each (one per gate per job)", len(p1), len(p2), partitions)
	}
	eventually(t, 10*time.Second, "every stream drained and acked", drained)
	for _, conv := range convPerPartition() {
		p := rediskey.Partition(conv, partitions)
		if n, err := rdb.Exists(ctx, rediskey.DeliverDone(p, 1000+conv)).Result(); err != nil || n != 1 {
			t.Fatalf("done marker of job %d on partition %d: %d, %v", 1000+conv, p, n, err)
		}
	}
	// Both recipients' conversation lists record every conversation.
	for _, uid := range []int64{1, 2} {
		ch, err := dialog.Changes(ctx, rdb, uid, 0, 100)
		if err != nil || len(ch) != partitions {
			t.Fatalf("user %d's list has %d changed conversations (%v), want %d", uid, len(ch), err, partitions)
		}
	}
	if ok, err := rdb.HExists(ctx, rediskey.Route(2), "gone").Result(); err != nil || ok {
		t.Fatalf("the route the gate reported missing is still there (%v)", err)
	}

	a.stop()
	eventually(t, 10*time.Second, "b owns every partition", func() bool { return len(b.svc.Owned()) == partitions })
	for _, conv := range convPerPartition() {
		enqueue(t, rdb, conv, 2000+conv, fmt.Sprintf(`{"msg_id":"%d"}`, 2000+conv))
	}
	if p1 := g1.WaitPushes(2*partitions, 10*time.Second); len(p1) != 2*partitions {
		t.Fatalf("after the hand-over g1 has %d pushes, want %d", len(p1), 2*partitions)
	}
	eventually(t, 10*time.Second, "every stream drained after the hand-over", drained)
	if n, err := rdb.ZCard(ctx, rediskey.DeliverMembers()).Result(); err != nil || n != 1 {
		t.Fatalf("members after a's stop: %d (%v), want b alone", n, err)
	}
}
