// Package msgid issues MsgIds (and other 64-bit ids) on sonyflake: 41 bits of
// milliseconds since 2025-01-01 UTC, 12 bits of sequence, 10 bits of machine
// id. Ids from one generator strictly increase, also across restarts with
// the clock set back: a persisted high-water mark makes a restarted
// generator wait until its clock has passed every id it may have issued.
package msgid

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sony/sonyflake/v2"
)

// Layout of an id.
const (
	BitsSequence  = 12
	BitsMachineID = 10
	MaxMachineID  = 1<<BitsMachineID - 1
	timeShift     = BitsSequence + BitsMachineID
)

// Epoch is the zero time of ids.
var Epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// ErrClockBehind is returned when the clock is further behind the last
// issued id than the generator is willing to wait.
var ErrClockBehind = errors.New("msgid: clock is behind the last issued id")

// HighWater persists, per machine id, a time (Unix ms) that no issued id
// exceeds.
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
	// Reserve is how far ahead of the clock the stored mark runs, so the
	// store is written about every Reserve/2 instead of per id. Default 2s.
	Reserve time.Duration
	// MaxWait bounds how long Next waits for a clock that fell behind the
	// last issued id before it fails with ErrClockBehind. Default 1s.
	MaxWait time.Duration
}

// Generator issues ids. It is safe for concurrent use.
type Generator struct {
	sf      *sonyflake.Sonyflake
	machine int
	store   HighWater
	reserve time.Duration
	maxWait time.Duration

	mu       sync.Mutex
	lastID   int64
	reserved int64 // Unix ms persisted as the high-water mark
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
	if st.MaxWait <= 0 {
		st.MaxWait = time.Second
	}
	g := &Generator{machine: st.MachineID, store: st.Store, reserve: st.Reserve, maxWait: st.MaxWait}
	if g.store != nil {
		hw, err := g.store.LoadHighWater(ctx, st.MachineID)
		if err != nil {
			return nil, fmt.Errorf("msgid: load high-water mark: %w", err)
		}
		if wait := time.Until(time.UnixMilli(hw + 1)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("msgid: waiting %v for the clock to pass the high-water mark: %w", wait, ctx.Err())
			case <-t.C:
			}
		}
		g.reserved = hw
	}
	sf, err := sonyflake.New(sonyflake.Settings{
		BitsSequence:  BitsSequence,
		BitsMachineID: BitsMachineID,
		TimeUnit:      time.Millisecond,
		StartTime:     Epoch,
		MachineID:     func() (int, error) { return st.MachineID, nil },
	})
	if err != nil {
		return nil, fmt.Errorf("msgid: %w", err)
	}
	g.sf = sf
	return g, nil
}

// MachineID returns the generator's machine id.
func (g *Generator) MachineID() int { return g.machine }

// Next returns a new id, greater than every id this generator issued before.
func (g *Generator) Next(ctx context.Context) (int64, error) {
	return g.NextAfter(ctx, 0)
}

// NextAfter returns a new id greater than floor, waiting (at most MaxWait)
// for the clock when floor is ahead of it. The send path uses it to make a
// MsgId greater than the conversation's last_msg_id.
func (g *Generator) NextAfter(ctx context.Context, floor int64) (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if floor < g.lastID {
		floor = g.lastID
	}
	deadline := time.Now().Add(g.maxWait)
	for {
		// Sonyflake itself never goes back, but when the clock falls behind
		// it would sleep for as long as the clock lags, holding its lock.
		// Refuse instead, so callers can answer "busy" quickly.
		lag := TimeOf(floor).Sub(time.Now())
		if lag > 0 {
			if time.Now().Add(lag).After(deadline) {
				return 0, fmt.Errorf("%w (by %v)", ErrClockBehind, lag)
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(lag):
			}
			continue
		}
		id, err := g.sf.NextID()
		if err != nil {
			return 0, fmt.Errorf("msgid: %w", err)
		}
		if id <= floor {
			continue
		}
		if err := g.reserveLocked(ctx, id); err != nil {
			return 0, err
		}
		g.lastID = id
		return id, nil
	}
}

// reserveLocked persists a new high-water mark when id's time approaches
// the stored one. Writes happen about every Reserve/2.
func (g *Generator) reserveLocked(ctx context.Context, id int64) error {
	if g.store == nil {
		return nil
	}
	ms := TimeOf(id).UnixMilli()
	if ms+g.reserve.Milliseconds()/2 < g.reserved {
		return nil
	}
	next := ms + g.reserve.Milliseconds()
	if err := g.store.StoreHighWater(ctx, g.machine, next); err != nil {
		return fmt.Errorf("msgid: store high-water mark: %w", err)
	}
	g.reserved = next
	return nil
}

// TimeOf returns the time an id was issued.
func TimeOf(id int64) time.Time {
	return Epoch.Add(time.Duration(id>>timeShift) * time.Millisecond)
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
