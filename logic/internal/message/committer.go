package message

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/logic/internal/conversation"
	"github.com/sparkim/spark/logic/internal/metrics"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/failpoint"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/retry"
	"github.com/sparkim/spark/pkg/tracing"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// maxBatchContent bounds the content bytes of one batch, so a batch of
// large messages stays far below max_allowed_packet (16 MiB by default).
const maxBatchContent = 1 << 20

// batchTimeout bounds one group-commit transaction and its XADDs. The
// batch runs on the committer's context, not a caller's: one caller giving
// up must not roll back the others' sends.
const batchTimeout = 5 * time.Second

var errShuttingDown = errors.New("message: send committer stopped")

// maxCommitAttempts bounds the send transaction's re-runs (deadlocks, a
// reused client msg_id, a concurrent identical send).
const maxCommitAttempts = 5

// commitRetry paces the re-runs of a send transaction that lost a
// deadlock or a lock wait: 5 ms longer before each retry.
var commitRetry = retry.Policy{Initial: 5 * time.Millisecond, Step: 5 * time.Millisecond, Attempts: maxCommitAttempts}

// errReplay makes the commit loop go back to the idempotency lookup.
var errReplay = errors.New("message: concurrent identical send committed")

// pending is one send waiting for a group commit.
type pending struct {
	ctx     context.Context
	nm      store.NewMessage
	msgID   int64 // the client's msg_id (0: none)
	conv    conversation.Conversation
	flags   Flags
	outcome chan outcome // buffered 1: the committer never blocks on a caller that gave up
	queued  time.Time    // when submit queued it (the queue stage's start)
}

// outcome is what the committer tells one send.
type outcome struct {
	// fallback: the batch was rolled back; send commits this one alone
	// (commitOne), which handles every per-row case.
	fallback bool
	err      error
	row      store.Message
	// job is the deliver job; enqueueErr is its first XADD attempt's
	// error (nil: enqueued), made at enqueueStart.
	job          *queuev1.DeliverJob
	enqueueErr   error
	enqueueStart time.Time
	// replay: the send's key was found, row is the stored message (a
	// retry of a committed send).
	replay bool
}

// committer is the group commit of sends (decision 28): K workers
// each take whatever sends are waiting, up to batch, and commit them in
// one transaction. A worker never waits for a batch to fill: at low load a
// send commits alone at once; under load sends pile up while transactions
// are in flight and the next one takes them all, so one fsync serves many
// sends.
type committer struct {
	s       *Service
	queue   chan *pending
	batch   int
	stop    chan struct{}
	stopped chan struct{} // closed once no worker runs and the queue is drained
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
	// onBatch, when set (tests), is told the size of every batch a worker
	// formed, before its lookup and transaction.
	onBatch func(size int)
}

// newCommitter returns a committer whose workers start with start. The
// queue holds a few batches per worker: sends beyond it wait in submit
// (their connection's next request waits for them anyway).
func newCommitter(s *Service, workers, batch int) *committer {
	return &committer{
		s: s, queue: make(chan *pending, workers*batch*4), batch: batch,
		stop: make(chan struct{}), stopped: make(chan struct{}),
	}
}

func (c *committer) start(workers int) {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	for i := 0; i < workers; i++ {
		c.wg.Add(1)
		go c.work(ctx)
	}
}

// close stops the workers after their current batch and answers what is
// still queued with 50301.
func (c *committer) close() {
	c.once.Do(func() {
		close(c.stop)
		c.wg.Wait()
		if c.cancel != nil {
			c.cancel()
		}
		for {
			select {
			case p := <-c.queue:
				p.outcome <- outcome{err: errcode.Unavailable("commit", errShuttingDown)}
			default:
				close(c.stopped)
				return
			}
		}
	})
}

