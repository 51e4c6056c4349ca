package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/testredis"
)

// roundTrips counts the commands and pipelines a client sends.
type roundTrips struct {
	commands, pipelines atomic.Int64
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.commands.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.pipelines.Add(1)
		return next(ctx, cmds)
	}
}

// concurrently calls Allow for n devices at once and returns how many
// were refused.
func concurrently(t *testing.T, l *Limiter, ip string, n int) int {
	t.Helper()
	var refused atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(dev int64) {
			defer wg.Done()
			<-start
			if ok, _ := limited(t, l.Allow(context.Background(), Send, ip, dev, "phone")); ok {
				refused.Add(1)
			}
		}(int64(i))
	}
	close(start)
	wg.Wait()
	return int(refused.Load())
}

// Requests checked at the same moment share pipelines instead of one round
// trip each, and each still gets the answer for its own bucket: with a
// burst of one, every device's first request passes and its second is
// refused, even when Redis has just lost its script cache.
func TestConcurrentChecksSharePipelinesAndKeepTheirOwnAnswers(t *testing.T) {
	const devices = 300
	for _, flush := range []bool{false, true} {
		name := "script cached"
		if flush {
			name = "script cache flushed"
		}
		t.Run(name, func(t *testing.T) {
			rdb := testredis.Open(t)
			if flush {
				if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
			}
			rt := &roundTrips{}
			rdb.AddHook(rt)
			l := mustNew(t, rdb, classConfig(Send, Limits{Device: Bucket{Rate: 0.01, Burst: 1}}), nil, nil)
			ip := freshAddr()
			if got := concurrently(t, l, ip, devices); got != 0 {
				t.Fatalf("first request of %d devices: %d refused, want 0", devices, got)
			}
			if got := concurrently(t, l, ip, devices); got != devices {
				t.Fatalf("second request of %d devices: %d refused, want all", devices, got)
			}
			if n := testutil.ToFloat64(l.m.failOpen[Send]); n != 0 {
				t.Fatalf("%v requests failed open", n)
			}
			// 600 checks; one round trip each would be 600.
			if n := rt.pipelines.Load() + rt.commands.Load(); n >= devices {
				t.Fatalf("%d checks took %d round trips: not coalesced", 2*devices, n)
			}
			t.Logf("%d checks in %d pipelines and %d single commands", 2*devices, rt.pipelines.Load(), rt.commands.Load())
		})
	}
}

// A caller whose context has ended gets no answer and does not stop the
// checks it was batched with.
func TestCancelledCallerDoesNotFailItsBatch(t *testing.T) {
	rdb := testredis.Open(t)
	l := mustNew(t, rdb, classConfig(Send, Limits{Device: Bucket{Rate: 0.01, Burst: 1}}), nil, nil)
	ip := freshAddr()
	var wg sync.WaitGroup
	errs := make([]error, 50)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx := context.Background()
			if i%2 == 0 {
				c, cancel := context.WithCancel(ctx)
				cancel()
				ctx = c
			}
			errs[i] = l.Allow(ctx, Send, ip, int64(i), "phone")
		}(i)
	}
	wg.Wait()
	// The live callers' buckets were each taken once: a second request of
	// each is refused, which it would not be had its check failed open.
	for i := 1; i < len(errs); i += 2 {
		if errs[i] != nil {
			t.Fatalf("device %d first request: %v", i, errs[i])
		}
		if ok, _ := limited(t, l.Allow(context.Background(), Send, ip, int64(i), "phone")); !ok {
			t.Fatalf("device %d second request passed: its first check did not run", i)
		}
	}
	if n := testutil.ToFloat64(l.m.failOpen[Send]); n > float64(len(errs)/2) {
		t.Fatalf("%v requests failed open; only the %d cancelled ones may", n, len(errs)/2)
	}
	if l.paused() {
		t.Fatal("cancelled callers paused the limiter as if Redis had failed")
	}
}
