package gateway

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

func TestDispatcherOrderPerKey(t *testing.T) {
	tests := []struct {
		name       string
		keys, each int
		jitter     bool
	}{
		{"one key", 1, 500, false},
		{"many keys", 32, 100, false},
		{"many keys with jitter", 8, 50, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDispatcher[uint64]()
			var mu sync.Mutex
			got := make([][]int, tt.keys)
			var wg sync.WaitGroup
			for i := 0; i < tt.each; i++ {
				for k := 0; k < tt.keys; k++ {
					wg.Add(1)
					d.Submit(uint64(k), func() {
						defer wg.Done()
						if tt.jitter && rand.IntN(4) == 0 {
							time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
						}
						mu.Lock()
						got[k] = append(got[k], i)
						mu.Unlock()
					})
				}
			}
			wg.Wait()
			for k, seq := range got {
				if len(seq) != tt.each {
					t.Fatalf("key %d ran %d tasks, want %d", k, len(seq), tt.each)
				}
				for i, v := range seq {
					if v != i {
						t.Fatalf("key %d: task %d ran at position %d", k, v, i)
					}
				}
			}
			waitIdle(t, d)
		})
	}
}

func TestDispatcherKeysInParallel(t *testing.T) {
	d := NewDispatcher[string]()
	bRan := make(chan struct{})
	aDone := make(chan bool, 1)
	// A's task waits for B's: it only finishes if the keys run in parallel.
	d.Submit("a", func() {
		select {
		case <-bRan:
			aDone <- true
		case <-time.After(2 * time.Second):
			aDone <- false
		}
	})
	d.Submit("b", func() { close(bRan) })
	if !<-aDone {
		t.Fatal("key b waited behind key a")
	}
	// A slow task of one key delays only that key.
	release := make(chan struct{})
	d.Submit("slow", func() { <-release })
	fast := make(chan struct{})
	d.Submit("fast", func() { close(fast) })
	select {
	case <-fast:
	case <-time.After(2 * time.Second):
		t.Fatal("fast key blocked by slow key")
	}
	close(release)
	waitIdle(t, d)
}

func TestDispatcherPanicKeepsQueue(t *testing.T) {
	d := NewDispatcher[int]()
	ran := make(chan struct{})
	d.Submit(1, func() { panic("boom") })
	d.Submit(1, func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(2 * time.Second):
		t.Fatal("task after a panic never ran")
	}
	waitIdle(t, d)
}

func waitIdle(t *testing.T, d interface{ Active() int }) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); d.Active() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys still have goroutines", d.Active())
		}
		time.Sleep(time.Millisecond)
	}
}