// send commits p and enqueues its deliver job, and only then answers:
// the stored row (replayed: p retried a committed send) or the error.
// The committer owns the whole outcome: a batch the database refused as a
// whole is committed again one send at a time (commitOne), and a job whose
// pipelined XADD failed is retried here, so no answer without an error
// goes out before both the commit and the enqueue.
func (c *committer) send(ctx context.Context, p *pending) (row store.Message, replayed bool, err error) {
	o, err := c.submit(ctx, p)
	switch {
	case err != nil:
		return store.Message{}, false, err
	case o.fallback:
		return c.commitOne(ctx, p)
	case o.err != nil:
		return store.Message{}, false, o.err
	}
	if o.enqueueErr != nil {
		if err := c.s.enqueueFrom(ctx, o.row, o.job, 1, o.enqueueErr, o.enqueueStart); err != nil {
			return store.Message{}, false, err
		}
	}
	return o.row, o.replay, nil
}

// retryOf is the one answer to a send whose (sender, conversation,
// client_msg_id) key already has a row: a retry of that send when type and
// content are the same (nil: answer the stored row, enqueued again,
// decision 9), 40901 when they differ. The batch's lookup and replay's
// both answer through it.
func retryOf(row store.Message, nm store.NewMessage) error {
	if row.MessageType != nm.MessageType || !bytes.Equal(row.Content, nm.Content) {
		return errcode.New(errcode.Conflict, "client_msg_id already used with different content")
	}
	return nil
}

// replay answers a send whose key has a row (found; false when there is
// none): the stored row, enqueued again, or retryOf's 40901. The batch
// looks up all its sends in one statement; replay is the lookup of one,
// for commitOne and for a send its permissions refused (a retry of a
// committed send gets its original answer even if permissions changed
// since).
func (c *committer) replay(ctx context.Context, nm store.NewMessage, conv conversation.Conversation, flags Flags) (row store.Message, found bool, err error) {
	s := c.s
	row, err = s.store.FindByClientMsgID(ctx, nm.SenderID, conv.ID, nm.ClientMsgID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Message{}, false, nil
	}
	if err != nil {
		return store.Message{}, false, errcode.Unavailable("idempotency lookup", err)
	}
	if err := retryOf(row, nm); err != nil {
		return store.Message{}, true, err
	}
	if err := s.enqueue(ctx, row, conv, flags); err != nil {
		return store.Message{}, true, err
	}
	return row, true, nil
}

// commitOne commits one send in its own transaction, then enqueues it. It
// is not a mode: send falls back to it for the sends of a batch the
// database refused, as it handles every per-row case (duplicates, a
// reused client msg_id) one at a time.
func (c *committer) commitOne(ctx context.Context, p *pending) (store.Message, bool, error) {
	row, err := c.insertOne(ctx, p)
	if errors.Is(err, errReplay) {
		row, found, err := c.replay(ctx, p.nm, p.conv, p.flags)
		if err == nil && !found {
			err = errcode.Unavailable("commit", errors.New("duplicate client_msg_id but no row"))
		}
		return row, true, err
	}
	if err != nil {
		return store.Message{}, false, err
	}
	if err := failpoint.Inject("logic/send/afterCommit"); err != nil {
		return store.Message{}, false, errcode.Unavailable("after commit", err)
	}
	if err := c.s.enqueue(ctx, row, p.conv, p.flags); err != nil {
		return store.Message{}, false, err
	}
	return row, false, nil
}

// insertOne runs the one-send transaction, retrying deadlocks and a reused
// client msg_id; errReplay when an identical send committed concurrently.
func (c *committer) insertOne(ctx context.Context, p *pending) (store.Message, error) {
	s := c.s
	clientID := p.msgID
	var err error
	for attempt := 0; attempt < maxCommitAttempts; attempt++ {
		var row store.Message
		row, err = s.store.InsertMessage(ctx, p.nm, func(ctx context.Context, last int64, now time.Time) (int64, error) {
			if s.acceptClientID(clientID, last, now) {
				return clientID, nil
			}
			return s.ids.NextAfter(ctx, last)
		})
		switch {
		case err == nil:
			return row, nil
		case errors.Is(err, store.ErrDuplicateClientMsgID):
			return store.Message{}, errReplay
		case errors.Is(err, store.ErrDuplicateMsgID):
			clientID = 0 // taken: let the generator choose
		case errors.Is(err, msgid.ErrClockBehind):
			return store.Message{}, errcode.Unavailable("msg id", err)
		case errors.Is(err, store.ErrNotFound):
			return store.Message{}, errcode.New(errcode.NotFound, "conversation not found")
		case store.IsRetryable(err):
			if serr := retry.Sleep(ctx, commitRetry.Delay(attempt)); serr != nil {
				return store.Message{}, errcode.Unavailable("commit", serr)
			}
		default:
			return store.Message{}, errcode.Unavailable("commit", err)
		}
	}
	return store.Message{}, errcode.Unavailable("commit", err)
}

