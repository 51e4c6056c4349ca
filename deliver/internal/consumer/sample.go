package consumer

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/rediskey"
)

// SampleQueues sets the queue gauges of partitions 0..partitions-1 now and
// then every interval until ctx ends. Every deliver instance samples every
// partition, not only those it owns: a partition nobody owns (all its
// candidates down) is exactly the one whose backlog must stay visible, and
// the cost is three pipelined commands per partition per interval. A
// dashboard takes max by (partition) across instances.
func SampleQueues(ctx context.Context, rdb redis.Cmdable, partitions int, interval time.Duration, m *metrics.Metrics, log *zap.Logger) {
	m.InitPartitions(partitions)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := SampleOnce(ctx, rdb, partitions, m, time.Now()); err != nil && ctx.Err() == nil {
			m.RedisErrors.Inc()
			log.Debug("sample deliver queues", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// SampleOnce reads every partition's stream length, pending count and
// oldest entry in one pipeline and sets the gauges. Acknowledged jobs are
// deleted from their stream (see ack), so the stream's length is its
// backlog and its first entry the oldest unfinished job; its ID's
// millisecond part is when Redis took it.
func SampleOnce(ctx context.Context, rdb redis.Cmdable, partitions int, m *metrics.Metrics, now time.Time) error {
	pipe := rdb.Pipeline()
	lens := make([]*redis.IntCmd, partitions)
	firsts := make([]*redis.XMessageSliceCmd, partitions)
	pends := make([]*redis.XPendingCmd, partitions)
	for p := 0; p < partitions; p++ {
		stream := rediskey.Deliver(p)
		lens[p] = pipe.XLen(ctx, stream)
		firsts[p] = pipe.XRangeN(ctx, stream, "-", "+", 1)
		pends[p] = pipe.XPending(ctx, stream, rediskey.DeliverGroup)
	}
	// Exec's error is the first failed command's; the others are still
	// read below, so one missing group does not blank every partition.
	_, execErr := pipe.Exec(ctx)
	for p := 0; p < partitions; p++ {
		l := strconv.Itoa(p)
		if n, err := lens[p].Result(); err == nil {
			m.QueueLength.WithLabelValues(l).Set(float64(n))
		}
		if msgs, err := firsts[p].Result(); err == nil {
			age := 0.0
			if len(msgs) > 0 {
				age = entryAge(msgs[0].ID, now)
			}
			m.QueueOldestAge.WithLabelValues(l).Set(age)
		}
		if pend, err := pends[p].Result(); err == nil {
			m.QueuePending.WithLabelValues(l).Set(float64(pend.Count))
		}
	}
	if execErr == redis.Nil {
		return nil
	}
	return execErr
}

// entryAge is now minus the time in a stream entry ID ("ms-seq"), never
// negative (the Redis host's clock may run ahead of ours).
func entryAge(id string, now time.Time) float64 {
	ms, _, _ := strings.Cut(id, "-")
	t, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return 0
	}
	return max(now.Sub(time.UnixMilli(t)).Seconds(), 0)
}
