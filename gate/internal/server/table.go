package server

import (
	"sync"
)

// Table is the gate's set of live connections, sharded so that accepts,
// closes and pushes on different connections rarely contend on one lock.
type Table struct {
	shards []tableShard
	mask   uint64
}

type tableShard struct {
	mu    sync.RWMutex
	conns map[uint64]*Conn
}

// NewTable returns a table with n shards, rounded up to a power of two so a
// shard is picked with a mask instead of a division.
func NewTable(n int) *Table {
	size := 1
	for size < n {
		size <<= 1
	}
	t := &Table{shards: make([]tableShard, size), mask: uint64(size - 1)}
	for i := range t.shards {
		t.shards[i].conns = make(map[uint64]*Conn)
	}
	return t
}

func (t *Table) shard(id uint64) *tableShard {
	// Conn ids are a counter in the low bits; mixing spreads neighbours
	// over shards even when the shard count is small.
	return &t.shards[(id*0x9E3779B97F4A7C15>>32)&t.mask]
}

// Add stores c under its id.
func (t *Table) Add(c *Conn) {
	s := t.shard(c.id)
	s.mu.Lock()
	s.conns[c.id] = c
	s.mu.Unlock()
}

// Get returns the connection with id, or nil.
func (t *Table) Get(id uint64) *Conn {
	s := t.shard(id)
	s.mu.RLock()
	c := s.conns[id]
	s.mu.RUnlock()
	return c
}

// Remove deletes c if it is still the entry under its id, and reports
// whether it was.
func (t *Table) Remove(c *Conn) bool {
	s := t.shard(c.id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns[c.id] != c {
		return false
	}
	delete(s.conns, c.id)
	return true
}

// Len returns the number of connections.
func (t *Table) Len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		n += len(s.conns)
		s.mu.RUnlock()
	}
	return n
}

// Range calls fn for every connection, one shard at a time. fn runs
// outside the shard lock so it may close or push to the connection; a
// connection added or removed meanwhile may or may not be visited.
func (t *Table) Range(fn func(*Conn) bool) {
	var batch []*Conn
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		batch = batch[:0]
		for _, c := range s.conns {
			batch = append(batch, c)
		}
		s.mu.RUnlock()
		for _, c := range batch {
			if !fn(c) {
				return
			}
		}
	}
}
