package routesweep

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/lease"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
)

// Presence records a user's first device in and last device out (a
// *store.Store writing user.online / user.offline webhook events).
type Presence interface {
	UserPresence(ctx context.Context, userID int64, deviceID string, online bool) error
}

// scanCount is how many members one SSCAN step asks for.
const scanCount = 256

var closeScript = redis.NewScript(route.CloseScript)

// Sweeper removes the routes of dead gate incarnations and records the
// user.offline they imply.
type Sweeper struct {
	rdb      redis.UniversalClient
	idx      *Index
	presence Presence
	every    time.Duration
	log      *zap.Logger
}

// NewSweeper returns a Sweeper that looks every interval.
func NewSweeper(rdb redis.UniversalClient, idx *Index, p Presence, every time.Duration, log *zap.Logger) *Sweeper {
	if log == nil {
		log = zap.NewNop()
	}
	return &Sweeper{rdb: rdb, idx: idx, presence: p, every: every, log: log}
}

// Run sweeps every interval until ctx ends, while this process holds the
// sweep lease (one logic at a time; another takes over within the lease's
// TTL of the holder's death). A failed sweep is retried at the next tick:
// what it did not finish is still in the sets.
func (s *Sweeper) Run(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	var l *lease.Lease
	defer func() {
		if l != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = l.Release(rctx)
			cancel()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if l != nil && l.Check() != nil {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			_ = l.Release(rctx)
			cancel()
			l = nil
		}
		if l == nil {
			var err error
			l, err = lease.Acquire(ctx, s.rdb, rediskey.GateRouteSweep(), lease.Options{TTL: 3 * s.every})
			if err != nil {
				l = nil
				if !errors.Is(err, lease.ErrHeld) && ctx.Err() == nil {
					s.log.Warn("route sweep lease", zap.Error(err))
				}
				continue
			}
		}
		if n, err := s.SweepOnce(ctx); err != nil {
			s.log.Warn("dead gates' routes: sweep stopped, retried at the next tick", zap.Int("removed", n), zap.Error(err))
		} else if n > 0 {
			s.log.Info("dead gates' routes swept", zap.Int("removed", n))
		}
	}
}

// SweepOnce walks every dead incarnation's set once and reports how many
// routes it removed.
func (s *Sweeper) SweepOnce(ctx context.Context) (int, error) {
	names, err := s.rdb.ZRange(ctx, rediskey.GateRouteSets(), 0, -1).Result()
	if err != nil {
		return 0, fmt.Errorf("routesweep: read sets: %w", err)
	}
	type set struct {
		name string
		gate string
		inc  uint32
	}
	var sets []set
	newest := make(map[string]uint32)
	for _, n := range names {
		g, inc, err := parseSetName(n)
		if err != nil {
			s.log.Warn("malformed route set name dropped", zap.String("name", n))
			_ = s.rdb.ZRem(ctx, rediskey.GateRouteSets(), n).Err()
			continue
		}
		sets = append(sets, set{n, g, inc})
		newest[g] = max(newest[g], inc)
	}
	alive := make(map[string]bool, len(newest))
	for g := range newest {
		n, err := s.rdb.Exists(ctx, rediskey.Gate(g)).Result()
		if err != nil {
			return 0, fmt.Errorf("routesweep: gate %s: %w", g, err)
		}
		alive[g] = n == 1
	}
	removed := 0
	for _, st := range sets {
		if alive[st.gate] && st.inc == newest[st.gate] {
			continue
		}
		n, err := s.sweepSet(ctx, st.gate, st.inc)
		removed += n
		if err != nil {
			return removed, err
		}
		// Dropped only once empty: an AUTH still in flight for the dead
		// gate may have added a member meanwhile.
		left, err := s.rdb.SCard(ctx, rediskey.GateRoutes(st.gate, st.inc)).Result()
		if err != nil {
			return removed, fmt.Errorf("routesweep: %s: %w", st.name, err)
		}
		if left == 0 {
			if err := s.rdb.ZRem(ctx, rediskey.GateRouteSets(), st.name).Err(); err != nil {
				return removed, fmt.Errorf("routesweep: drop %s: %w", st.name, err)
			}
			s.idx.forget(st.name)
		}
	}
	return removed, nil
}

