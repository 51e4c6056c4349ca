// Package consumer reads one partition's deliver stream through the
// consumer group: it first takes over the group's pending entries (a crashed
// owner's unacknowledged jobs), then reads new ones, processes each read's
// entries as one batch in stream order and acknowledges them together after
// their pushes.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/failpoint"
	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/retry"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// DoneTTL is how long a delivered msg_id is remembered, so a job enqueued
// again by a client retry within it is not pushed twice.
const DoneTTL = 24 * time.Hour

// redisRetry paces a partition's retries of a failing Redis (reads,
// processing, acks) so it neither spins nor gives up on a job: 50 ms
// doubling to 2 s, jittered so the instances of one outage do not hit
// Redis in lockstep.
var redisRetry = retry.Policy{Initial: 50 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2, Jitter: true}

// Processor handles one decoded job. An error means the job could not be
// processed now (Redis down) and is retried; it must not have pushed.
type Processor interface {
	Process(ctx context.Context, partition int, job *queuev1.DeliverJob) error
}

// BatchProcessor is a Processor that takes a read's jobs at once, in
// stream order, so their round trips are shared. An error means none of
// them may be acknowledged: the whole batch is retried, so processing must
// be idempotent per job.
type BatchProcessor interface {
	Processor
	ProcessBatch(ctx context.Context, partition int, jobs []*queuev1.DeliverJob) error
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

// New returns a Consumer; it refuses a BatchSize (deliver.batch_size) or
// Block that is not positive.
func New(rdb redis.Cmdable, cfg Config, proc Processor, log *zap.Logger, m *metrics.Metrics) (*Consumer, error) {
	if cfg.BatchSize < 1 || cfg.Block <= 0 {
		return nil, fmt.Errorf("consumer: deliver.batch_size %d and the read block %v must be positive", cfg.BatchSize, cfg.Block)
	}
	return &Consumer{rdb: rdb, cfg: cfg, proc: proc, log: log, m: m}, nil
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
	bo := retry.NewBackoff(redisRetry)
	for readCtx.Err() == nil {
		// After any read error we claim our pending entries again: Redis may
		// have delivered entries to us on a reply we never received.
		if !c.claimPending(ctx, readCtx, p, log, bo) {
			return
		}
		if !c.readNew(ctx, readCtx, stop, p, log, bo) {
			return
		}
	}
}

// claimPending takes over and processes every pending entry of the group on
// p's stream, in stream order. It reports false when the partition must stop.
func (c *Consumer) claimPending(ctx, readCtx context.Context, p int, log *zap.Logger, bo *retry.Backoff) bool {
	stream := rediskey.Deliver(p)
	start := "0-0"
	for {
		if readCtx.Err() != nil {
			return false
		}
		// Min idle 0: the lease makes us the only owner, so whatever is
		// pending belongs to a previous owner that is gone or let go.
		began := time.Now()
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
			c.m.Since(metrics.StageRead, began)
			c.m.Reclaimed.Add(float64(len(msgs)))
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
// again) or the partition must stop (false). The next read runs while the
// current batch is processed, so under a backlog a batch never waits for
// its own read; batches are still processed one at a time, in stream
// order.
func (c *Consumer) readNew(ctx, readCtx context.Context, stop <-chan struct{}, p int, log *zap.Logger, bo *retry.Backoff) bool {
	rctx, cancel := context.WithCancel(readCtx)
	// Unbuffered: the reader holds at most one batch read ahead; more
	// would only hold entries pending that another owner could take after
	// a stop.
	reads := make(chan readResult)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.readAhead(rctx, p, reads)
	}()
	// acking is the previous batch's ack, running while this one is
	// processed. Every return waits for it: the lease is released only
	// after the loop returns, and a batch handed to the next owner
	// unacknowledged would be pushed twice.
	var acking *inflightAck
	defer func() {
		cancel()
		<-done
		acking.wait()
	}()
	for {
		waited := time.Now()
		var r readResult
		select {
		case r = <-reads:
		case <-readCtx.Done():
		}
		if stopping(readCtx, stop) {
			// Entries read ahead stay pending for the next owner.
			return false
		}
		if r.err != nil {
			c.readFailed(readCtx, p, log, r.err)
			return bo.Sleep(readCtx)
		}
		bo.Reset()
		c.m.Since(metrics.StageRead, waited)
		for _, s := range r.streams {
			if !c.handleOverlapped(ctx, readCtx, p, s.Messages, &acking, log) {
				return false
			}
		}
		if stopping(readCtx, stop) {
			return false
		}
	}
}

// stopping reports whether the partition must stop. stop is checked
// itself, not only through readCtx, whose cancellation follows it
// asynchronously: a batch read ahead must not start once stop is closed.
func stopping(readCtx context.Context, stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return readCtx.Err() != nil
	}
}

// readResult is one XREADGROUP's entries or its error.
type readResult struct {
	streams []redis.XStream
	err     error
}

// readAhead reads p's new entries into reads until ctx ends or a read
// fails (the error is its last result).
func (c *Consumer) readAhead(ctx context.Context, p int, reads chan<- readResult) {
	stream := rediskey.Deliver(p)
	for ctx.Err() == nil {
		res, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: rediskey.DeliverGroup, Consumer: c.cfg.Name,
			Streams: []string{stream, ">"}, Count: int64(c.cfg.BatchSize), Block: c.cfg.Block,
		}).Result()
		if errors.Is(err, redis.Nil) {
			continue // BLOCK timed out with nothing new
		}
		if err != nil && ctx.Err() != nil {
			return
		}
		select {
		case reads <- readResult{streams: res, err: err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
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

// handleEntries processes one read's entries as a batch and acknowledges
// them together. It reports false when it gave up because the partition
// must stop; the entries then stay pending, and the next owner processes
// them again (idempotently: list updates skip applied ids, pushes may
// repeat and clients de-duplicate by msg_id).
func (c *Consumer) handleEntries(ctx, readCtx context.Context, p int, msgs []redis.XMessage, log *zap.Logger) bool {
	if len(msgs) == 0 {
		return true
	}
	decoded, ok := c.processEntries(ctx, readCtx, p, msgs, nil, log)
	if !ok {
		return false
	}
	start := time.Now()
	defer c.m.Since(metrics.StageAck, start)
	return c.ack(ctx, p, msgs, decoded, log)
}

// handleOverlapped is handleEntries with the ack left running: it
// processes msgs while *acking (the previous batch's ack) finishes, then
// waits for that ack and starts this batch's in *acking. At most one ack
// is in flight, and acks finish in stream order.
func (c *Consumer) handleOverlapped(ctx, readCtx context.Context, p int, msgs []redis.XMessage, acking **inflightAck, log *zap.Logger) bool {
	if len(msgs) == 0 {
		return true
	}
	decoded, ok := c.processEntries(ctx, readCtx, p, msgs, *acking, log)
	if !ok {
		return false
	}
	if !(*acking).wait() {
		return false
	}
	a := &inflightAck{done: make(chan struct{}), msgIDs: make(map[int64]struct{}, len(decoded))}
	for _, job := range decoded {
		if MarksDone(job) {
			a.msgIDs[job.GetMsgId()] = struct{}{}
		}
	}
	*acking = a
	go func() {
		defer close(a.done)
		start := time.Now()
		a.ok = c.ack(ctx, p, msgs, decoded, log)
		c.m.Since(metrics.StageAck, start)
	}()
	return true
}

// inflightAck is a batch's ack running in the background.
type inflightAck struct {
	done chan struct{}
	ok   bool
	// msgIDs are the batch's MESSAGE jobs: done (pushed), though their
	// done markers may not be written yet.
	msgIDs map[int64]struct{}
}

// wait waits for the ack and reports whether it succeeded; a nil ack
// has nothing to wait for.
func (a *inflightAck) wait() bool {
	if a == nil {
		return true
	}
	<-a.done
	return a.ok
}

// processEntries decodes msgs and processes their jobs as one batch, in
// stream order, retrying until it succeeds or the partition must stop
// (false). A MESSAGE job whose msg_id is in prev, the batch whose ack is
// still running, is a duplicate (a client's retry enqueued it again): its
// done marker is not written yet, so the processor could not tell, and it
// is only acknowledged. It returns every entry's job (nil for an entry
// nobody can decode, which must never block the partition and is only
// acknowledged).
func (c *Consumer) processEntries(ctx, readCtx context.Context, p int, msgs []redis.XMessage, prev *inflightAck, log *zap.Logger) ([]*queuev1.DeliverJob, bool) {
	decoded := make([]*queuev1.DeliverJob, len(msgs))
	jobs := make([]*queuev1.DeliverJob, 0, len(msgs))
	for i, msg := range msgs {
		job, err := queue.Decode(msg)
		if err != nil {
			c.m.Jobs.WithLabelValues(metrics.ResultMalformed).Inc()
			log.Error("malformed job dropped", zap.String("entry_id", msg.ID), zap.Error(err))
			continue
		}
		decoded[i] = job
		if prev != nil && MarksDone(job) {
			if _, dup := prev.msgIDs[job.GetMsgId()]; dup {
				c.m.Jobs.WithLabelValues(metrics.ResultDuplicate).Inc()
				continue
			}
		}
		jobs = append(jobs, job)
	}
	bo := retry.NewBackoff(redisRetry)
	for len(jobs) > 0 {
		err := c.process(ctx, p, jobs)
		if err == nil {
			break
		}
		c.m.RedisErrors.Inc()
		log.Warn("process batch, will retry", zap.String("first_entry_id", msgs[0].ID), zap.Int("jobs", len(jobs)), zap.Error(err))
		if !bo.Sleep(readCtx) {
			return nil, false
		}
	}
	for {
		// An armed "error" holds the batch unacknowledged, as if Redis refused.
		err := failpoint.Inject("deliver/job/beforeAck")
		if err == nil {
			break
		}
		log.Warn("failpoint before ack", zap.Error(err))
		if !bo.Sleep(readCtx) {
			return nil, false
		}
	}
	return decoded, true
}

// process hands the batch to the processor, whole when it takes batches.
func (c *Consumer) process(ctx context.Context, p int, jobs []*queuev1.DeliverJob) error {
	if bp, ok := c.proc.(BatchProcessor); ok {
		return bp.ProcessBatch(ctx, p, jobs)
	}
	for _, job := range jobs {
		if err := c.proc.Process(ctx, p, job); err != nil {
			return fmt.Errorf("consumer: job %d: %w", job.GetMsgId(), err)
		}
	}
	return nil
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

// ackChunk bounds the entries of one ack transaction (each a SET, plus
// one XACK and one XDEL for the chunk).
const ackChunk = 500

// ack marks the batch's decoded MESSAGE jobs done, acknowledges and
// deletes its entries, in one transaction per ackChunk entries: the done
// keys share the stream's hash tag. Every job of a chunk is finished, so a
// crash between chunks leaves only finished jobs acknowledged. The pushes
// already went out, so it keeps retrying until ctx ends rather than
// leaving the jobs for a second push by the next owner.
func (c *Consumer) ack(ctx context.Context, p int, msgs []redis.XMessage, jobs []*queuev1.DeliverJob, log *zap.Logger) bool {
	stream := rediskey.Deliver(p)
	bo := retry.NewBackoff(redisRetry)
	for lo := 0; lo < len(msgs); lo += ackChunk {
		hi := min(lo+ackChunk, len(msgs))
		ids := make([]string, 0, hi-lo)
		for _, m := range msgs[lo:hi] {
			ids = append(ids, m.ID)
		}
		for {
			_, err := c.rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
				for _, job := range jobs[lo:hi] {
					if MarksDone(job) {
						tx.Set(ctx, rediskey.DeliverDone(p, job.GetMsgId()), 1, DoneTTL)
					}
				}
				tx.XAck(ctx, stream, rediskey.DeliverGroup, ids...)
				tx.XDel(ctx, stream, ids...)
				return nil
			})
			if err == nil {
				break
			}
			c.m.RedisErrors.Inc()
			log.Warn("ack batch, will retry", zap.String("first_entry_id", ids[0]), zap.Int("entries", len(ids)), zap.Error(err))
			if !bo.Sleep(ctx) {
				return false
			}
		}
	}
	return true
}
