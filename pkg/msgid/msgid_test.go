package msgid

import (
	"context"
	"errors"
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
		{"floor 200ms ahead: continues after it", func() int64 { return int64(time.Since(Epoch)/time.Millisecond+200) << timeShift }, false},
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
	if mark, _ := store.LoadHighWater(ctx, 3); mark < TimeOf(last).UnixMilli() {
		t.Fatalf("high-water %d below last id time %d", mark, TimeOf(last).UnixMilli())
	}
	// A restart (as if the clock were set back) must wait for the mark:
	// New returns only once the clock has passed it. (Compared with the
	// mark itself, not with a fixed wait: the mark runs up to Reserve
	// ahead of the last id, and a loaded machine may have used most of
	// that before New starts.) The mark is never lowered, so the one read
	// here is at most the one New waits for.
	mark, _ := store.LoadHighWater(ctx, 3)
	g2, err := New(ctx, Settings{MachineID: 3, Store: store, Reserve: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if now := time.Now().UnixMilli(); now <= mark {
		t.Fatalf("restart returned at %d, before the clock passed the high-water mark %d", now, mark)
	}
	id, _ := g2.Next(ctx)
	if id <= last {
		t.Fatalf("restarted generator issued %d <= %d", id, last)
	}
	// A mark far in the future (clock set back a lot) makes New honour ctx.
	_ = store.StoreHighWater(ctx, 4, time.Now().Add(time.Hour).UnixMilli())
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

// stoppedClock is a clock that moves only when told: a generator that
// waited for it would never return.
type stoppedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stoppedClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// NextAfter never waits for the clock (the send path holds a row lock
// while it asks): with the clock stopped, a floor ahead of it and more ids
// than one millisecond's sequence holds, every id comes at once, above
// its floor and the previous id, borrowing the next milliseconds; only a
// floor beyond MaxAhead is refused, at once.
func TestNextAfterNeverWaits(t *testing.T) {
	ctx := context.Background()
	clock := &stoppedClock{t: Epoch.Add(1000 * time.Hour)}
	store := &memStore{marks: map[int]int64{}}
	g, err := New(ctx, Settings{MachineID: 5, Store: store, Clock: clock.now, MaxAhead: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	nowMs := clock.now().Sub(Epoch).Milliseconds()
	last := int64(0)
	for i := 0; i < 3*(maxSequence+1); i++ { // three milliseconds' worth
		id, err := g.Next(ctx)
		if err != nil {
			t.Fatalf("id %d: %v", i, err)
		}
		if id <= last || MachineOf(id) != 5 {
			t.Fatalf("id %d after %d (machine %d)", id, last, MachineOf(id))
		}
		last = id
	}
	if ahead := TimeOf(last).Sub(clock.now()); ahead != 2*time.Millisecond {
		t.Fatalf("after three milliseconds' worth of ids the last is %v ahead, want 2ms", ahead)
	}
	tests := []struct {
		name    string
		ahead   time.Duration
		machine int
		wantErr bool
	}{
		{"another machine 2s ahead", 2 * time.Second, 1023, false},
		{"a lower machine id 2s ahead", 2*time.Second + time.Millisecond, 0, false},
		{"beyond MaxAhead: refused", 4 * time.Second, 9, true},
	}
	for _, tt := range tests {
		floor := (nowMs+tt.ahead.Milliseconds())<<timeShift | int64(maxSequence)<<BitsMachineID | int64(tt.machine)
		if tt.machine == 0 {
			floor = (nowMs + tt.ahead.Milliseconds()) << timeShift
		}
		id, err := g.NextAfter(ctx, floor)
		if (err != nil) != tt.wantErr {
			t.Fatalf("%s: err %v", tt.name, err)
		}
		if err != nil {
			if !errors.Is(err, ErrClockBehind) {
				t.Fatalf("%s: err %v, want ErrClockBehind", tt.name, err)
			}
			continue
		}
		if id <= floor || MachineOf(id) != 5 {
			t.Fatalf("%s: id %d not above floor %d (machine %d)", tt.name, id, floor, MachineOf(id))
		}
	}
	// The high-water mark covers every id issued, ahead of the clock too.
	id, _ := g.Next(ctx)
	if mark, _ := store.LoadHighWater(ctx, 5); mark < TimeOf(id).UnixMilli() {
		t.Fatalf("high-water %d below the id's time %d", mark, TimeOf(id).UnixMilli())
	}
}

func TestMaxAt(t *testing.T) {
	at := Epoch.Add(1234 * time.Millisecond)
	tests := []struct {
		name string
		id   int64
		want bool // id <= MaxAt(at)
	}{
		{"same ms, highest sequence and machine", 1234<<timeShift | maxSequence<<BitsMachineID | MaxMachineID, true},
		{"same ms, lowest", 1234 << timeShift, true},
		{"earlier ms", 1233<<timeShift | MaxMachineID, true},
		{"next ms", 1235 << timeShift, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.id <= MaxAt(at); got != tt.want {
				t.Fatalf("%d <= MaxAt = %v, want %v", tt.id, got, tt.want)
			}
		})
	}
	if MaxAt(Epoch.Add(-time.Second)) != 0 {
		t.Fatal("MaxAt before Epoch is not 0")
	}
}
