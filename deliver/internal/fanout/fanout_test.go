package fanout

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sparkim/spark/deliver/internal/gateclient"
	"github.com/sparkim/spark/deliver/internal/gatetest"
	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// testDB is this package's Redis DB; other deliver packages use others so
// `go test ./...` may run them in parallel.
const testDB = 13

func TestSelectTargets(t *testing.T) {
	r := func(gate string, conn uint64) string {
		return route.Entry{GateID: gate, ConnID: conn, SinceMs: 1}.String()
	}
	type want struct {
		uid int64
		dev string
	}
	tests := []struct {
		name          string
		job           *queuev1.DeliverJob
		routes        map[int64]map[string]string
		want          []want
		wantMalformed int
	}{
		{
			name:   "sender device excluded, sender's other devices and all peer devices included",
			job:    &queuev1.DeliverJob{SenderId: 1, SenderDevice: "phone", Recipients: []int64{1, 2}},
			routes: map[int64]map[string]string{1: {"phone": r("g1", 1), "laptop": r("g2", 2)}, 2: {"a": r("g1", 3), "b": r("g2", 4)}},
			want:   []want{{1, "laptop"}, {2, "a"}, {2, "b"}},
		},
		{
			name:   "offline sender, online peer",
			job:    &queuev1.DeliverJob{SenderId: 1, SenderDevice: "phone", Recipients: []int64{1, 2}},
			routes: map[int64]map[string]string{2: {"a": r("g1", 3)}},
			want:   []want{{2, "a"}},
		},
		{
			name:   "same device id on the peer is not the sender device",
			job:    &queuev1.DeliverJob{SenderId: 1, SenderDevice: "phone", Recipients: []int64{1, 2}},
			routes: map[int64]map[string]string{1: {"phone": r("g1", 1)}, 2: {"phone": r("g1", 2)}},
			want:   []want{{2, "phone"}},
		},
		{
			name:   "self conversation listed twice yields each device once",
			job:    &queuev1.DeliverJob{SenderId: 1, SenderDevice: "phone", Recipients: []int64{1, 1}},
			routes: map[int64]map[string]string{1: {"phone": r("g1", 1), "pad": r("g1", 2)}},
			want:   []want{{1, "pad"}},
		},
		{
			name:          "malformed entries reported, never pushed",
			job:           &queuev1.DeliverJob{SenderId: 1, SenderDevice: "phone", Recipients: []int64{1, 2}},
			routes:        map[int64]map[string]string{2: {"a": "garbage", "b": r("g1", 4)}},
			want:          []want{{2, "b"}},
			wantMalformed: 1,
		},
		{
			name:   "no recipients",
			job:    &queuev1.DeliverJob{SenderId: 1, SenderDevice: "phone"},
			routes: map[int64]map[string]string{1: {"pad": r("g1", 1)}},
		},
		{
			name:   "non-recipient routes ignored",
			job:    &queuev1.DeliverJob{SenderId: 1, SenderDevice: "phone", Recipients: []int64{2}},
			routes: map[int64]map[string]string{1: {"pad": r("g1", 1)}, 3: {"x": r("g1", 9)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, malformed := SelectTargets(tt.job, tt.routes)
			var gotW []want
			for _, g := range got {
				gotW = append(gotW, want{g.UserID, g.DeviceID})
			}
			if !reflect.DeepEqual(gotW, tt.want) {
				t.Fatalf("targets = %v, want %v", gotW, tt.want)
			}
			if len(malformed) != tt.wantMalformed {
				t.Fatalf("malformed = %v, want %d", malformed, tt.wantMalformed)
			}
		})
	}
}

func TestGroupByGate(t *testing.T) {
	ts := []Target{
		{UserID: 1, DeviceID: "a", Entry: route.Entry{GateID: "g1", ConnID: 1}},
		{UserID: 2, DeviceID: "b", Entry: route.Entry{GateID: "g2", ConnID: 2}},
		{UserID: 2, DeviceID: "c", Entry: route.Entry{GateID: "g1", ConnID: 3}},
	}
	g := GroupByGate(ts)
	if len(g) != 2 || len(g["g1"]) != 2 || len(g["g2"]) != 1 {
		t.Fatalf("groups = %v", g)
	}
}

const secret = "test-secret"

func TestProcessPushesOncePerGate(t *testing.T) {
	rdb := gatetest.Redis(t, testDB)
	ctx := context.Background()
	g1 := gatetest.Start(t, rdb, "g1", secret)
	g2 := gatetest.Start(t, rdb, "g2", secret)
	g1.SetMissing(12) // user 2's "stale" device: the gate no longer has it

	routes := map[int64]map[string]string{
		1: {"phone": route.Entry{GateID: "g1", ConnID: 10, SinceMs: 1}.String(), "laptop": route.Entry{GateID: "g2", ConnID: 20, SinceMs: 1}.String()},
		2: {"a": route.Entry{GateID: "g1", ConnID: 11, SinceMs: 1}.String(), "stale": route.Entry{GateID: "g1", ConnID: 12, SinceMs: 1}.String(),
			"b": route.Entry{GateID: "g2", ConnID: 21, SinceMs: 1}.String(), "dead": route.Entry{GateID: "gdead", ConnID: 30, SinceMs: 1}.String(),
			"bad": "not-a-route"},
	}
	for uid, devs := range routes {
		for dev, v := range devs {
			if err := rdb.HSet(ctx, rediskey.Route(uid), dev, v).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}

	pool := gateclient.New(rdb, secret, time.Minute)
	t.Cleanup(func() { _ = pool.Close() })
	f := New(rdb, pool, 2*time.Second, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	data := []byte(`{"msg_id":"77","text":"hi"}`)
	job := &queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_MESSAGE, MsgId: 77, ConversationId: 5, SenderId: 1, SenderDevice: "phone",
		Recipients: []int64{1, 2}, PushData: data, EnqueuedAtMs: time.Now().UnixMilli()}
	if err := f.Process(ctx, 5, job); err != nil {
		t.Fatal(err)
	}

	p1, p2 := g1.Pushes(), g2.Pushes()
	if len(p1) != 1 || len(p2) != 1 {
		t.Fatalf("pushes g1=%d g2=%d, want one each", len(p1), len(p2))
	}
	conns := func(ps []*gatev1.PushRequest) []uint64 {
		var out []uint64
		for _, tg := range ps[0].GetTargets() {
			out = append(out, tg.GetConnId())
		}
		return out
	}
	if got := conns(p1); !reflect.DeepEqual(got, []uint64{11, 12}) {
		t.Fatalf("g1 targets %v, want [11 12] (sender's phone excluded)", got)
	}
	if got := conns(p2); !reflect.DeepEqual(got, []uint64{20, 21}) {
		t.Fatalf("g2 targets %v, want [20 21]", got)
	}
	if p1[0].GetCommand() != 6 {
		t.Fatalf("command %d, want 6", p1[0].GetCommand())
	}
	var env envelope.Response
	if err := json.Unmarshal(p1[0].GetBody(), &env); err != nil || env.Code != "0" || string(env.Data) != string(data) || len(env.RequestID) != envelope.RequestIDLen {
		t.Fatalf("body %s: %v", p1[0].GetBody(), err)
	}
	if string(p1[0].GetBody()) != string(p2[0].GetBody()) {
		t.Fatal("body must be built once per job")
	}

	left, err := rdb.HGetAll(ctx, rediskey.Route(2)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{"stale", "dead", "bad"} {
		if _, ok := left[dev]; ok {
			t.Errorf("route of %q not removed", dev)
		}
	}
	for _, dev := range []string{"a", "b"} {
		if _, ok := left[dev]; !ok {
			t.Errorf("live route of %q removed", dev)
		}
	}

	// A route replaced meanwhile (new connection) survives the removal of
	// its stale predecessor: compare-and-delete.
	newer := route.Entry{GateID: "g1", ConnID: 99, SinceMs: 2}.String()
	if err := rdb.HSet(ctx, rediskey.Route(2), "a", newer).Err(); err != nil {
		t.Fatal(err)
	}
	f.removeRoute(ctx, zap.NewNop(), Stale{UserID: 2, DeviceID: "a", Raw: routes[2]["a"]})
	if v, _ := rdb.HGet(ctx, rediskey.Route(2), "a").Result(); v != newer {
		t.Fatalf("newer route removed: %q", v)
	}

	// The done marker stops a second push of the same msg_id.
	if err := rdb.Set(ctx, rediskey.DeliverDone(5, 77), 1, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.Process(ctx, 5, job); err != nil {
		t.Fatal(err)
	}
	if n1, n2 := len(g1.Pushes()), len(g2.Pushes()); n1 != 1 || n2 != 1 {
		t.Fatalf("pushed again despite done marker: g1=%d g2=%d", n1, n2)
	}
}

func TestProcessGateUnreachable(t *testing.T) {
	rdb := gatetest.Redis(t, testDB)
	ctx := context.Background()
	// Registered, but nothing listens there: the push fails, the job still
	// completes and the route is kept (the gate may just be slow).
	if err := rdb.HSet(ctx, rediskey.Gate("gx"), "push_addr", "127.0.0.1:1").Err(); err != nil {
		t.Fatal(err)
	}
	v := route.Entry{GateID: "gx", ConnID: 1, SinceMs: 1}.String()
	if err := rdb.HSet(ctx, rediskey.Route(2), "a", v).Err(); err != nil {
		t.Fatal(err)
	}
	pool := gateclient.New(rdb, secret, time.Minute)
	t.Cleanup(func() { _ = pool.Close() })
	m := metrics.New(prometheus.NewRegistry())
	f := New(rdb, pool, 500*time.Millisecond, zap.NewNop(), m)
	start := time.Now()
	if err := f.Process(ctx, 1, &queuev1.DeliverJob{MsgId: 1, SenderId: 1, SenderDevice: "p", Recipients: []int64{1, 2}}); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("an unreachable gate must not hold the job beyond the push timeout")
	}
	if got, _ := rdb.HGet(ctx, rediskey.Route(2), "a").Result(); got != v {
		t.Fatalf("route removed on RPC error: %q", got)
	}
}
