// Package msgid issues MsgIds (and other 64-bit ids) in sonyflake's layout:
// 41 bits of milliseconds since 2025-01-01 UTC, 12 bits of sequence, 10
// bits of machine id. Ids from one generator strictly increase, also across
// restarts with the clock set back: a persisted high-water mark makes a
// restarted generator wait (at start, holding nothing) until its clock has
// passed every id it may have issued.
//
// Issuing never waits. The send path asks for an id above a conversation's
// last_msg_id while it holds that conversation's row lock; when that floor
// is at or ahead of this machine's clock (another machine's clock runs a
// little ahead, a client's id was kept, the sequence of this millisecond is
// used up), the generator continues right after it, like a hybrid logical
// clock, instead of sleeping until its clock passes it. Only a floor more
// than MaxAhead ahead is refused, at once, with ErrClockBehind.
package msgid

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Layout of an id.
const (
	BitsSequence  = 12
	BitsMachineID = 10
	MaxMachineID  = 1<<BitsMachineID - 1
	timeShift     = BitsSequence + BitsMachineID
	maxSequence   = 1<<BitsSequence - 1
	maxElapsed    = 1<<(63-timeShift) - 1
)

// Epoch is the zero time of ids.
var Epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// ErrClockBehind is returned when the id asked for would be further ahead
// of the clock than the generator's MaxAhead (the clock was set back a lot,
// or a floor came from a clock far ahead). It is returned at once: the
// caller may hold row locks and must not wait for the clock.
var ErrClockBehind = errors.New("msgid: clock is behind the last issued id")

// HighWater persists, per machine id, a time (Unix ms) that no issued id
// exceeds. StoreHighWater must never lower the stored mark (concurrent
// writes may arrive out of order) and must be safe for concurrent use.
type HighWater interface {
	LoadHighWater(ctx context.Context, machineID int) (int64, error)
	StoreHighWater(ctx context.Context, machineID int, unixMs int64) error
}

// Settings configure a Generator.
type Settings struct {
	MachineID int
	// Store persists the high-water mark; nil disables restart protection
	// (tests only).
	Store HighWater
	// Reserve is how far ahead of the issued ids the stored mark runs, so
	// the store is written about every Reserve/2 instead of per id, and in
	// the background: an id waits for a write only when it is beyond the
	// stored mark (the first id after start, a jump ahead). Default 2s.
	Reserve time.Duration
	// MaxAhead bounds how far ahead of the clock an id may be issued to
	// stay above a floor; beyond it NextAfter fails with ErrClockBehind.
	// Default 5s.
	MaxAhead time.Duration
	// Clock is the time source; nil means time.Now.
	Clock func() time.Time
}

// refreshTimeout bounds one background write of the high-water mark.
const refreshTimeout = 5 * time.Second

// Generator issues ids. It is safe for concurrent use.
type Generator struct {
	machine  int
	store    HighWater
	reserve  time.Duration
	maxAhead time.Duration
	clock    func() time.Time

	mu         sync.Mutex
	lastID     int64
	reserved   int64 // Unix ms persisted as the high-water mark
	refreshing bool  // a background write of the mark is in flight
}

// New returns a Generator. If a high-water mark is stored for the machine id
// and the clock has not yet passed it, New waits until it has (or ctx ends),
// so no id from before the restart can be issued again.
func New(ctx context.Context, st Settings) (*Generator, error) {
	if st.MachineID < 0 || st.MachineID > MaxMachineID {
		return nil, fmt.Errorf("msgid: machine id %d outside 0..%d", st.MachineID, MaxMachineID)
	}
	if st.Reserve <= 0 {
		st.Reserve = 2 * time.Second
	}
	if st.MaxAhead <= 0 {
		st.MaxAhead = 5 * time.Second
	}
	if st.Clock == nil {
		st.Clock = time.Now
	}
	g := &Generator{machine: st.MachineID, store: st.Store, reserve: st.Reserve, maxAhead: st.MaxAhead, clock: st.Clock}
	if g.store != nil {
		hw, err := g.store.LoadHighWater(ctx, st.MachineID)
		if err != nil {
			return nil, fmt.Errorf("msgid: load high-water mark: %w", err)
		}
		if wait := time.UnixMilli(hw + 1).Sub(g.clock()); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("msgid: waiting %v for the clock to pass the high-water mark: %w", wait, ctx.Err())
			case <-t.C:
			}
		}
		g.reserved = hw
		if t := elapsed(time.UnixMilli(hw)); t > 0 {
			// Ids start above the mark whatever the clock says later.
			g.lastID = t << timeShift
		}
	}
	return g, nil
}

