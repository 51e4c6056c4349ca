package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/deliver/internal/lease"
	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/testredis"
)

// runs records when each partition's worker started and stopped.
type runs struct {
	mu      sync.Mutex
	started map[int]time.Time
	stopped map[int]time.Time
}

func newRuns() *runs { return &runs{started: map[int]time.Time{}, stopped: map[int]time.Time{}} }

func (r *runs) run(stop <-chan struct{}, p int) {
	r.mu.Lock()
	r.started[p] = time.Now()
	r.mu.Unlock()
	<-stop
	r.mu.Lock()
	r.stopped[p] = time.Now()
	r.mu.Unlock()
}

func (r *runs) count() (started, stopped int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.started), len(r.stopped)
}

func startManager(t *testing.T, rdb redis.Cmdable, id string, partitions int, ttl time.Duration) (*runs, context.CancelFunc) {
	t.Helper()
	m := lease.New(rdb, lease.Config{ID: id, Partitions: partitions, TTL: ttl}, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	rs := newRuns()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx, rs.run) }()
	t.Cleanup(func() { cancel(); <-done })
	return rs, cancel
}

// A crashed instance (a members entry and partition leases, never renewed
// again) loses its partitions to a live one after its leases expire —
// never before — and within the stated bound, TTL + 2·TTL/3: its member
// entry goes stale and its leases expire one TTL after its last tick, and
// the survivor's next tick (every TTL/3) takes them, or the one after if
// it came between the two.
func TestManagerTakesOverACrashedInstancesPartitionsAfterItsLeasesExpireWithinTheBound(t *testing.T) {
	rdb := testredis.Open(t)
	ctx := context.Background()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const partitions, ttl = 4, 900 * time.Millisecond
	crashed := time.Now()
	if err := rdb.ZAdd(ctx, rediskey.DeliverMembers(), redis.Z{Score: float64(crashed.UnixMilli()), Member: "crashed"}).Err(); err != nil {
		t.Fatal(err)
	}
	for p := range partitions {
		if err := rdb.Set(ctx, rediskey.DeliverLease(p), "crashed", ttl).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rs, _ := startManager(t, rdb, "survivor", partitions, ttl)
	bound := ttl + 2*ttl/3
	for {
		if started, _ := rs.count(); started == partitions {
			break
		}
		if time.Since(crashed) > 2*bound {
			started, _ := rs.count()
			t.Fatalf("%d of %d partitions taken %v after the crash", started, partitions, time.Since(crashed))
		}
		time.Sleep(10 * time.Millisecond)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var first, last time.Duration
	for p, at := range rs.started {
		d := at.Sub(crashed)
		if d < ttl {
			t.Errorf("partition %d taken %v after the crash, before the crashed owner's lease (%v) expired", p, d, ttl)
		}
		if first == 0 || d < first {
			first = d
		}
		last = max(last, d)
	}
	// 50 ms of slack for the tick's own Redis round trips.
	if last > bound+50*time.Millisecond {
		t.Fatalf("last partition taken %v after the crash, above the bound %v", last, bound)
	}
	t.Logf("partitions taken %v to %v after the crash (TTL %v, bound %v)", first, last, ttl, bound)
}

// An instance whose renewals fail (Redis unreachable from it) stops its
// partitions while their leases are still live, so no other instance can
// own one while its worker runs.
func TestManagerStopsItsPartitionsBeforeTheirLeasesCanExpireWhenRenewalsFail(t *testing.T) {
	rdb := testredis.Open(t)
	ctx := context.Background()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const partitions, ttl = 2, 900 * time.Millisecond
	// A client of its own, closed below: every later call fails.
	opt := *rdb.Options()
	own := redis.NewClient(&opt)
	rs, _ := startManager(t, own, "cut-off", partitions, ttl)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if started, _ := rs.count(); started == partitions {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("partitions never taken")
		}
	}
	time.Sleep(ttl / 2) // mid-way between ticks
	_ = own.Close()
	for deadline := time.Now().Add(2 * ttl); ; time.Sleep(5 * time.Millisecond) {
		if _, stopped := rs.count(); stopped == partitions {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitions still running %v after renewals began failing", 2*ttl)
		}
	}
	for p := range partitions {
		left, err := rdb.PTTL(ctx, rediskey.DeliverLease(p)).Result()
		if err != nil {
			t.Fatal(err)
		}
		// A third of the TTL is left when the second failing tick stops
		// it; well above zero either way.
		if left < ttl/6 {
			t.Errorf("partition %d stopped with its lease's PTTL at %v: another instance could own it already", p, left)
		}
		t.Logf("partition %d stopped with %v of its lease left", p, left)
	}
}
