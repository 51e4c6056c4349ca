// Package routesweep notices the users a dead gate took offline.
//
// A gate that dies (kill -9, a lost machine) sends no close for its
// connections, so their routes stay in Redis until deliver trips over
// them, and no user.offline is ever recorded for a user whose last device
// was there. AUTH therefore writes each route into a set of its gate
// incarnation (Index) before the route itself, a close takes it out, and
// one logic at a time (Sweeper) walks the sets of incarnations that are
// gone: the gate's registry key expired, or the gate came back with a
// newer incarnation. For each route still there it records the
// user.offline of a user left with no device, then removes the route.
// The set is a hint and the route hash the truth: every step compares
// the route before it acts, so a stale member costs a lookup, never a
// wrong event (docs/decisions.md 97).
package routesweep

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
)

// Incarnation is the gate process a connection id belongs to: gates issue
// ids as start-second << 32 | counter, unique per gate id across restarts.
func Incarnation(connID uint64) uint32 { return uint32(connID >> 32) }

// member is a route's entry in its incarnation's set.
func member(uid int64, device string, e route.Entry) string {
	return strconv.FormatInt(uid, 10) + "|" + device + "|" + e.Key()
}

// parseMember is member's inverse.
func parseMember(m string) (int64, string, route.Entry, error) {
	u, rest, ok := strings.Cut(m, "|")
	dev, key, ok2 := strings.Cut(rest, "|")
	if !ok || !ok2 || dev == "" {
		return 0, "", route.Entry{}, fmt.Errorf("routesweep: malformed member %q", m)
	}
	uid, err := strconv.ParseInt(u, 10, 64)
	if err != nil || uid <= 0 {
		return 0, "", route.Entry{}, fmt.Errorf("routesweep: malformed user in %q", m)
	}
	e, err := route.Parse(key)
	if err != nil {
		return 0, "", route.Entry{}, err
	}
	return uid, dev, e, nil
}

// setName is an incarnation's member of rediskey.GateRouteSets.
func setName(gateID string, inc uint32) string {
	return strconv.FormatUint(uint64(inc), 10) + ":" + gateID
}

// parseSetName is setName's inverse.
func parseSetName(s string) (string, uint32, error) {
	i, g, ok := strings.Cut(s, ":")
	n, err := strconv.ParseUint(i, 10, 32)
	if !ok || g == "" || err != nil {
		return "", 0, fmt.Errorf("routesweep: malformed set name %q", s)
	}
	return g, uint32(n), nil
}

// Index writes and trims the route sets.
type Index struct {
	rdb redis.Cmdable
	log *zap.Logger
	now func() time.Time
	// known holds the incarnations this process has registered in
	// GateRouteSets, so an AUTH pays that write once per gate start.
	known sync.Map
}

// NewIndex returns an Index on rdb.
func NewIndex(rdb redis.Cmdable, log *zap.Logger) *Index {
	if log == nil {
		log = zap.NewNop()
	}
	return &Index{rdb: rdb, log: log, now: time.Now}
}

// Add puts a route into its incarnation's set. AUTH calls it before it
// writes the route, so every route that exists is in a set (a failed Add
// fails the AUTH).
func (x *Index) Add(ctx context.Context, uid int64, device string, e route.Entry) error {
	inc := Incarnation(e.ConnID)
	name := setName(e.GateID, inc)
	if _, ok := x.known.Load(name); !ok {
		// Registered first: a set the sweep cannot find is never swept.
		if err := x.rdb.ZAddNX(ctx, rediskey.GateRouteSets(), redis.Z{Score: float64(x.now().UnixMilli()), Member: name}).Err(); err != nil {
			return fmt.Errorf("routesweep: register %s: %w", name, err)
		}
		x.known.Store(name, struct{}{})
	}
	if err := x.rdb.SAdd(ctx, rediskey.GateRoutes(e.GateID, inc), member(uid, device, e)).Err(); err != nil {
		return fmt.Errorf("routesweep: index route: %w", err)
	}
	return nil
}

// Route is one route to index.
type Route struct {
	UserID   int64
	DeviceID string
	Entry    route.Entry
}

// AddBatch indexes routes restored together (a gate's Rebind after Redis
// lost its data), registering their incarnations again whatever this
// process remembers: the registry went with the rest of the data.
func (x *Index) AddBatch(ctx context.Context, routes []Route) error {
	names := map[string]bool{}
	_, err := x.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range routes {
			inc := Incarnation(r.Entry.ConnID)
			if n := setName(r.Entry.GateID, inc); !names[n] {
				names[n] = true
				p.ZAddNX(ctx, rediskey.GateRouteSets(), redis.Z{Score: float64(x.now().UnixMilli()), Member: n})
			}
			p.SAdd(ctx, rediskey.GateRoutes(r.Entry.GateID, inc), member(r.UserID, r.DeviceID, r.Entry))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("routesweep: index %d routes: %w", len(routes), err)
	}
	for n := range names {
		x.known.Store(n, struct{}{})
	}
	return nil
}

// Remove takes a closed or replaced route out of its set. A failure is
// logged only: the sweep finds the route gone and does nothing for it.
func (x *Index) Remove(ctx context.Context, uid int64, device string, e route.Entry) {
	if err := x.rdb.SRem(ctx, rediskey.GateRoutes(e.GateID, Incarnation(e.ConnID)), member(uid, device, e)).Err(); err != nil {
		x.log.Warn("route index entry not removed", zap.Int64("user_id", uid), zap.String("device_id", device), zap.Error(err))
	}
}

// forget drops a swept incarnation from the process's cache.
func (x *Index) forget(name string) { x.known.Delete(name) }
