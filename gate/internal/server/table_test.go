package server

import (
	"testing"
	"time"
)

type nopSocket struct{ closed chan struct{} }

func newNopSocket() *nopSocket { return &nopSocket{closed: make(chan struct{})} }

func (s *nopSocket) WriteFrames(*frameBatch) error { return nil }
func (s *nopSocket) Kind() string                  { return "nop" }
func (s *nopSocket) Close() error {
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
	return nil
}

func (s *nopSocket) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

func TestTable(t *testing.T) {
	cases := []struct {
		name   string
		shards int
		conns  int
	}{
		{"one shard", 1, 10},
		{"rounded up to a power of two", 5, 100},
		{"many shards", 64, 1000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb := NewTable(tc.shards)
			if n := len(tb.shards); n&(n-1) != 0 || n < tc.shards {
				t.Fatalf("%d shards for %d", n, tc.shards)
			}
			ids := NewConnIDs(time.Unix(1700000000, 0))
			conns := make([]*Conn, tc.conns)
			for i := range conns {
				conns[i] = newConn(ids.Next(), newNopSocket(), "127.0.0.1", time.Now())
				tb.Add(conns[i])
			}
			if tb.Len() != tc.conns {
				t.Fatalf("Len = %d", tb.Len())
			}
			for _, c := range conns {
				if tb.Get(c.id) != c {
					t.Fatalf("Get(%d) lost the conn", c.id)
				}
				if c.id>>32 != 1700000000 {
					t.Fatalf("conn id %x lacks the start time", c.id)
				}
			}
			seen := 0
			tb.Range(func(*Conn) bool { seen++; return true })
			if seen != tc.conns {
				t.Fatalf("Range saw %d", seen)
			}
			stopped := 0
			tb.Range(func(*Conn) bool { stopped++; return false })
			if stopped != 1 {
				t.Fatalf("Range did not stop: %d", stopped)
			}
			// Remove only removes the same conn, never a newer one with
			// the same id.
			impostor := newConn(conns[0].id, newNopSocket(), "", time.Now())
			if tb.Remove(impostor) {
				t.Fatal("removed a different conn with the same id")
			}
			for _, c := range conns {
				if !tb.Remove(c) {
					t.Fatalf("Remove(%d) = false", c.id)
				}
				if tb.Remove(c) {
					t.Fatal("second Remove = true")
				}
			}
			if tb.Len() != 0 || tb.Get(conns[0].id) != nil {
				t.Fatal("table not empty")
			}
		})
	}
}
