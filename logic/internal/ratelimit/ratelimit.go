// Package ratelimit is the per-device token bucket the client front door
// (the gateway handler) applies before a request reaches a domain service:
// limits belong to a front door, not to the core, so the business API
// sends without them.
package ratelimit

import (
	"sync"
	"time"
)

// Limiter is a set of token buckets keyed by (user, device), refilled at
// rate per second up to burst. Idle buckets are dropped. It is safe for
// concurrent use.
type Limiter struct {
	rate  float64
	burst float64

	mu      sync.Mutex
	buckets map[limitKey]*bucket
	swept   time.Time
}

type limitKey struct {
	user   int64
	device string
}

type bucket struct {
	tokens float64
	last   time.Time
}

// New returns a Limiter; a rate ≤ 0 allows everything.
func New(rate float64, burst int) *Limiter {
	if burst < 1 {
		burst = 1
	}
	return &Limiter{rate: rate, burst: float64(burst), buckets: map[limitKey]*bucket{}}
}

// Allow takes one token of (user, device) and reports whether there was
// one; a rate ≤ 0 disables the limit.
func (l *Limiter) Allow(user int64, device string, now time.Time) bool {
	if l.rate <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > time.Minute {
		l.sweep(now)
	}
	k := limitKey{user, device}
	b, ok := l.buckets[k]
	if !ok {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[k] = b
	}
	b.tokens += now.Sub(b.last).Seconds() * l.rate
	if b.tokens > l.burst {
		b.tokens = l.burst
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// sweep drops buckets that have refilled completely.
func (l *Limiter) sweep(now time.Time) {
	l.swept = now
	full := time.Duration(l.burst / l.rate * float64(time.Second))
	for k, b := range l.buckets {
		if now.Sub(b.last) > full {
			delete(l.buckets, k)
		}
	}
}
