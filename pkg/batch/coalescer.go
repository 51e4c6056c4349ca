package batch

import (
	"slices"
	"sync"
)

// Coalescer sends items that callers hand in concurrently as batches: a
// caller that finds fewer than MaxInFlight batches being sent sends one
// itself, with every item queued by then, so a lone item goes at once and
// items arriving while a batch is out wait for the next one, never for a
// timer. The caller that led a batch returns after it; what queued
// meanwhile goes on in a new goroutine, so no caller is held up serving
// the others. Send answers the items itself (each item carries its own
// reply); the Coalescer only forms the batches.
type Coalescer[T comparable] struct {
	// MaxInFlight is how many batches may be out at once; below 1 counts
	// as 1.
	MaxInFlight int
	// MaxSize bounds one batch by the sum of its items' Size; a batch
	// always takes its first item, however big.
	MaxSize int
	// Size is an item's share of MaxSize; nil counts 1 per item.
	Size func(T) int
	// Send sends one batch. It must not call Add.
	Send func(batch []T)

	mu      sync.Mutex
	queue   []T
	running int
}

// Add queues it and, when a batch may go out, sends batches in the
// caller's goroutine (the first of which holds it unless more than
// MaxSize was queued before it). Add returns once that batch is sent, or
// at once when the item waits for a batch in flight.
func (c *Coalescer[T]) Add(it T) {
	c.mu.Lock()
	c.queue = append(c.queue, it)
	lead := c.running < max(c.MaxInFlight, 1)
	if lead {
		c.running++
	}
	c.mu.Unlock()
	if lead {
		c.flush(true)
	}
}

// Withdraw takes it out of the queue and reports whether it was still
// there; an item already in a batch stays in it.
func (c *Coalescer[T]) Withdraw(it T) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.queue, it)
	if i < 0 {
		return false
	}
	c.queue = slices.Delete(c.queue, i, i+1)
	return true
}

// Queued returns how many items wait for a batch.
func (c *Coalescer[T]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// flush sends the queued items, one batch at a time. With handOff it
// sends one batch and passes what is left to a new goroutine.
func (c *Coalescer[T]) flush(handOff bool) {
	for {
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.running--
			c.mu.Unlock()
			return
		}
		n, size := 0, 0
		for n < len(c.queue) {
			s := 1
			if c.Size != nil {
				s = c.Size(c.queue[n])
			}
			if n > 0 && size+s > c.MaxSize {
				break
			}
			size += s
			n++
		}
		b := slices.Clone(c.queue[:n])
		c.queue = slices.Delete(c.queue, 0, n)
		c.mu.Unlock()

		c.Send(b)
		if handOff {
			c.mu.Lock()
			if len(c.queue) == 0 {
				c.running--
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
			go c.flush(false)
			return
		}
	}
}
