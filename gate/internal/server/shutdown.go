package server

import (
	"context"
	"time"

	"go.uber.org/zap"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// ShutdownKickReason is the KICK reason a gate sends its connections when
// it stops. Unlike the other reasons (another login, revoked), which tell
// a client to stop, it tells it to reconnect, to another gate.
const ShutdownKickReason = "server_shutdown"

// kickTick is how often the shutdown kicker looks for connections that are
// due or whose answers are all queued: fine enough that a 1 s window is
// spread over 100 steps.
const kickTick = 10 * time.Millisecond

// leavingConn is a connection marked leaving whose answers the kicker
// waits for until deadline.
type leavingConn struct {
	c        *Conn
	deadline time.Time
}

// kickAll sends every connection KICK server_shutdown, the i-th of n at
// start + window·i/n (all at once when window is 0), so the clients
// reconnect to the other gates spread over the window. Each connection is
// first marked leaving (new requests answered 50301) and kicked once the
// answers of its requests already with logic are queued, or after the
// drain timeout; the KICK follows them in its queue and the connection
// closes once it is written. When ctx ends, whatever is left is kicked at
// once. It returns the kicked connections.
func (s *Server) kickAll(ctx context.Context, window time.Duration) []*Conn {
	var conns []*Conn
	s.table.Range(func(c *Conn) bool { conns = append(conns, c); return true })
	body, err := s.sess.kickBody(ShutdownKickReason)
	if err != nil {
		// A fixed struct always encodes; close without a KICK rather
		// than not at all.
		s.log.Error("shutdown kick", zap.Error(err))
		for _, c := range conns {
			c.Close(closeShutdown)
		}
		return nil
	}
	n := len(conns)
	s.log.Info("kicking connections", zap.Int("connections", n), zap.Duration("window", window))
	start := time.Now()
	due := func(i int) time.Time {
		if window <= 0 || n == 0 {
			return start
		}
		return start.Add(time.Duration(int64(window) * int64(i) / int64(n)))
	}
	kicked := make([]*Conn, 0, n)
	var pending []leavingConn
	t := time.NewTicker(kickTick)
	defer t.Stop()
	next := 0
	for {
		now := time.Now()
		late := ctx.Err() != nil
		for next < n && (late || !due(next).After(now)) {
			c := conns[next]
			next++
			c.leaving.Store(true)
			pending = append(pending, leavingConn{c: c, deadline: now.Add(s.drain)})
		}
		keep := pending[:0]
		for _, p := range pending {
			if !late && p.c.awaiting.Load() > 0 && now.Before(p.deadline) && p.c.state.Load() != stateClosed {
				keep = append(keep, p)
				continue
			}
			if s.sess.kick(p.c, ShutdownKickReason, body) {
				kicked = append(kicked, p.c)
			}
		}
		clear(pending[len(keep):]) // no references to kicked connections
		pending = keep
		if next == n && len(pending) == 0 {
			return kicked
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// kickedClosed reports whether every kicked connection has closed, that
// is its KICK was written (or its write failed) and logic was sent Closed.
func kickedClosed(conns []*Conn) bool {
	for _, c := range conns {
		if c.state.Load() != stateClosed {
			return false
		}
	}
	return true
}

// ShutdownBound is the longest Shutdown takes: the kick window, the drain
// timeout for the last kicked connection's answers, a write timeout for
// its KICK, and the few seconds stopping the listeners, the streams and
// the Push server may take.
func (s *Server) ShutdownBound() time.Duration {
	return s.cfg.ShutdownKickWindow + s.drain + s.cfg.WriteTimeout + 5*time.Second
}

// maxDrainWindow bounds a Drain's window: a client waits at most this
// long for its KICK.
const maxDrainWindow = time.Hour

// Drain does what Shutdown does to the clients and no more (decision 96):
// readiness fails, new connections are refused, and every connection gets
// KICK server_shutdown spread over window (gate.shutdown_kick_window when
// 0) by the same kicker, in the background; the streams to logic and the
// Push server stay up, so answers and pushes already on their way still
// arrive and the gate can be stopped later with nothing left on it. It
// returns how many connections it is kicking; a second Drain, or one
// during Shutdown, kicks nothing and returns 0.
func (s *Server) Drain(window time.Duration) int {
	if window <= 0 {
		window = s.cfg.ShutdownKickWindow
	}
	window = min(window, maxDrainWindow)
	if s.draining.Swap(true) {
		return 0
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	n := s.table.Len()
	go func() {
		kctx, cancel := context.WithTimeout(s.ctx, window+s.drain)
		defer cancel()
		kicked := s.kickAll(kctx, window)
		// As in Shutdown: a session that started as draining began.
		kicked = append(kicked, s.kickAll(kctx, 0)...)
		s.log.Info("drained", zap.Int("kicked", len(kicked)), zap.Duration("window", window))
	}()
	return n
}
