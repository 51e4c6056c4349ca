package server

import (
	"context"
	"time"
)

// Sweeper closes connections that never authenticated within the auth
// timeout and connections that sent nothing within the idle timeout. One
// pass a second over the table is far cheaper than a timer per connection.
type Sweeper struct {
	table       *Table
	authTimeout time.Duration
	idleTimeout time.Duration
	interval    time.Duration
}

// NewSweeper returns a sweeper over t checking every interval
// (gate.sweep_interval, positive).
func NewSweeper(t *Table, authTimeout, idleTimeout, interval time.Duration) *Sweeper {
	return &Sweeper{table: t, authTimeout: authTimeout, idleTimeout: idleTimeout, interval: interval}
}

// Run sweeps every interval until ctx ends.
func (s *Sweeper) Run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.Sweep(now)
		}
	}
}

// Sweep closes the connections overdue at now and returns how many.
func (s *Sweeper) Sweep(now time.Time) int {
	closed := 0
	s.table.Range(func(c *Conn) bool {
		if r, due := s.overdue(c, now); due {
			c.Close(r)
			closed++
		}
		return true
	})
	return closed
}

// overdue reports whether c is past a timeout at now, and which.
func (s *Sweeper) overdue(c *Conn, now time.Time) (closeReason, bool) {
	switch c.state.Load() {
	case stateClosed:
		return closePeer, false
	case stateConnecting:
		if s.authTimeout > 0 && now.Sub(c.createdAt) > s.authTimeout {
			return closeAuthTimeout, true
		}
	}
	if s.idleTimeout > 0 && now.Sub(time.Unix(0, c.lastActive.Load())) > s.idleTimeout {
		return closeIdleTimeout, true
	}
	return closePeer, false
}