// submit queues a send and waits for its outcome. When ctx ends first the
// send may still commit (a retry of its client_msg_id will find it).
func (c *committer) submit(ctx context.Context, p *pending) (outcome, error) {
	p.queued = time.Now()
	select {
	case c.queue <- p:
	case <-c.stop:
		return outcome{}, errcode.Unavailable("commit", errShuttingDown)
	case <-ctx.Done():
		return outcome{}, errcode.Unavailable("commit", ctx.Err())
	}
	select {
	case o := <-p.outcome:
		return o, nil
	case <-ctx.Done():
		return outcome{}, errcode.Unavailable("commit", ctx.Err())
	case <-c.stopped:
		select {
		case o := <-p.outcome:
			return o, nil
		default: // queued after the drain
			return outcome{}, errcode.Unavailable("commit", errShuttingDown)
		}
	}
}

func (c *committer) work(ctx context.Context) {
	defer c.wg.Done()
	batch := make([]*pending, 0, c.batch)
	for {
		batch = batch[:0]
		select {
		case <-c.stop:
			return
		case p := <-c.queue:
			batch = append(batch, p)
		}
		size := len(batch[0].nm.Content)
	fill:
		for len(batch) < c.batch && size < maxBatchContent {
			select {
			case p := <-c.queue:
				batch = append(batch, p)
				size += len(p.nm.Content)
			default:
				break fill
			}
		}
		c.commit(ctx, batch)
		clear(batch) // do not pin the sends until the next batch
	}
}

// commit runs one batch and answers each of its sends: one transaction in
// two round trips (store.InsertMessages: the idempotency lookup of every
// key, whose replays are answered from it, and the locks; then the writes
// and COMMIT), and one pipelined round trip of XADDs for every job (new
// and replayed) before any answer goes out.
func (c *committer) commit(ctx context.Context, all []*pending) {
	// A send whose caller already gave up is not written: it has been
	// answered 50301 and never committed.
	batch := all[:0:0]
	for _, p := range all {
		if err := p.ctx.Err(); err != nil {
			p.outcome <- outcome{err: errcode.Unavailable("commit", err)}
			continue
		}
		batch = append(batch, p)
	}
	if len(batch) == 0 {
		return
	}
	if c.onBatch != nil {
		c.onBatch(len(batch))
	}
	ctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	s := c.s
	s.metrics.SendBatchSize.Observe(float64(len(batch)))
	taken := time.Now()
	queueStage := s.metrics.SendStage.WithLabelValues(metrics.StageQueue)
	for _, p := range batch {
		queueStage.Observe(taken.Sub(p.queued).Seconds())
	}
	out := make([]outcome, len(batch))

	// Idempotency first (docs/protocol.md §7): a send whose key exists is a
	// retry, answered with the stored row (or 40901) and enqueued again
	// (decision 9); the store looks every key up in the transaction's
	// first round trip and writes none of those it finds.
	mysqlStart := time.Now()
	c.insert(ctx, batch, out)
	s.metrics.SendStage.WithLabelValues(metrics.StageMySQL).Observe(time.Since(mysqlStart).Seconds())

	now := time.Now()
	jobs := make([]*queuev1.DeliverJob, 0, len(batch))
	idx := make([]int, 0, len(batch))
	for i, p := range batch {
		if out[i].err != nil || out[i].fallback || out[i].row.ID == 0 {
			continue
		}
		job, err := Job(out[i].row, p.conv, p.flags, now)
		if err != nil {
			out[i].err = errcode.Wrap(errcode.Internal, "", err)
			continue
		}
		if tracing.On() {
			job.TraceParent = tracing.Parent(p.ctx)
		}
		out[i].job = job
		jobs = append(jobs, job)
		idx = append(idx, i)
	}
	enqueueStart := time.Now()
	errs := s.enqueuePipelined(ctx, jobs)
	s.metrics.SendStage.WithLabelValues(metrics.StageEnqueue).Observe(time.Since(enqueueStart).Seconds())
	for k, i := range idx {
		out[i].enqueueErr, out[i].enqueueStart = errs[k], enqueueStart
	}
	for i, p := range batch {
		p.outcome <- out[i]
	}
}

