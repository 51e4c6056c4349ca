package routesweep

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
	"github.com/sparkim/spark/pkg/testredis"
)

// events records presence changes as store.UserPresence would write them,
// failing while fail is set.
type events struct {
	mu   sync.Mutex
	got  []string
	fail bool
}

func (e *events) UserPresence(_ context.Context, uid int64, dev string, online bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fail {
		return errors.New("mysql is down")
	}
	kind := "offline"
	if online {
		kind = "online"
	}
	e.got = append(e.got, fmt.Sprintf("%s %d/%s", kind, uid, dev))
	return nil
}

func (e *events) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.got
	e.got = nil
	slices.Sort(out)
	return out
}

var swap = redis.NewScript(route.SwapScript)

// randomUser is a user id no other test of the shared Redis uses (this
// package cannot import testenv, which imports auth, which imports it).
func randomUser() int64 { return rand.Int64N(1<<50) + 1 }

// connect does what AUTH does with the index: Add, then the route swap,
// then Remove of a replaced route.
func connect(t *testing.T, ctx context.Context, rdb redis.Cmdable, idx *Index, uid int64, dev string, e route.Entry) {
	t.Helper()
	if err := idx.Add(ctx, uid, dev, e); err != nil {
		t.Fatal(err)
	}
	v, err := swap.Run(ctx, rdb, []string{rediskey.Route(uid)}, dev, e.String()).Slice()
	if err != nil {
		t.Fatal(err)
	}
	if old, _ := v[0].(string); old != "" {
		oe, err := route.Parse(old)
		if err != nil {
			t.Fatal(err)
		}
		idx.Remove(ctx, uid, dev, oe)
	}
}

func alive(t *testing.T, ctx context.Context, rdb redis.Cmdable, gate string) {
	t.Helper()
	if err := rdb.HSet(ctx, rediskey.Gate(gate), "push_addr", "127.0.0.1:1").Err(); err != nil {
		t.Fatal(err)
	}
}

