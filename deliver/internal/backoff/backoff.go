// Package backoff paces retries of a failing dependency (Redis) so a
// partition goroutine neither spins nor gives up on a job.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff doubles its delay from Min up to Max, with jitter so instances
// retrying the same outage do not hit Redis in lockstep.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// New returns a Backoff from min to max.
func New(min, max time.Duration) *Backoff { return &Backoff{Min: min, Max: max} }

// Next returns the next delay.
func (b *Backoff) Next() time.Duration {
	if b.cur < b.Min {
		b.cur = b.Min
	} else {
		b.cur *= 2
		if b.cur > b.Max {
			b.cur = b.Max
		}
	}
	return b.cur/2 + rand.N(b.cur/2+1)
}

// Reset starts over at Min after a success.
func (b *Backoff) Reset() { b.cur = 0 }

// Sleep waits for the next delay; it returns false when ctx ends first.
func (b *Backoff) Sleep(ctx context.Context) bool {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
