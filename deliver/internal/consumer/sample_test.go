package consumer

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/deliver/internal/gatetest"
	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/rediskey"
)

// The queue gauges report a partition's backlog (entries still in its
// stream), the part a consumer holds unacknowledged, and the age of the
// oldest entry from its ID; an empty partition reads 0 for all three.
func TestSampleOnceReportsBacklogPendingAndOldestAge(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	const partitions, busy, empty = 4, 2, 3
	for p := 0; p < partitions; p++ {
		if err := EnsureGroup(ctx, rdb, p); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	oldest := now.Add(-10 * time.Second).UnixMilli()
	for i := int64(0); i < 3; i++ {
		// Explicit IDs date the entries 10, 9 and 8 seconds back.
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: rediskey.Deliver(busy),
			ID: fmt.Sprintf("%d-0", oldest+i*1000), Values: []any{queue.Field, "x"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: rediskey.DeliverGroup, Consumer: "t",
		Streams: []string{rediskey.Deliver(busy), ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(prometheus.NewRegistry())
	if err := SampleOnce(ctx, rdb, partitions, m, now); err != nil {
		t.Fatal(err)
	}
	b, e := fmt.Sprint(busy), fmt.Sprint(empty)
	if got := testutil.ToFloat64(m.QueueLength.WithLabelValues(b)); got != 3 {
		t.Errorf("queue_length{partition=%s} = %v, want 3", b, got)
	}
	if got := testutil.ToFloat64(m.QueuePending.WithLabelValues(b)); got != 1 {
		t.Errorf("queue_pending{partition=%s} = %v, want 1", b, got)
	}
	if got := testutil.ToFloat64(m.QueueOldestAge.WithLabelValues(b)); math.Abs(got-10) > 0.01 {
		t.Errorf("queue_oldest_age_seconds{partition=%s} = %v, want 10", b, got)
	}
	for name, g := range map[string]float64{
		"queue_length":             testutil.ToFloat64(m.QueueLength.WithLabelValues(e)),
		"queue_pending":            testutil.ToFloat64(m.QueuePending.WithLabelValues(e)),
		"queue_oldest_age_seconds": testutil.ToFloat64(m.QueueOldestAge.WithLabelValues(e)),
	} {
		if g != 0 {
			t.Errorf("%s{partition=%s} = %v on an empty partition, want 0", name, e, g)
		}
	}
}