func routesOf(t *testing.T, ctx context.Context, rdb redis.Cmdable, uid int64) []string {
	t.Helper()
	h, err := rdb.HGetAll(ctx, rediskey.Route(uid)).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for d := range h {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

func TestSweepRecordsOfflineOnlyForUsersTheDeadGateLeftWithNoDevice(t *testing.T) {
	t.Run("single redis", func(t *testing.T) { sweepScenario(t, testredis.Open(t)) })
	t.Run("redis cluster", func(t *testing.T) { sweepScenario(t, testredis.OpenCluster(t)) })
}

func sweepScenario(t *testing.T, rdb redis.UniversalClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idx := NewIndex(rdb, nil)
	ev := &events{}
	sw := NewSweeper(rdb, idx, ev, time.Second, nil)

	dead, live := fmt.Sprintf("dead-%d", randomUser()), fmt.Sprintf("live-%d", randomUser())
	alive(t, ctx, rdb, live)
	const deadInc, liveInc = 1_700_000_000, 1_700_000_100
	n := uint64(0)
	on := func(gate string, inc uint32) route.Entry {
		n++
		return route.Entry{GateID: gate, ConnID: uint64(inc)<<32 | n, SinceMs: int64(1000 + n)}
	}
	only, split, both, lazy, moved := randomUser(), randomUser(), randomUser(), randomUser(), randomUser()
	connect(t, ctx, rdb, idx, only, "phone", on(dead, deadInc))
	connect(t, ctx, rdb, idx, split, "phone", on(dead, deadInc))
	connect(t, ctx, rdb, idx, split, "pad", on(live, liveInc))
	connect(t, ctx, rdb, idx, both, "phone", on(dead, deadInc))
	connect(t, ctx, rdb, idx, both, "pad", on(dead, deadInc))
	connect(t, ctx, rdb, idx, lazy, "phone", on(dead, deadInc))
	connect(t, ctx, rdb, idx, moved, "phone", on(dead, deadInc))
	// deliver removed lazy's route on its way (a push to the gone gate):
	// no close, no event so far.
	if err := rdb.HDel(ctx, rediskey.Route(lazy), "phone").Err(); err != nil {
		t.Fatal(err)
	}
	// moved's phone reconnected through the live gate before the sweep.
	connect(t, ctx, rdb, idx, moved, "phone", on(live, liveInc))

	// MySQL down: nothing is removed, nothing is lost.
	ev.fail = true
	before, err := sw.SweepOnce(ctx)
	if err == nil {
		t.Fatal("a sweep whose events cannot be written succeeded")
	}
	if got := routesOf(t, ctx, rdb, only); !slices.Equal(got, []string{"phone"}) {
		t.Fatalf("after a failed sweep, the route of the user whose offline was not recorded is %v, want it kept", got)
	}
	ev.fail = false
	ev.take()

	removed, err := sw.SweepOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{fmt.Sprintf("offline %d/phone", both), fmt.Sprintf("offline %d/phone", lazy), fmt.Sprintf("offline %d/phone", only)}
	slices.Sort(want)
	// both's two devices went together: exactly one offline, for
	// whichever device the sweep took last.
	got := ev.take()
	gotBoth := 0
	for i, g := range got {
		if g == fmt.Sprintf("offline %d/pad", both) {
			got[i] = fmt.Sprintf("offline %d/phone", both)
		}
		if g == fmt.Sprintf("offline %d/phone", both) || g == fmt.Sprintf("offline %d/pad", both) {
			gotBoth++
		}
	}
	slices.Sort(got)
	if gotBoth != 1 || !slices.Equal(got, want) {
		t.Fatalf("events %v, want one offline each for the user with one device, the user with two on the dead gate, the user deliver had cleared (and none for the others): %v", got, want)
	}
	if before+removed != 4 {
		t.Fatalf("removed %d+%d routes, want 4 (only, split's phone, both's two)", before, removed)
	}
	for _, c := range []struct {
		name string
		uid  int64
		want []string
	}{
		{"the user with one device", only, nil},
		{"the user with a device on the live gate", split, []string{"pad"}},
		{"the user with two devices on the dead gate", both, nil},
		{"the user whose phone moved to the live gate", moved, []string{"phone"}},
	} {
		if got := routesOf(t, ctx, rdb, c.uid); !slices.Equal(got, c.want) {
			t.Errorf("%s: routes %v, want %v", c.name, got, c.want)
		}
	}
	if n, err := rdb.Exists(ctx, rediskey.GateRoutes(dead, deadInc)).Result(); err != nil || n != 0 {
		t.Fatalf("the dead gate's set still exists (%d, %v)", n, err)
	}
	if s, err := rdb.ZScore(ctx, rediskey.GateRouteSets(), setName(dead, deadInc)).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("the dead gate's set is still registered (%v, %v)", s, err)
	}
	if _, err := rdb.ZScore(ctx, rediskey.GateRouteSets(), setName(live, liveInc)).Result(); err != nil {
		t.Fatalf("the live gate's set was dropped: %v", err)
	}

	// A second sweep finds nothing to do.
	if removed, err := sw.SweepOnce(ctx); err != nil || removed != 0 || len(ev.take()) != 0 {
		t.Fatalf("second sweep removed %d (%v): want nothing", removed, err)
	}

	// The live gate restarts under its id: its previous process's routes
	// are swept once the new one has a route, the new ones are kept.
	restarted := randomUser()
	old := on(live, liveInc)
	connect(t, ctx, rdb, idx, restarted, "phone", old)
	newcomer := randomUser()
	connect(t, ctx, rdb, idx, newcomer, "phone", on(live, liveInc+50))
	if _, err := sw.SweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	got = ev.take()
	wantEvents := []string{fmt.Sprintf("offline %d/phone", moved), fmt.Sprintf("offline %d/pad", split), fmt.Sprintf("offline %d/phone", restarted)}
	slices.Sort(wantEvents)
	if !slices.Equal(got, wantEvents) {
		t.Fatalf("after the live gate's restart, events %v, want %v", got, wantEvents)
	}
	if got := routesOf(t, ctx, rdb, newcomer); !slices.Equal(got, []string{"phone"}) {
		t.Fatalf("the restarted gate's new route was removed: %v", got)
	}
}

func TestMemberAndSetNamesRoundTrip(t *testing.T) {
	for _, c := range []struct {
		uid  int64
		dev  string
		e    route.Entry
		good bool
	}{
		{42, "phone", route.Entry{GateID: "gate-1", ConnID: 7<<32 | 3, SinceMs: 99}, true},
		{1, "a.b_c-d", route.Entry{GateID: "g", ConnID: 1, SinceMs: 1, RealIP: "203.0.113.9"}, true},
	} {
		m := member(c.uid, c.dev, c.e)
		uid, dev, e, err := parseMember(m)
		if err != nil || uid != c.uid || dev != c.dev || e.Key() != c.e.Key() {
			t.Errorf("member %q: parsed %d %q %v (%v)", m, uid, dev, e, err)
		}
	}
	for _, bad := range []string{"", "x|phone|g|1|1", "0|phone|g|1|1", "5||g|1|1", "5|phone|g|x|1", "5|phone"} {
		if _, _, _, err := parseMember(bad); err == nil {
			t.Errorf("member %q parsed", bad)
		}
	}
	g, inc, err := parseSetName(setName("gate:odd", 12))
	if err != nil || g != "gate:odd" || inc != 12 {
		t.Errorf("set name: %q %d %v", g, inc, err)
	}
	for _, bad := range []string{"", "12", "x:g", "12:", "99999999999:g"} {
		if _, _, err := parseSetName(bad); err == nil {
			t.Errorf("set name %q parsed", bad)
		}
	}
}
