// Package retry paces the retries of a failing call: a Policy says how long
// to wait before each attempt and how many to make, a Backoff walks a
// policy for loops that reset on success, and Do runs the whole loop.
// Every service retries something (a dependency that is down at start, a
// Redis outage, a deadlocked transaction, a lost reconnect), each with its
// own timings kept as that site's Policy.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy describes the waits between attempts: before retry n (0-based)
// the wait is Initial, multiplied n times by Multiplier and grown n times
// by Step, capped at Max. Exponential backoff is Multiplier 2; a linear
// one is Multiplier 1 (or 0) with a Step.
type Policy struct {
	// Initial is the wait before the first retry.
	Initial time.Duration
	// Max caps the wait; 0 leaves it uncapped.
	Max time.Duration
	// Multiplier scales the wait after each retry; below 1 counts as 1.
	Multiplier float64
	// Step is added to the wait after each retry (after scaling).
	Step time.Duration
	// Jitter, when set, waits half the delay plus a random share of the
	// other half ("equal jitter"), so the many instances retrying one
	// outage do not come back in lockstep.
	Jitter bool
	// Random returns a number in [0, 1) for the jitter; nil uses
	// math/rand/v2. A test sets it to make the waits exact.
	Random func() float64
	// Attempts bounds the calls Do makes (the first one included); 0 or
	// less retries until the call succeeds or ctx ends.
	Attempts int
	// Retryable says whether an error is worth another attempt; nil
	// retries every error. Do returns the first error it refuses.
	Retryable func(error) bool
	// Notify, when set, is told of each failed attempt (1-based) that
	// Do will retry after wait, before it waits: the place to log.
	Notify func(attempt int, err error, wait time.Duration)
}

// Delay returns the wait before retry n (0-based), jittered when the
// policy says so.
func (p Policy) Delay(n int) time.Duration {
	d := p.Initial
	m := max(p.Multiplier, 1)
	for i := 0; i < n && (p.Max <= 0 || d < p.Max); i++ {
		d = time.Duration(float64(d)*m) + p.Step
	}
	if p.Max > 0 {
		d = min(d, p.Max)
	}
	if !p.Jitter {
		return d
	}
	random := p.Random
	if random == nil {
		random = rand.Float64
	}
	return d/2 + time.Duration(random()*float64(d/2))
}

// Backoff walks a Policy: each Next is the wait before the next retry,
// growing until Reset starts over after a success. It is not safe for
// concurrent use; each retrying loop has its own.
type Backoff struct {
	p Policy
	n int
}

// NewBackoff returns a Backoff at the start of p.
func NewBackoff(p Policy) *Backoff { return &Backoff{p: p} }

// Next returns the next wait and moves on.
func (b *Backoff) Next() time.Duration {
	d := b.p.Delay(b.n)
	b.n++
	return d
}

// Reset starts over at the policy's Initial wait.
func (b *Backoff) Reset() { b.n = 0 }

// Sleep waits for the next wait; it returns false when ctx ends first.
func (b *Backoff) Sleep(ctx context.Context) bool {
	return Sleep(ctx, b.Next()) == nil
}

// Sleep waits d or until ctx ends, returning ctx's error then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Do calls fn until it succeeds, returns an error p.Retryable refuses, has
// been called p.Attempts times, or ctx ends while Do waits. It returns nil,
// fn's last error unchanged (so a caller can tell a refused error from an
// exhausted one by the error itself), or ctx's error when ctx ended during
// a wait.
func Do(ctx context.Context, p Policy, fn func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if p.Retryable != nil && !p.Retryable(err) {
			return err
		}
		if p.Attempts > 0 && attempt >= p.Attempts {
			return err
		}
		wait := p.Delay(attempt - 1)
		if p.Notify != nil {
			p.Notify(attempt, err, wait)
		}
		if serr := Sleep(ctx, wait); serr != nil {
			return serr
		}
	}
}