// MachineID returns the generator's machine id.
func (g *Generator) MachineID() int { return g.machine }

// Next returns a new id, greater than every id this generator issued before.
func (g *Generator) Next(ctx context.Context) (int64, error) {
	return g.NextAfter(ctx, 0)
}

// NextAfter returns a new id greater than floor and than every id this
// generator issued before. The send path calls it under the conversation's
// row lock with the conversation's last_msg_id, so it never sleeps: when
// floor is not behind the clock, the id continues right after floor (its
// millisecond, the next sequence; the next millisecond once the sequence
// is used up) instead of waiting for the clock to pass it. An id more than
// MaxAhead ahead of the clock is refused with ErrClockBehind.
func (g *Generator) NextAfter(ctx context.Context, floor int64) (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if floor < g.lastID {
		floor = g.lastID
	}
	now := g.clock()
	t := elapsed(now)
	var id int64
	if ft := floor >> timeShift; t > ft {
		id = t<<timeShift | int64(g.machine)
	} else {
		seq := (floor>>BitsMachineID)&maxSequence + 1
		if seq > maxSequence {
			ft, seq = ft+1, 0
		}
		if ft > maxElapsed {
			return 0, fmt.Errorf("msgid: time limit of the id layout reached")
		}
		id = ft<<timeShift | seq<<BitsMachineID | int64(g.machine)
		if ahead := TimeOf(id).Sub(now); ahead > g.maxAhead {
			return 0, fmt.Errorf("%w (an id above %d would be %v ahead of the clock)", ErrClockBehind, floor, ahead)
		}
	}
	if err := g.reserveLocked(ctx, id); err != nil {
		return 0, err
	}
	g.lastID = id
	return id, nil
}

// reserveLocked keeps the persisted high-water mark above id: written
// synchronously only when id is beyond it (the first id after start, a
// jump ahead), and otherwise refreshed in the background when id's time
// comes within Reserve/2 of it, so ids are not held up by the write.
func (g *Generator) reserveLocked(ctx context.Context, id int64) error {
	if g.store == nil {
		return nil
	}
	ms := TimeOf(id).UnixMilli()
	next := ms + g.reserve.Milliseconds()
	switch {
	case ms > g.reserved:
		if err := g.store.StoreHighWater(ctx, g.machine, next); err != nil {
			return fmt.Errorf("msgid: store high-water mark: %w", err)
		}
		g.reserved = next
	case ms+g.reserve.Milliseconds()/2 >= g.reserved && !g.refreshing:
		g.refreshing = true
		go g.refresh(context.WithoutCancel(ctx), next)
	}
	return nil
}

// refresh writes the high-water mark next in the background (one at a
// time); a failed write is retried by the next id that finds the mark
// close, or written synchronously by the first id beyond it.
func (g *Generator) refresh(ctx context.Context, next int64) {
	ctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	err := g.store.StoreHighWater(ctx, g.machine, next)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refreshing = false
	if err == nil && next > g.reserved {
		g.reserved = next
	}
}

// elapsed is t in milliseconds since Epoch.
func elapsed(t time.Time) int64 { return t.Sub(Epoch).Milliseconds() }

// TimeOf returns the time an id was issued.
func TimeOf(id int64) time.Time {
	return Epoch.Add(time.Duration(id>>timeShift) * time.Millisecond)
}

// MaxAt returns the largest id issued at or before t (0 before Epoch): a
// reader that has seen every id up to it has seen all of t's millisecond.
func MaxAt(t time.Time) int64 {
	e := elapsed(t)
	if e < 0 {
		return 0
	}
	return (e+1)<<timeShift - 1
}

// MachineOf returns the machine id part of an id.
func MachineOf(id int64) int { return int(id & MaxMachineID) }

// IssuedWithin reports whether id looks like one of ours issued within
// window of now.
func IssuedWithin(id int64, now time.Time, window time.Duration) bool {
	if id <= 0 {
		return false
	}
	d := now.Sub(TimeOf(id))
	return d <= window && d >= -window
}
