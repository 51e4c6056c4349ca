package sendhook

import (
	"sync"
	"time"
)

// State is a breaker state; its number is the value of the
// spark_logic_hook_breaker_state gauge.
type State int

// The breaker states.
const (
	// Closed: every send calls the hook.
	Closed State = 0
	// HalfOpen: one probe call is in flight; other sends apply the
	// failure policy without calling.
	HalfOpen State = 1
	// Open: no send calls the hook until the cooldown has passed.
	Open State = 2
)

// breaker is the hook's circuit breaker: threshold consecutive failures
// open it; after cooldown the next send is let through as the one probe
// (half-open); the probe's success closes the breaker, its failure opens
// it for another cooldown. Calls started while closed that end after it
// opened do not move it: only the probe decides a half-open breaker.
type breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time
	onState   func(State)

	mu       sync.Mutex
	state    State
	failures int
	openedAt time.Time
}

func newBreaker(threshold int, cooldown time.Duration, now func() time.Time, onState func(State)) *breaker {
	return &breaker{threshold: threshold, cooldown: cooldown, now: now, onState: onState}
}

// allow reports whether a call may go out (ok), and whether it is the
// half-open probe.
func (b *breaker) allow() (probe, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case Closed:
		return false, true
	case Open:
		if b.now().Sub(b.openedAt) >= b.cooldown {
			b.set(HalfOpen)
			return true, true
		}
	}
	return false, false
}

// done records a call's result.
func (b *breaker) done(probe, success bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case probe && success:
		b.failures = 0
		b.set(Closed)
	case probe:
		b.trip()
	case b.state != Closed:
		// A call from before the breaker opened: the probe decides.
	case success:
		b.failures = 0
	default:
		b.failures++
		if b.failures >= b.threshold {
			b.trip()
		}
	}
}

// abandon records a call whose caller gave up before the hook answered:
// it says nothing of the hook, but a probe's slot is given back so the
// next send probes.
func (b *breaker) abandon(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == HalfOpen {
		b.state = Open // openedAt kept: the cooldown has passed, the next send probes
		b.onState(Open)
	}
}

func (b *breaker) trip() {
	b.failures = 0
	b.openedAt = b.now()
	b.set(Open)
}

func (b *breaker) set(s State) {
	b.state = s
	b.onState(s)
}

// current is the breaker's state now.
func (b *breaker) current() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}
