// Package consumer reads one partition's deliver stream through the
// consumer group: it first takes over the group's pending entries (a crashed
// owner's unacknowledged jobs), then reads new ones, processes them strictly
// in stream order and acknowledges each after its pushes.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/deliver/internal/backoff"
	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/failpoint"
	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/rediskey"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// DoneTTL is how long a delivered msg_id is remembered, so a job enqueued
// again by a client retry within it is not pushed twice.
const DoneTTL = 24 * time.Hour

// Processor handles one decoded job. An error means the job could not be
// processed now (Redis down) and is retried; it must not have pushed.
type Processor interface {
	Process(ctx context.Context, partition int, job *queuev1.DeliverJob) error
}

// Config configures a Consumer.
type Config struct {
	// Name is the consumer name in the group (the deliver id).
	Name string
	// BatchSize is the COUNT of one read or claim.
	BatchSize int
	// Block is how long one XREADGROUP waits for new entries.
	Block time.Duration
}

// Consumer runs partitions. One Consumer serves every partition of a
// process; each partition runs in its own goroutine via Run.
type Consumer struct {
	rdb  redis.Cmdable
	cfg  Config
	proc Processor
	log  *zap.Logger
	m    *metrics.Metrics
}

// New returns a Consumer.
func New(rdb redis.Cmdable, cfg Config, proc Processor, log *zap.Logger, m *metrics.Metrics) *Consumer {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 64
	}
	if cfg.Block <= 0 {
		cfg.Block = time.Second
	}
	return &Consumer{rdb: rdb, cfg: cfg, proc: proc, log: log, m: m}
}

// EnsureGroup creates the consumer group of partition p (and its stream),
// reading from the start so jobs enqueued before any deliver ran are kept.
func EnsureGroup(ctx context.Context, rdb redis.Cmdable, p int) error {
	err := rdb.XGroupCreateMkStream(ctx, rediskey.Deliver(p), rediskey.DeliverGroup, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("consumer: create group on %s: %w", rediskey.Deliver(p), err)
	}
	return nil
}

func isNoGroup(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOGROUP") }

// Run processes partition p until stop is closed, then returns after the job
// in hand. ctx bounds the work itself: when it ends, the job in hand is
// abandoned and stays pending in the group for the next owner.
func (c *Consumer) Run(ctx context.Context, stop <-chan struct{}, p int) {
	readCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-readCtx.Done():
		}
	}()
	log := c.log.With(zap.Int("partition", p))
	bo := backoff.New(50*time.Millisecond, 2*time.Second)
	for readCtx.Err() == nil {
		// After any read error we claim our pending entries again: Redis may
		// have delivered entries to us on a reply we never received.
		if !c.claimPending(ctx, readCtx, p, log, bo) {
			return
		}
		if !c.readNew(ctx, readCtx, p, log, bo) {
			return
		}
	}
}

// claimPending takes over and processes every pending entry of the group on
// p's stream, in stream order. It reports false when the partition must stop.
func (c *Consumer) claimPending(ctx, readCtx context.Context, p int, log *zap.Logger, bo *backoff.Backoff) bool {
	stream := rediskey.Deliver(p)
	start := "0-0"
	for {
		if readCtx.Err() != nil {
			return false
		}
		// Min idle 0: the lease makes us the only owner, so whatever is
		// pending belongs to a previous owner that is gone or let go.
		msgs, next, err := c.rdb.XAutoClaim(readCtx, &redis.XAutoClaimArgs{
			Stream: stream, Group: rediskey.DeliverGroup, Consumer: c.cfg.Name,
			MinIdle: 0, Start: start, Count: int64(c.cfg.BatchSize),
		}).Result()
		if err != nil {
			if readCtx.Err() != nil {
				return false
			}
			c.readFailed(readCtx, p, log, err)
			if !bo.Sleep(readCtx) {
				return false
			}
			continue
		}
		bo.Reset()
		if len(msgs) > 0 {
			log.Info("claimed pending jobs", zap.Int("count", len(msgs)))
		}
		if !c.handleEntries(ctx, readCtx, p, msgs, log) {
			return false
		}
		if next == "0-0" || next == "" {
			return true
		}
		start = next
	}
}

