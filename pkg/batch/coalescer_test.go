package batch

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// item is a test item: its id, and its share of MaxSize.
type item struct{ id, size int }

// heldCoalescer returns a Coalescer whose batches holding an item of id
// ≥ 100 wait for release, and the record of every batch sent.
func heldCoalescer(maxInFlight, maxSize int) (c *Coalescer[*item], sent func() [][]int, release func()) {
	var mu sync.Mutex
	var batches [][]int
	held := make(chan struct{})
	c = &Coalescer[*item]{MaxInFlight: maxInFlight, MaxSize: maxSize, Size: func(it *item) int { return it.size }}
	c.Send = func(b []*item) {
		ids := make([]int, len(b))
		for i, it := range b {
			ids[i] = it.id
		}
		mu.Lock()
		batches = append(batches, ids)
		mu.Unlock()
		if b[0].id >= 100 {
			<-held
		}
	}
	return c, func() [][]int {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(batches)
		}, func() {
			close(held)
		}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCoalescerSendsALoneItemAtOnceInTheCallersBatch checks that Add of
// one item with nothing in flight returns after sending it alone, and
// leaves no batch running (the next Add leads again).
func TestCoalescerSendsALoneItemAtOnceInTheCallersBatch(t *testing.T) {
	c, sent, _ := heldCoalescer(1, 10)
	c.Add(&item{id: 1, size: 1})
	if got := sent(); len(got) != 1 || !slices.Equal(got[0], []int{1}) {
		t.Fatalf("batches = %v, want [[1]] sent before Add returned", got)
	}
	c.Add(&item{id: 2, size: 1})
	if got := sent(); len(got) != 2 || !slices.Equal(got[1], []int{2}) {
		t.Fatalf("batches = %v, want the second lone item sent by its own Add", got)
	}
	if c.running != 0 || c.Queued() != 0 {
		t.Fatalf("after the batches: running %d, queued %d; want 0, 0", c.running, c.Queued())
	}
}

// TestCoalescerBatchesWhatQueuedWhileEveryBatchWasOut holds MaxInFlight
// batches, queues items meanwhile, and checks they go in queue order in
// batches bounded by MaxSize (a first item larger than it goes alone).
func TestCoalescerBatchesWhatQueuedWhileEveryBatchWasOut(t *testing.T) {
	c, sent, release := heldCoalescer(2, 10)
	var wg sync.WaitGroup
	// One at a time: added together they could share one batch.
	for n, id := range []int{100, 101} {
		wg.Go(func() { c.Add(&item{id: id, size: 1}) })
		waitUntil(t, "a held batch", func() bool { return len(sent()) == n+1 })
	}
	for _, it := range []*item{{1, 4}, {2, 4}, {3, 4}, {4, 12}, {5, 1}} {
		c.Add(it) // returns at once: both batches are out
	}
	if q := c.Queued(); q != 5 {
		t.Fatalf("queued %d, want 5", q)
	}
	release()
	wg.Wait()
	waitUntil(t, "every item sent", func() bool { return len(sent()) == 6 })
	// The two goroutines that go on from the held batches take batches
	// from the queue's head in turn, so the batches are fixed though the
	// order they are recorded in is not.
	got := sent()[2:]
	slices.SortFunc(got, func(a, b []int) int { return a[0] - b[0] })
	want := [][]int{{1, 2}, {3}, {4}, {5}}
	if !slices.EqualFunc(got, want, func(a, b []int) bool { return slices.Equal(a, b) }) {
		t.Fatalf("batches = %v, want %v (sizes 4+4, 4, 12 alone, 1; MaxSize 10)", got, want)
	}
	waitUntil(t, "no batch running", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.running == 0
	})
}

// TestCoalescerWithdrawTakesOnlyAQueuedItem checks that a queued item can
// be taken back and is never sent, and that an item already sent cannot.
func TestCoalescerWithdrawTakesOnlyAQueuedItem(t *testing.T) {
	c, sent, release := heldCoalescer(1, 10)
	held := &item{id: 100, size: 1}
	done := make(chan struct{})
	go func() { c.Add(held); close(done) }()
	waitUntil(t, "the held batch", func() bool { return len(sent()) == 1 })
	queued := &item{id: 1, size: 1}
	c.Add(queued)
	if c.Withdraw(held) {
		t.Fatal("an item in a batch was withdrawn")
	}
	if !c.Withdraw(queued) {
		t.Fatal("a queued item could not be withdrawn")
	}
	release()
	<-done
	for _, b := range sent() {
		if slices.Contains(b, 1) {
			t.Fatalf("the withdrawn item was sent: %v", sent())
		}
	}
}
