package fanout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// batchOf returns n tasks of partition p with msg ids p*100+1 … p*100+n.
func batchOf(p, n int) []task {
	tasks := make([]task, n)
	for i := range tasks {
		tasks[i] = task{partition: p, job: &queuev1.DeliverJob{MsgId: int64(p*100 + i + 1)}}
	}
	return tasks
}

// roundLog records what each call of process got.
type roundLog struct {
	mu     sync.Mutex
	rounds [][]int64 // msg ids per call
}

func (l *roundLog) add(tasks []task) {
	ids := make([]int64, len(tasks))
	for i, t := range tasks {
		ids[i] = t.job.GetMsgId()
	}
	l.mu.Lock()
	l.rounds = append(l.rounds, ids)
	l.mu.Unlock()
}

func (l *roundLog) get() [][]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.rounds)
}

// TestRoundsRunALoneBatchAtOnceOnItsOwn checks that with nothing else
// waiting a batch is processed in the caller's round, alone, with the
// caller's context, and its error comes back.
func TestRoundsRunALoneBatchAtOnceOnItsOwn(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "caller")
	boom := errors.New("redis down")
	var log roundLog
	r := newRounds(func(pctx context.Context, tasks []task) error {
		log.add(tasks)
		if pctx.Value(key{}) != "caller" {
			t.Error("a lone batch's round did not get the caller's context")
		}
		return boom
	})
	if err := r.run(ctx, batchOf(4, 3)); !errors.Is(err, boom) {
		t.Fatalf("run: %v, want %v", err, boom)
	}
	want := [][]int64{{401, 402, 403}}
	if got := log.get(); !slices.EqualFunc(got, want, func(a, b []int64) bool { return slices.Equal(a, b) }) {
		t.Fatalf("rounds = %v, want %v", got, want)
	}
	if q := queued(r); q != 0 {
		t.Fatalf("after the round: %d batches queued, want 0", q)
	}
}

// holdBoth fills both round slots with rounds of partitions 8 and 9 that
// wait for release, so batches handed in meanwhile queue; other rounds
// are processed by then. release lets the held rounds finish and waits
// for their callers.
func holdBoth(t *testing.T, then func([]task) error) (r *rounds, log *roundLog, release func()) {
	t.Helper()
	log = &roundLog{}
	held := make(chan struct{})
	r = newRounds(func(ctx context.Context, tasks []task) error {
		log.add(tasks)
		if tasks[0].partition >= 8 {
			<-held
			return nil
		}
		return then(tasks)
	})
	var wg sync.WaitGroup
	// One at a time: handed in together they could share one round.
	for n, p := range []int{8, 9} {
		wg.Go(func() { _ = r.run(context.Background(), batchOf(p, 1)) })
		waitFor(t, "a held round", func() bool { return len(log.get()) == n+1 })
	}
	return r, log, func() {
		close(held)
		wg.Wait()
	}
}

// queued returns how many batches wait for a round.
func queued(r *rounds) int { return r.handIns.Queued() }

// waitQueued waits until n batches are queued for a round.
func waitQueued(t *testing.T, r *rounds, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d batches queued", n), func() bool { return queued(r) == n })
}

// TestRoundsQueuedBatchesShareOneRound hands in three partitions'
// batches while both round slots are held: the three must be processed
// as one round, each partition's jobs contiguous and in stream order.
func TestRoundsQueuedBatchesShareOneRound(t *testing.T) {
	r, log, release := holdBoth(t, func([]task) error { return nil })
	var wg sync.WaitGroup
	for _, pn := range [][2]int{{1, 2}, {2, 3}, {3, 1}} {
		wg.Go(func() {
			if err := r.run(context.Background(), batchOf(pn[0], pn[1])); err != nil {
				t.Errorf("partition %d: %v", pn[0], err)
			}
		})
	}
	waitQueued(t, r, 3)
	release()
	wg.Wait()
	got := log.get()
	if len(got) != 3 {
		t.Fatalf("rounds = %v, want the two held ones and one of the three queued batches", got)
	}
	merged := got[2]
	if len(merged) != 6 {
		t.Fatalf("merged round = %v, want the 6 jobs of partitions 1, 2 and 3", merged)
	}
	for _, p := range []int64{1, 2, 3} {
		var ids []int64
		for _, id := range merged {
			if id/100 == p {
				ids = append(ids, id)
			}
		}
		if !slices.IsSorted(ids) {
			t.Fatalf("partition %d's jobs out of stream order in %v", p, merged)
		}
	}
}

// TestRoundsRetryEachBatchAloneWhenTheMergedRoundFails checks that one
// partition's failing job costs only that partition: the others succeed
// on their own retry, and only the failing batch gets the error.
func TestRoundsRetryEachBatchAloneWhenTheMergedRoundFails(t *testing.T) {
	bad := errors.New("member list unreadable")
	r, log, release := holdBoth(t, func(tasks []task) error {
		for _, tk := range tasks {
			if tk.partition == 2 {
				return bad
			}
		}
		return nil
	})
	var wg sync.WaitGroup
	results := make([]error, 4)
	for _, p := range []int{1, 2, 3} {
		wg.Go(func() { results[p] = r.run(context.Background(), batchOf(p, 2)) })
	}
	waitQueued(t, r, 3)
	release()
	wg.Wait()
	for p, want := range map[int]error{1: nil, 2: bad, 3: nil} {
		if !errors.Is(results[p], want) {
			t.Errorf("partition %d: error %v, want %v", p, results[p], want)
		}
	}
	// Held rounds, the merged round, then each batch alone.
	if got := log.get(); len(got) != 6 {
		t.Fatalf("process calls = %v, want 6", got)
	}
}

// TestRoundsWithdrawABatchWhoseContextEndsWhileQueued checks that a
// partition that must stop (lease lost) before its batch was taken gets
// its context's error and the batch is never processed.
func TestRoundsWithdrawABatchWhoseContextEndsWhileQueued(t *testing.T) {
	r, log, release := holdBoth(t, func([]task) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.run(ctx, batchOf(1, 1)) }()
	waitQueued(t, r, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("withdrawn batch: %v, want context.Canceled", err)
	}
	release()
	for _, round := range log.get() {
		if slices.Contains(round, 101) {
			t.Fatalf("the withdrawn batch was processed: %v", log.get())
		}
	}
}

// TestRoundContextEndsOnlyWhenEveryBatchsContextHasEnded checks the
// merged round's context: one partition stopping must not cut the
// others' round short.
func TestRoundContextEndsOnlyWhenEveryBatchsContextHasEnded(t *testing.T) {
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	ctx, stop := allDone([]*handIn{{ctx: ctxA}, {ctx: ctxB}})
	defer stop()
	cancelA()
	select {
	case <-ctx.Done():
		t.Fatal("the round ended when only one of its two batches' contexts did")
	case <-time.After(50 * time.Millisecond):
	}
	cancelB()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the round did not end after every batch's context did")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
