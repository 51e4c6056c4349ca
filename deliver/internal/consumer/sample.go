package consumer

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/queue"
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
// oldest entry in one pipeline (queue.Sample) and sets the gauges.
func SampleOnce(ctx context.Context, rdb redis.Cmdable, partitions int, m *metrics.Metrics, now time.Time) error {
	streams := make([]string, partitions)
	for p := range streams {
		streams[p] = rediskey.Deliver(p)
	}
	states, err := queue.Sample(ctx, rdb, streams, rediskey.DeliverGroup, now)
	for p, st := range states {
		l := strconv.Itoa(p)
		if st.LengthOK {
			m.QueueLength.WithLabelValues(l).Set(float64(st.Length))
		}
		if st.AgeOK {
			m.QueueOldestAge.WithLabelValues(l).Set(st.OldestAgeSeconds)
		}
		if st.PendingOK {
			m.QueuePending.WithLabelValues(l).Set(float64(st.Pending))
		}
	}
	return err
}