// readNew reads and processes new entries until a read fails (true: claim
// again) or the partition must stop (false).
func (c *Consumer) readNew(ctx, readCtx context.Context, p int, log *zap.Logger, bo *backoff.Backoff) bool {
	stream := rediskey.Deliver(p)
	for {
		if readCtx.Err() != nil {
			return false
		}
		res, err := c.rdb.XReadGroup(readCtx, &redis.XReadGroupArgs{
			Group: rediskey.DeliverGroup, Consumer: c.cfg.Name,
			Streams: []string{stream, ">"}, Count: int64(c.cfg.BatchSize), Block: c.cfg.Block,
		}).Result()
		if errors.Is(err, redis.Nil) {
			continue // BLOCK timed out with nothing new
		}
		if err != nil {
			if readCtx.Err() != nil {
				return false
			}
			c.readFailed(readCtx, p, log, err)
			return bo.Sleep(readCtx)
		}
		bo.Reset()
		for _, s := range res {
			if !c.handleEntries(ctx, readCtx, p, s.Messages, log) {
				return false
			}
		}
	}
}

func (c *Consumer) readFailed(ctx context.Context, p int, log *zap.Logger, err error) {
	c.m.RedisErrors.Inc()
	if isNoGroup(err) {
		// The stream or group vanished (Redis flushed or restarted empty).
		if gerr := EnsureGroup(ctx, c.rdb, p); gerr != nil {
			log.Warn("recreate consumer group", zap.Error(gerr))
		} else {
			log.Warn("consumer group recreated")
		}
		return
	}
	log.Warn("read partition", zap.Error(err))
}

func (c *Consumer) handleEntries(ctx, readCtx context.Context, p int, msgs []redis.XMessage, log *zap.Logger) bool {
	for _, msg := range msgs {
		if !c.handle(ctx, readCtx, p, msg, log) {
			return false
		}
	}
	return true
}

// handle processes one entry and acknowledges it. It reports false when it
// gave up because the partition must stop; the entry then stays pending.
func (c *Consumer) handle(ctx, readCtx context.Context, p int, msg redis.XMessage, log *zap.Logger) bool {
	job, err := queue.Decode(msg)
	if err != nil {
		// A job nobody can decode must never block the partition.
		c.m.Jobs.WithLabelValues(metrics.ResultMalformed).Inc()
		log.Error("malformed job dropped", zap.String("entry_id", msg.ID), zap.Error(err))
		return c.ack(ctx, p, msg.ID, nil, log)
	}
	bo := backoff.New(50*time.Millisecond, 2*time.Second)
	for {
		err := c.proc.Process(ctx, p, job)
		if err == nil {
			break
		}
		c.m.RedisErrors.Inc()
		log.Warn("process job, will retry", zap.String("entry_id", msg.ID), zap.Int64("msg_id", job.GetMsgId()), zap.Error(err))
		if !bo.Sleep(readCtx) {
			return false
		}
	}
	for {
		// An armed "error" holds the job unacknowledged, as if Redis refused.
		err := failpoint.Inject("deliver/job/beforeAck")
		if err == nil {
			break
		}
		log.Warn("failpoint before ack", zap.Error(err))
		if !bo.Sleep(readCtx) {
			return false
		}
	}
	return c.ack(ctx, p, msg.ID, job, log)
}

// MarksDone reports whether a finished job leaves a done marker under its
// msg_id: only MESSAGE jobs do. A SIGNAL's msg_id names the message it is
// about, so a marker would make that message's own job (or the next signal
// about it, e.g. a recall after a read) look delivered already.
func MarksDone(job *queuev1.DeliverJob) bool {
	if job == nil {
		return false
	}
	k := job.GetKind()
	return k == queuev1.JobKind_JOB_KIND_MESSAGE || k == queuev1.JobKind_JOB_KIND_UNSPECIFIED
}

// ack marks the job done (a decoded MESSAGE job), acknowledges and deletes its entry,
// in one transaction: the done key shares the stream's hash tag. The pushes
// already went out, so it keeps retrying until ctx ends rather than leaving
// the job for a second push by the next owner.
func (c *Consumer) ack(ctx context.Context, p int, id string, job *queuev1.DeliverJob, log *zap.Logger) bool {
	stream := rediskey.Deliver(p)
	bo := backoff.New(50*time.Millisecond, 2*time.Second)
	for {
		_, err := c.rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
			if MarksDone(job) {
				tx.Set(ctx, rediskey.DeliverDone(p, job.GetMsgId()), 1, DoneTTL)
			}
			tx.XAck(ctx, stream, rediskey.DeliverGroup, id)
			tx.XDel(ctx, stream, id)
			return nil
		})
		if err == nil {
			return true
		}
		c.m.RedisErrors.Inc()
		log.Warn("ack job, will retry", zap.String("entry_id", id), zap.Error(err))
		if !bo.Sleep(ctx) {
			return false
		}
	}
}
