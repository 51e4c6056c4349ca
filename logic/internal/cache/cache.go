// Package cache is a small bounded in-process map for facts that never
// change once true (a user exists, a pair's conversation id).
package cache

import "sync"

// Map is a concurrency-safe map holding at most Max entries; when full, an
// arbitrary half is evicted.
type Map[K comparable, V any] struct {
	mu  sync.RWMutex
	max int
	m   map[K]V
}

// New returns a Map bounded to max entries (at least 2).
func New[K comparable, V any](max int) *Map[K, V] {
	if max < 2 {
		max = 2
	}
	return &Map[K, V]{max: max, m: make(map[K]V)}
}

// Get returns the value of k.
func (c *Map[K, V]) Get(k K) (V, bool) {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	return v, ok
}

// Put stores k → v.
func (c *Map[K, V]) Put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		n := len(c.m) / 2
		for key := range c.m { // map iteration order is random
			if n == 0 {
				break
			}
			delete(c.m, key)
			n--
		}
	}
	c.m[k] = v
}

// Len returns the number of entries.
func (c *Map[K, V]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