// insert commits the sends of batch in one transaction and records each
// one's outcome in out: its new row, the stored row of a retry (replay),
// 40901 for a key reused with other content, or not found. When the
// transaction is refused as a whole, out tells every send to fall back
// (commitOne tells the per-row cases apart, replays included) or carries
// its 50301.
func (c *committer) insert(ctx context.Context, batch []*pending, out []outcome) {
	s := c.s
	nms := make([]store.NewMessage, len(batch))
	for i, p := range batch {
		nms[i] = p.nm
	}
	choose := func(ctx context.Context, i int, last int64, now time.Time) (int64, error) {
		if id := batch[i].msgID; s.acceptClientID(id, last, now) {
			return id, nil
		}
		return s.ids.NextAfter(ctx, last)
	}
	var (
		res store.BatchResult
		err error
	)
	for attempt := 0; attempt < maxCommitAttempts; attempt++ {
		res, err = s.store.InsertMessages(ctx, nms, choose)
		if err == nil || !store.IsRetryable(err) {
			break
		}
		if serr := retry.Sleep(ctx, commitRetry.Delay(attempt)); serr != nil {
			break
		}
	}
	switch {
	case err == nil:
		s.metrics.SendCommits.WithLabelValues("ok").Inc()
	case errors.Is(err, store.ErrBatchRow) || store.IsRetryable(err):
		// A duplicate key (a concurrent identical send, a reused client
		// msg_id), a failed id choice, or lock trouble that outlasted the
		// retries: each send goes through the single-send path, which
		// tells these cases apart exactly as one transaction per send.
		s.metrics.SendCommits.WithLabelValues("fallback").Inc()
		for i := range batch {
			out[i].fallback = true
		}
		return
	default:
		s.metrics.SendCommits.WithLabelValues("error").Inc()
		for i := range batch {
			out[i].err = errcode.Unavailable("commit", err)
		}
		return
	}
	for i, p := range batch {
		switch {
		case res.Found[i]:
			if out[i].err = retryOf(res.Rows[i], p.nm); out[i].err == nil {
				out[i].row, out[i].replay = res.Rows[i], true
			}
		case res.Missing[i]:
			out[i].err = errcode.New(errcode.NotFound, "conversation not found")
		default:
			out[i].row = res.Rows[i]
			if err := failpoint.Inject("logic/send/afterCommit"); err != nil {
				out[i].err = errcode.Unavailable("after commit", err)
			}
		}
	}
}

// enqueuePipelined makes the first XADD attempt of every job in one round
// trip; errs[i] is job i's error (nil: enqueued).
func (s *Service) enqueuePipelined(ctx context.Context, jobs []*queuev1.DeliverJob) []error {
	errs := make([]error, len(jobs))
	if len(jobs) == 0 {
		return errs
	}
	actx, cancel := context.WithTimeout(ctx, enqueueAttemptTimeout)
	defer cancel()
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(jobs))
	now := time.Now().UnixMilli()
	for i, job := range jobs {
		if err := failpoint.Inject("logic/send/beforeEnqueue"); err != nil {
			errs[i] = err
			continue
		}
		job.EnqueuedAtMs = now
		b, err := proto.Marshal(job)
		if err != nil {
			errs[i] = err
			continue
		}
		key := rediskey.Deliver(rediskey.Partition(job.ConversationId, s.cfg.Partitions))
		cmds[i] = pipe.XAdd(actx, &redis.XAddArgs{Stream: key, Values: []any{queue.Field, b}})
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(actx) // per-command errors are read below
	}
	for i, cmd := range cmds {
		if cmd != nil {
			errs[i] = cmd.Err()
		}
	}
	for _, err := range errs {
		if err != nil {
			s.metrics.EnqueueAttemptFailures.Inc()
		}
	}
	return errs
}
