package msgid

import (
	"context"
	"sync"
	"testing"
	"time"
)

type memStore struct {
	mu     sync.Mutex
	marks  map[int]int64
	writes int
}

func (m *memStore) LoadHighWater(_ context.Context, id int) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.marks[id], nil
}

func (m *memStore) StoreHighWater(_ context.Context, id int, ms int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.marks[id] = ms
	m.writes++
	return nil
}

func TestIncreasingAndUnique(t *testing.T) {
	ctx := context.Background()
	g, err := New(ctx, Settings{MachineID: 7})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for i := 0; i < 20000; i++ {
				id, err := g.Next(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if id <= last {
					t.Errorf("id %d after %d", id, last)
					return
				}
				last = id
				mu.Lock()
				if seen[id] {
					t.Errorf("duplicate %d", id)
				}
				seen[id] = true
				mu.Unlock()
				if MachineOf(id) != 7 {
					t.Errorf("machine %d", MachineOf(id))
				}
			}
		}()
	}
	wg.Wait()
}

func TestNextAfterFloor(t *testing.T) {
	ctx := context.Background()
	g, _ := New(ctx, Settings{MachineID: 1})
	other, _ := New(ctx, Settings{MachineID: 900})
	tests := []struct {
		name    string
		floor   func() int64
		wantErr bool
	}{
		{"zero floor", func() int64 { return 0 }, false},
		{"floor from another machine now", func() int64 { id, _ := other.Next(ctx); return id }, false},
		{"floor 200ms ahead waits", func() int64 { return int64(time.Since(Epoch)/time.Millisecond+200) << timeShift }, false},
		{"floor 1h ahead refused", func() int64 { return int64(time.Since(Epoch)/time.Millisecond+3600_000) << timeShift }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			floor := tt.floor()
			id, err := g.NextAfter(ctx, floor)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v", err)
			}
			if err == nil && id <= floor {
				t.Fatalf("id %d not above floor %d", id, floor)
			}
		})
	}
}

func TestRestartWithClockBehindHighWater(t *testing.T) {
	ctx := context.Background()
	store := &memStore{marks: map[int]int64{}}
	g, err := New(ctx, Settings{MachineID: 3, Store: store, Reserve: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for i := 0; i < 1000; i++ {
		if last, err = g.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if store.marks[3] < TimeOf(last).UnixMilli() {
		t.Fatalf("high-water %d below last id time %d", store.marks[3], TimeOf(last).UnixMilli())
	}
	// A restart (as if the clock were set back) must wait for the mark.
	start := time.Now()
	g2, err := New(ctx, Settings{MachineID: 3, Store: store, Reserve: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := g2.Next(ctx)
	if id <= last {
		t.Fatalf("restarted generator issued %d <= %d", id, last)
	}
	if time.Since(start) < 100*time.Millisecond {
		t.Fatal("restart did not wait for the high-water mark")
	}
	// A mark far in the future (clock set back a lot) makes New honour ctx.
	store.marks[4] = time.Now().Add(time.Hour).UnixMilli()
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := New(cctx, Settings{MachineID: 4, Store: store}); err == nil {
		t.Fatal("New must not issue ids below the high-water mark")
	}
}

func TestIssuedWithin(t *testing.T) {
	now := time.Now()
	id := int64(now.Sub(Epoch)/time.Millisecond) << timeShift
	tests := []struct {
		id   int64
		want bool
	}{
		{id, true},
		{id - int64(4*time.Minute/time.Millisecond)<<timeShift, true},
		{id - int64(6*time.Minute/time.Millisecond)<<timeShift, false},
		{id + int64(6*time.Minute/time.Millisecond)<<timeShift, false},
		{0, false},
		{-1, false},
	}
	for _, tt := range tests {
		if got := IssuedWithin(tt.id, now, 5*time.Minute); got != tt.want {
			t.Errorf("IssuedWithin(%d) = %v", tt.id, got)
		}
	}
}
