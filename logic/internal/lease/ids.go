package lease

import (
	"context"
	"sync/atomic"

	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/msgid"
)

// IDs issues ids (a *msgid.Generator).
type IDs interface {
	NextAfter(ctx context.Context, floor int64) (int64, error)
}

// GuardedIDs issues ids from a generator only while the lease on its
// machine id passes Check, so a logic that lost contact with Redis stops
// issuing before another process could take the machine id over. A
// refusal is 50301: the client retries, on another logic if this one stays
// cut off.
type GuardedIDs struct {
	ids   IDs
	lease *Lease
	floor *Floor
}

// Guard returns ids guarded by l, each above floor (nil: no floor).
func Guard(ids IDs, l *Lease, floor *Floor) *GuardedIDs {
	if floor == nil {
		floor = new(Floor)
	}
	return &GuardedIDs{ids: ids, lease: l, floor: floor}
}

// Next returns a new id while the lease is held.
func (g *GuardedIDs) Next(ctx context.Context) (int64, error) {
	return g.NextAfter(ctx, 0)
}

// NextAfter returns a new id above floor (and above the guard's own
// floor) while the lease is held.
func (g *GuardedIDs) NextAfter(ctx context.Context, floor int64) (int64, error) {
	if err := g.lease.Check(); err != nil {
		return 0, errcode.Wrap(errcode.Busy, "", err)
	}
	if f := g.floor.id.Load(); f > floor {
		floor = f
	}
	return g.ids.NextAfter(ctx, floor)
}

// Floor is an id every id of a GuardedIDs must exceed. It is made before
// the lease, whose OnRetake raises it, and before the generator. The zero
// value is no floor; it is safe for concurrent use.
type Floor struct{ id atomic.Int64 }

// RaiseToMs makes every later id greater than any id of a time up to
// unixMs (a high-water mark another holder of the machine id may have
// issued up to while this process's lease had lapsed).
func (f *Floor) RaiseToMs(unixMs int64) {
	want := FloorAfterMs(unixMs)
	for {
		old := f.id.Load()
		if want <= old || f.id.CompareAndSwap(old, want) {
			return
		}
	}
}

// FloorAfterMs is the greatest id of the millisecond unixMs: an id above
// it is of a later millisecond or none of that one.
func FloorAfterMs(unixMs int64) int64 {
	ms := unixMs - msgid.Epoch.UnixMilli()
	if ms < 0 {
		return 0
	}
	return (ms+1)<<(msgid.BitsSequence+msgid.BitsMachineID) - 1
}
