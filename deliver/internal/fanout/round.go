package fanout

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/sparkim/spark/pkg/batch"
)

// maxRounds is how many rounds may run at once: one waiting on Redis or
// the gates while the next one fills keeps a batch's wait at about one
// round.
const maxRounds = 2

// maxRoundTasks bounds the jobs of one round (a round takes at least one
// partition's batch, however big): sixteen partitions' full batches.
const maxRoundTasks = 1024

// rounds merges the batches that partitions hand in while a round is
// running into the next round, so their stages share round trips: one
// pipeline of done markers and routes, one of list updates, one PushBatch
// per gate for all of them. Each partition had its own, and with
// conversations spread over sixteen partitions a busy deliver ran rounds
// of four jobs, paying the per-round costs in every process of the system
// for each (decision 77). Rounds form by waiting for the one in flight,
// never on a timer, so a lone batch goes at once.
//
// A partition hands in one batch at a time and its jobs stay in stream
// order within the round, so a device still gets one conversation's jobs
// in order; jobs of different partitions are of different conversations.
type rounds struct {
	process func(context.Context, []task) error
	handIns batch.Coalescer[*handIn]
}

// newRounds returns rounds that run process over each round's tasks.
func newRounds(process func(context.Context, []task) error) *rounds {
	r := &rounds{process: process}
	r.handIns = batch.Coalescer[*handIn]{MaxInFlight: maxRounds, MaxSize: maxRoundTasks,
		Size: func(h *handIn) int { return len(h.tasks) }, Send: r.runRound}
	return r
}

// handIn is one partition's batch waiting for, or in, a round.
type handIn struct {
	ctx   context.Context
	tasks []task
	err   error
	done  chan struct{}
}

// run processes tasks in a round with whatever other batches are waiting,
// and returns the outcome for them. When ctx ends before a round took
// them, they are withdrawn and ctx's error returned; once taken, run waits
// for the round, whose pushes may be under way: a partition never has two
// batches out at once.
func (r *rounds) run(ctx context.Context, tasks []task) error {
	h := &handIn{ctx: ctx, tasks: tasks, done: make(chan struct{})}
	r.handIns.Add(h)
	select {
	case <-h.done:
		return h.err
	case <-ctx.Done():
	}
	if r.handIns.Withdraw(h) {
		return ctx.Err()
	}
	<-h.done
	return h.err
}

// runRound processes the batches of one round together. When that fails
// (before any push, as process promises), each batch is processed again
// on its own, so one partition's trouble (a group whose members cannot be
// read during a MySQL outage) does not hold up the others.
func (r *rounds) runRound(round []*handIn) {
	if len(round) == 1 {
		h := round[0]
		h.err = r.process(h.ctx, h.tasks)
		close(h.done)
		return
	}
	ctx, cancel := allDone(round)
	defer cancel()
	var size int
	for _, h := range round {
		size += len(h.tasks)
	}
	tasks := make([]task, 0, size)
	for _, h := range round {
		tasks = append(tasks, h.tasks...)
	}
	if err := r.process(ctx, tasks); err == nil {
		for _, h := range round {
			close(h.done)
		}
		return
	}
	var wg sync.WaitGroup
	for _, h := range round {
		wg.Go(func() {
			h.err = r.process(h.ctx, h.tasks)
			close(h.done)
		})
	}
	wg.Wait()
}

// allDone returns a context that ends when every batch's context has
// ended: the round is everyone's, so no one partition's end may cut it
// short, but once all of them are abandoned it is nobody's.
func allDone(round []*handIn) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(round[0].ctx))
	left := atomic.Int32{}
	left.Store(int32(len(round)))
	stops := make([]func() bool, len(round))
	for i, h := range round {
		stops[i] = context.AfterFunc(h.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