// sweepSet handles every member of one dead incarnation's set.
func (s *Sweeper) sweepSet(ctx context.Context, gate string, inc uint32) (int, error) {
	key := rediskey.GateRoutes(gate, inc)
	removed := 0
	var cursor uint64
	for {
		members, next, err := s.rdb.SScan(ctx, key, cursor, "", scanCount).Result()
		if err != nil {
			return removed, fmt.Errorf("routesweep: scan %s: %w", key, err)
		}
		var done []any
		for _, m := range members {
			uid, dev, e, err := parseMember(m)
			if err != nil {
				s.log.Warn("malformed route set member dropped", zap.String("member", m))
				done = append(done, m)
				continue
			}
			ok, err := s.sweepRoute(ctx, uid, dev, e)
			if err != nil {
				// What is done so far is dropped; the rest waits for the
				// next sweep.
				if len(done) > 0 {
					_ = s.rdb.SRem(ctx, key, done...).Err()
				}
				return removed, err
			}
			if ok {
				removed++
			}
			done = append(done, m)
		}
		if len(done) > 0 {
			if err := s.rdb.SRem(ctx, key, done...).Err(); err != nil {
				return removed, fmt.Errorf("routesweep: trim %s: %w", key, err)
			}
		}
		cursor = next
		if cursor == 0 {
			return removed, nil
		}
	}
}

// sweepRoute removes one dead route, recording user.offline first when it
// is the user's last, and reports whether it removed it. The event is
// written before the route goes, so a crash in between repeats it at the
// next sweep (at least once) rather than losing it.
func (s *Sweeper) sweepRoute(ctx context.Context, uid int64, dev string, e route.Entry) (bool, error) {
	routes, err := s.rdb.HGetAll(ctx, rediskey.Route(uid)).Result()
	if err != nil {
		return false, fmt.Errorf("routesweep: routes of %d: %w", uid, err)
	}
	cur, has := routes[dev]
	if !has || !sameConn(cur, e) {
		// Closed, replaced, or removed by deliver on its way (a push to a
		// gone gate). In that last case nobody recorded the offline: a
		// user left with no route gets it now.
		if len(routes) == 0 {
			return false, s.record(ctx, uid, dev, false)
		}
		return false, nil
	}
	last := len(routes) == 1
	if last {
		if err := s.record(ctx, uid, dev, false); err != nil {
			return false, err
		}
	}
	left, err := closeScript.Run(ctx, s.rdb, []string{rediskey.Route(uid)}, dev, e.Key()).Int()
	if err != nil {
		return false, fmt.Errorf("routesweep: remove route of %d/%s: %w", uid, dev, err)
	}
	switch {
	case left < 0:
		// Replaced between the read and the removal: the replacing AUTH
		// saw a device online and recorded nothing; if we recorded the
		// offline, take it back.
		if last {
			return false, s.record(ctx, uid, dev, true)
		}
		return false, nil
	case last && left > 0:
		// Another device came in meanwhile and saw this one: it recorded
		// no online, so the user is online again after our offline.
		if err := s.record(ctx, uid, dev, true); err != nil {
			return true, err
		}
	case !last && left == 0:
		// The others went in the meantime, without an offline.
		if err := s.record(ctx, uid, dev, false); err != nil {
			return true, err
		}
	}
	return true, nil
}

// record writes a presence event.
func (s *Sweeper) record(ctx context.Context, uid int64, dev string, online bool) error {
	if err := s.presence.UserPresence(ctx, uid, dev, online); err != nil {
		return fmt.Errorf("routesweep: presence of %d: %w", uid, err)
	}
	return nil
}

// sameConn reports whether a route value names e's connection.
func sameConn(v string, e route.Entry) bool {
	c, err := route.Parse(v)
	if err != nil {
		return false
	}
	return c.Key() == e.Key()
}
