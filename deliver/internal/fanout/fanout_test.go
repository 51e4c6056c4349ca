package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sparkim/spark/deliver/internal/gatetest"
	"github.com/sparkim/spark/deliver/internal/logicclient"
	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

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
	rdb := gatetest.Redis(t)
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

	pool := gatetest.Pool(t, rdb, secret)
	f := mustNew(t, rdb, pool, nil, 2*time.Second, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
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
	rdb := gatetest.Redis(t)
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
	pool := gatetest.Pool(t, rdb, secret)
	m := metrics.New(prometheus.NewRegistry())
	f := mustNew(t, rdb, pool, nil, 500*time.Millisecond, zap.NewNop(), m)
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

// seedState writes an existing list entry of (uid, cid) the way the cold
// path does.
func seedState(t *testing.T, rdb redis.Scripter, uid, cid int64, s dialog.State) {
	t.Helper()
	ok, err := dialog.WriteCold(context.Background(), rdb, uid, cid, "", s)
	if err != nil || !ok {
		t.Fatalf("seed state of %d/%d: %v %v", uid, cid, ok, err)
	}
}

func loadState(t *testing.T, rdb redis.Cmdable, uid, cid int64) (dialog.State, bool) {
	t.Helper()
	s, ok, err := dialog.Load(context.Background(), rdb, uid, cid)
	if err != nil {
		t.Fatal(err)
	}
	return s, ok
}

func version(t *testing.T, rdb redis.Cmdable, uid, cid int64) float64 {
	t.Helper()
	v, err := rdb.ZScore(context.Background(), dialog.ListKey(uid), strconv.FormatInt(cid, 10)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return v
}

func messageJob(msgID, cid int64, content string) *queuev1.DeliverJob {
	return &queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_MESSAGE, MsgId: msgID, ConversationId: cid, ConversationType: 1,
		SenderId: 1, SenderDevice: "phone", Recipients: []int64{1, 2}, MessageType: 1, CreatedAtMs: 1_700_000_000_000 + msgID,
		PushData: []byte(`{"msg_id":"` + strconv.FormatInt(msgID, 10) + `","conversation_id":"` + strconv.FormatInt(cid, 10) +
			`","sender_id":"1","message_type":1,"content":` + content + `,"created_at":1}`)}
}

func TestMessageUpdatesLists(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	g1 := gatetest.Start(t, rdb, "g1", secret)
	if err := rdb.HSet(ctx, rediskey.Route(2), "a", route.Entry{GateID: "g1", ConnID: 11, SinceMs: 1}.String()).Err(); err != nil {
		t.Fatal(err)
	}
	const cid = 5
	// Both users' entries exist, rebuilt from MySQL up to message 10, and
	// the peer has read up to it.
	seedState(t, rdb, 1, cid, dialog.State{Type: 1, PeerID: 2, LastMsgID: 10, LastRead: 10, Base: 10})
	seedState(t, rdb, 2, cid, dialog.State{Type: 1, PeerID: 1, LastMsgID: 10, LastRead: 10, Base: 10, Pinned: true})
	v1, v2 := version(t, rdb, 1, cid), version(t, rdb, 2, cid)

	pool := gatetest.Pool(t, rdb, secret)
	m := metrics.New(prometheus.NewRegistry())
	f := mustNew(t, rdb, pool, nil, 2*time.Second, zap.NewNop(), m)

	job := messageJob(77, cid, `{"text":"hello there"}`)
	// Processed twice without an ack in between: a redelivery (the first
	// owner crashed after its pushes) must not count twice.
	for i := 0; i < 2; i++ {
		if err := f.Process(ctx, cid, job); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(g1.Pushes()); got != 2 {
		t.Fatalf("%d pushes, want 2 (an unacknowledged job is pushed again)", got)
	}
	peer, ok := loadState(t, rdb, 2, cid)
	if !ok {
		t.Fatal("peer state dropped")
	}
	wantPreview := &dialog.Preview{MsgID: "77", MessageType: 1, Text: "hello there", SenderID: "1"}
	if peer.Unread != 1 || peer.LastMsgID != 77 || peer.LastMsgAt != job.GetCreatedAtMs() || !reflect.DeepEqual(peer.Preview, wantPreview) || !peer.Pinned {
		t.Fatalf("peer state %+v preview %+v", peer, peer.Preview)
	}
	sender, _ := loadState(t, rdb, 1, cid)
	if sender.Unread != 0 || sender.LastMsgID != 77 || !reflect.DeepEqual(sender.Preview, wantPreview) {
		t.Fatalf("sender state %+v (own message must not count)", sender)
	}
	if nv1, nv2 := version(t, rdb, 1, cid), version(t, rdb, 2, cid); nv1 <= v1 || nv2 <= v2 {
		t.Fatalf("versions %v→%v, %v→%v: the change must be visible to sync", v1, nv1, v2, nv2)
	}

	// An older message arriving later counts but does not replace the
	// newer preview; one at or below base is never applied.
	if err := f.Process(ctx, cid, messageJob(50, cid, `{"text":"older"}`)); err != nil {
		t.Fatal(err)
	}
	if err := f.Process(ctx, cid, messageJob(9, cid, `{"text":"counted by the rebuild"}`)); err != nil {
		t.Fatal(err)
	}
	peer, _ = loadState(t, rdb, 2, cid)
	if peer.Unread != 2 || peer.LastMsgID != 77 || peer.Preview.Text != "hello there" {
		t.Fatalf("peer state after older messages %+v preview %+v", peer, peer.Preview)
	}

	// Media shows a placeholder; long text is cut.
	long := strings.Repeat("é", dialog.PreviewTextLen+10)
	if err := f.Process(ctx, cid, messageJob(80, cid, `{"text":"`+long+`"}`)); err != nil {
		t.Fatal(err)
	}
	if peer, _ = loadState(t, rdb, 2, cid); peer.Preview.Text != strings.Repeat("é", dialog.PreviewTextLen) {
		t.Fatalf("long preview %q", peer.Preview.Text)
	}
	img := messageJob(81, cid, `{"url":"http://x/y.png"}`)
	img.MessageType = 2
	if err := f.Process(ctx, cid, img); err != nil {
		t.Fatal(err)
	}
	if peer, _ = loadState(t, rdb, 2, cid); peer.Preview.Text != "[image]" || peer.Preview.MessageType != 2 || peer.Unread != 4 {
		t.Fatalf("image preview %+v unread %d", peer.Preview, peer.Unread)
	}
	// Push data that is no message still updates the list.
	bad := messageJob(82, cid, `1`)
	bad.PushData = []byte(`not json`)
	if err := f.Process(ctx, cid, bad); err != nil {
		t.Fatal(err)
	}
	if peer, _ = loadState(t, rdb, 2, cid); peer.Unread != 5 || peer.LastMsgID != 82 {
		t.Fatalf("state after undecodable push data %+v", peer)
	}
	// A job carrying logic's preview is stored as it is: its push data is
	// not read (here it could not be).
	carried := messageJob(83, cid, `1`)
	carried.PushData = []byte(`not json`)
	carried.Preview, _ = dialog.EncodePreview(dialog.Preview{MsgID: "83", MessageType: 1, Text: "from logic", SenderID: "1"})
	if err := f.Process(ctx, cid, carried); err != nil {
		t.Fatal(err)
	}
	if peer, _ = loadState(t, rdb, 2, cid); peer.Unread != 6 || peer.LastMsgID != 83 || peer.Preview.Text != "from logic" {
		t.Fatalf("state after a job with its preview %+v preview %+v", peer, peer.Preview)
	}

	// A completed job (done marker) is skipped entirely: no list change.
	if err := rdb.Set(ctx, rediskey.DeliverDone(cid, 90), 1, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	before := version(t, rdb, 2, cid)
	if err := f.Process(ctx, cid, messageJob(90, cid, `{"text":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if peer, _ = loadState(t, rdb, 2, cid); peer.Unread != 6 || version(t, rdb, 2, cid) != before {
		t.Fatalf("done job changed the list: %+v", peer)
	}
}

func TestMessageAbsentStateOnlyBumpsVersion(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	pool := gatetest.Pool(t, rdb, secret)
	f := mustNew(t, rdb, pool, nil, 2*time.Second, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	const cid = 6
	seedState(t, rdb, 1, cid+100, dialog.State{Type: 1, PeerID: 3}) // another conversation
	ver0, _ := rdb.Get(ctx, dialog.VersionKey(1)).Int64()
	if err := f.Process(ctx, cid, messageJob(5, cid, `{"text":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []int64{1, 2} {
		if _, ok := loadState(t, rdb, uid, cid); ok {
			t.Fatalf("user %d: an absent state was created (only the cold path builds it)", uid)
		}
		if version(t, rdb, uid, cid) == 0 {
			t.Fatalf("user %d: conversation not marked changed", uid)
		}
	}
	if ver1, _ := rdb.Get(ctx, dialog.VersionKey(1)).Int64(); ver1 != ver0+1 {
		t.Fatalf("version counter %d → %d, want one bump", ver0, ver1)
	}
}

func TestSignalPushesCommandOnly(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	g1 := gatetest.Start(t, rdb, "g1", secret)
	for uid, devs := range map[int64]map[string]uint64{1: {"phone": 1, "pad": 2}, 2: {"a": 3}} {
		for dev, conn := range devs {
			if err := rdb.HSet(ctx, rediskey.Route(uid), dev, route.Entry{GateID: "g1", ConnID: conn, SinceMs: 1}.String()).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	const cid = 7
	seedState(t, rdb, 1, cid, dialog.State{Type: 1, PeerID: 2, LastMsgID: 10, Base: 10})
	ver0, _ := rdb.Get(ctx, dialog.VersionKey(1)).Int64()
	// The message the signal is about was delivered: its done marker must
	// not suppress the signal.
	if err := rdb.Set(ctx, rediskey.DeliverDone(cid, 10), 1, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	pool := gatetest.Pool(t, rdb, secret)
	lg := gatetest.StartLogic(t, secret)
	lc, err := logicclient.New([]string{lg.Addr}, secret, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	g1.SetDropped(3)
	f := mustNew(t, rdb, pool, lc, 2*time.Second, zap.NewNop(), metrics.New(prometheus.NewRegistry()))

	tests := []struct {
		name       string
		command    uint32
		recipients []int64
		want       []uint64
	}{
		{"read goes to the reader's other devices", 8, []int64{1}, []uint64{2}},
		{"recall goes to every participant but the recalling device", 9, []int64{1, 2}, []uint64{2, 3}},
		{"delete", 15, []int64{1}, []uint64{2}},
		{"settings", 16, []int64{1}, []uint64{2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(g1.Pushes())
			data := []byte(`{"conversation_id":"7","msg_id":"10"}`)
			job := &queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_SIGNAL, Command: tt.command, MsgId: 10, ConversationId: cid,
				SenderId: 1, SenderDevice: "phone", Recipients: tt.recipients, PushData: data}
			if err := f.Process(ctx, cid, job); err != nil {
				t.Fatal(err)
			}
			ps := g1.Pushes()
			if len(ps) != n+1 {
				t.Fatalf("%d pushes, want 1", len(ps)-n)
			}
			p := ps[n]
			var conns []uint64
			for _, tg := range p.GetTargets() {
				conns = append(conns, tg.GetConnId())
			}
			if p.GetCommand() != tt.command || !reflect.DeepEqual(conns, tt.want) {
				t.Fatalf("push command %d targets %v, want %d %v", p.GetCommand(), conns, tt.command, tt.want)
			}
			var env envelope.Response
			if err := json.Unmarshal(p.GetBody(), &env); err != nil || env.Code != "0" || string(env.Data) != string(data) {
				t.Fatalf("body %s: %v", p.GetBody(), err)
			}
		})
	}
	if ver1, _ := rdb.Get(ctx, dialog.VersionKey(1)).Int64(); ver1 != ver0 {
		t.Fatalf("signals changed the list version %d → %d", ver0, ver1)
	}
	if s, _ := loadState(t, rdb, 1, cid); s.LastMsgID != 10 || s.Unread != 0 {
		t.Fatalf("signals changed the state %+v", s)
	}
	if calls := lg.Calls(); len(calls) != 0 {
		t.Fatalf("a dropped signal wrote %d mailbox calls; only messages do", len(calls))
	}

	// A signal without a command and an unknown kind are dropped unpushed.
	n := len(g1.Pushes())
	for _, job := range []*queuev1.DeliverJob{
		{Kind: queuev1.JobKind_JOB_KIND_SIGNAL, MsgId: 10, ConversationId: cid, SenderId: 2, Recipients: []int64{1}},
		{Kind: queuev1.JobKind(42), Command: 8, MsgId: 11, ConversationId: cid, SenderId: 2, Recipients: []int64{1}},
	} {
		if err := f.Process(ctx, cid, job); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(g1.Pushes()); got != n {
		t.Fatalf("%d pushes of invalid jobs", got-n)
	}
}

func TestMissedPushesGoToMailbox(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	g1 := gatetest.Start(t, rdb, "g1", secret)
	g2 := gatetest.Start(t, rdb, "g2", secret)
	g1.SetDropped(11) // user 2's "a": outbound queue full
	g1.SetMissing(12) // user 2's "gone": offline
	g2.SetFail(true)  // user 1's "pad" and user 2's "b": RPC fails
	for uid, devs := range map[int64]map[string]route.Entry{
		1: {"phone": {GateID: "g1", ConnID: 10}, "pad": {GateID: "g2", ConnID: 20}},
		2: {"a": {GateID: "g1", ConnID: 11}, "gone": {GateID: "g1", ConnID: 12}, "ok": {GateID: "g1", ConnID: 13},
			"b": {GateID: "g2", ConnID: 21}, "dead": {GateID: "gdead", ConnID: 30}},
	} {
		for dev, e := range devs {
			e.SinceMs = 1
			if err := rdb.HSet(ctx, rediskey.Route(uid), dev, e.String()).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	pool := gatetest.Pool(t, rdb, secret)
	lg := gatetest.StartLogic(t, secret)
	// The first logic refuses connections: the call moves on to the next.
	lc, err := logicclient.New([]string{"127.0.0.1:1", lg.Addr}, secret, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	m := metrics.New(prometheus.NewRegistry())
	f := mustNew(t, rdb, pool, lc, time.Second, zap.NewNop(), m)

	const cid, mid = 8, 123
	if err := f.Process(ctx, cid, messageJob(mid, cid, `{"text":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	calls := lg.Calls()
	if len(calls) != 1 {
		t.Fatalf("%d AppendMailbox calls, want one batch per job", len(calls))
	}
	type ev struct {
		uid int64
		dev string
	}
	var got []ev
	for _, e := range calls[0].GetEvents() {
		got = append(got, ev{e.GetUserId(), e.GetDeviceId()})
		if e.GetEventType() != MailboxMissedMessage || e.GetConversationId() != cid || e.GetMsgId() != mid ||
			string(e.GetPayload()) != `{"conversation_id":"8","msg_id":"123"}` {
			t.Fatalf("event %v", e)
		}
	}
	sort.Slice(got, func(i, j int) bool {
		if got[i].uid != got[j].uid {
			return got[i].uid < got[j].uid
		}
		return got[i].dev < got[j].dev
	})
	// Offline devices (missing, dead gate, no route) and delivered ones get
	// nothing; the sending device is never a target.
	if want := []ev{{1, "pad"}, {2, "a"}, {2, "b"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("mailbox events for %v, want %v", got, want)
	}
	if v := testutil.ToFloat64(m.MailboxEvents.WithLabelValues(metrics.MailboxAppended)); v != 3 {
		t.Fatalf("appended metric %v", v)
	}

	// Logic unreachable: the job still completes in bounded time, and the
	// next job does not wait for logic again right away.
	lg.SetFail(true)
	for i, id := range []int64{mid + 1, mid + 2} {
		start := time.Now()
		if err := f.Process(ctx, cid, messageJob(id, cid, `{"text":"hi"}`)); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("job %d took %v with logic down", i, d)
		}
	}
	if n := len(lg.Calls()); n != 2 {
		t.Fatalf("%d calls, want 2 (one failed, then paused)", n)
	}
	if v := testutil.ToFloat64(m.MailboxEvents.WithLabelValues(metrics.MailboxFailed)); v != 3 {
		t.Fatalf("failed metric %v", v)
	}
	if v := testutil.ToFloat64(m.MailboxEvents.WithLabelValues(metrics.MailboxSkipped)); v != 3 {
		t.Fatalf("skipped metric %v", v)
	}
}

// pushedIDs returns the msg_id of every item's push data, in item order.
func pushedIDs(t *testing.T, items []*gatev1.PushRequest) (ids []int64, convs []int64) {
	t.Helper()
	for _, it := range items {
		var env envelope.Response
		var d struct {
			MsgID          string `json:"msg_id"`
			ConversationID string `json:"conversation_id"`
		}
		if err := json.Unmarshal(it.GetBody(), &env); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(env.Data, &d); err != nil {
			t.Fatal(err)
		}
		id, _ := strconv.ParseInt(d.MsgID, 10, 64)
		cid, _ := strconv.ParseInt(d.ConversationID, 10, 64)
		ids, convs = append(ids, id), append(convs, cid)
	}
	return ids, convs
}

func TestBatchOnePushBatchPerGateInStreamOrder(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	g1 := gatetest.Start(t, rdb, "g1", secret)
	g2 := gatetest.Start(t, rdb, "g2", secret)
	// Conversation c (1..3) is between user 1 and user c+1. User 1 sends
	// from "phone" and also has "laptop"; every peer has a device per gate.
	set := func(uid int64, dev, gate string, conn uint64) {
		if err := rdb.HSet(ctx, rediskey.Route(uid), dev, route.Entry{GateID: gate, ConnID: conn, SinceMs: 1}.String()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	set(1, "phone", "g1", 10)
	set(1, "laptop", "g2", 20)
	for uid := int64(2); uid <= 4; uid++ {
		set(uid, "a", "g1", uint64(100+uid))
		set(uid, "b", "g2", uint64(200+uid))
		seedState(t, rdb, uid, uid-1, dialog.State{Type: 1, PeerID: 1, Base: 1})
	}
	pool := gatetest.Pool(t, rdb, secret)
	f := mustNew(t, rdb, pool, nil, 2*time.Second, zap.NewNop(), metrics.New(prometheus.NewRegistry()))

	var jobs []*queuev1.DeliverJob
	perConv := map[int64]int{}
	for i := range 20 {
		cid := int64(i%3) + 1
		j := messageJob(int64(100+i), cid, `{"text":"m"}`)
		j.Recipients = []int64{1, cid + 1}
		jobs = append(jobs, j)
		perConv[cid]++
	}
	// A client retry enqueued job 105 again within the batch: pushed once.
	jobs = append(jobs, jobs[5])
	if err := f.ProcessBatch(ctx, 0, jobs); err != nil {
		t.Fatal(err)
	}
	for _, g := range []*gatetest.Gate{g1, g2} {
		bs := g.Batches()
		if len(bs) != 1 {
			t.Fatalf("gate %s: %d PushBatch calls, want 1", g.ID, len(bs))
		}
		ids, convs := pushedIDs(t, bs[0].GetItems())
		if len(ids) != 20 {
			t.Fatalf("gate %s: %d items, want 20 (one per job, the duplicate skipped)", g.ID, len(ids))
		}
		if !sort.SliceIsSorted(ids, func(a, b int) bool { return ids[a] < ids[b] }) {
			t.Fatalf("gate %s: items %v not in stream order", g.ID, ids)
		}
		// Per device, each conversation's pushes arrive in MsgId order.
		last := map[uint64]int64{}
		for k, it := range bs[0].GetItems() {
			for _, tg := range it.GetTargets() {
				if tg.GetUserId() != 1 && tg.GetUserId() != convs[k]+1 {
					t.Fatalf("item %d (conversation %d) targets user %d", k, convs[k], tg.GetUserId())
				}
				if tg.GetConnId() == 10 {
					t.Fatal("the sending device was pushed")
				}
				if ids[k] <= last[tg.GetConnId()] {
					t.Fatalf("conn %d got %d after %d", tg.GetConnId(), ids[k], last[tg.GetConnId()])
				}
				last[tg.GetConnId()] = ids[k]
			}
		}
	}
	unread := func() map[int64]int64 {
		out := map[int64]int64{}
		for uid := int64(2); uid <= 4; uid++ {
			s, _ := loadState(t, rdb, uid, uid-1)
			out[uid-1] = s.Unread
		}
		return out
	}
	want := map[int64]int64{1: int64(perConv[1]), 2: int64(perConv[2]), 3: int64(perConv[3])}
	if got := unread(); !reflect.DeepEqual(got, want) {
		t.Fatalf("unread %v, want %v", got, want)
	}

	// The batch redelivered before its ack (no done markers): pushed again,
	// counted once.
	if err := f.ProcessBatch(ctx, 0, jobs); err != nil {
		t.Fatal(err)
	}
	if got := unread(); !reflect.DeepEqual(got, want) {
		t.Fatalf("unread after redelivery %v, want %v", got, want)
	}
	if n1, n2 := len(g1.Batches()), len(g2.Batches()); n1 != 2 || n2 != 2 {
		t.Fatalf("PushBatch calls after redelivery g1=%d g2=%d, want 2 each", n1, n2)
	}

	// With done markers for every job but one, only that one goes out.
	for _, j := range jobs[:19] {
		if err := rdb.Set(ctx, rediskey.DeliverDone(0, j.GetMsgId()), 1, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.ProcessBatch(ctx, 0, jobs); err != nil {
		t.Fatal(err)
	}
	bs := g1.Batches()
	if ids, _ := pushedIDs(t, bs[len(bs)-1].GetItems()); !reflect.DeepEqual(ids, []int64{119}) {
		t.Fatalf("pushed %v, want only the job without a done marker", ids)
	}
}

func TestBatchListsAfterScriptFlush(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	pool := gatetest.Pool(t, rdb, secret)
	f := mustNew(t, rdb, pool, nil, 2*time.Second, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	const cid = 9
	seedState(t, rdb, 2, cid, dialog.State{Type: 1, PeerID: 1, Base: 1})
	// Redis forgot its scripts (restart): the pipelined EVALSHAs fail with
	// NOSCRIPT and the batch still applies each message once.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.ProcessBatch(ctx, cid, []*queuev1.DeliverJob{messageJob(10, cid, `{"text":"a"}`), messageJob(11, cid, `{"text":"b"}`)}); err != nil {
		t.Fatal(err)
	}
	if s, _ := loadState(t, rdb, 2, cid); s.Unread != 2 || s.LastMsgID != 11 || s.Preview.Text != "b" {
		t.Fatalf("state after NOSCRIPT %+v", s)
	}
}

// A batch of more jobs of one conversation than any fixed window of
// applied ids, processed, then redelivered whole (its owner died before the
// ack) and redelivered again interleaved with new jobs: every message
// counts once.
func TestRedeliveredBatchCountsUnreadOnce(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	pool := gatetest.Pool(t, rdb, secret)
	f := mustNew(t, rdb, pool, nil, 2*time.Second, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	const cid = 12
	seedState(t, rdb, 2, cid, dialog.State{Type: 1, PeerID: 1, LastMsgID: 100, LastRead: 100, Base: 100})
	seedState(t, rdb, 1, cid, dialog.State{Type: 1, PeerID: 2, LastMsgID: 100, LastRead: 100, Base: 100})
	const n = 150 // more than one batch of 64 and the old window of 32
	jobs := make([]*queuev1.DeliverJob, n)
	for i := range jobs {
		jobs[i] = messageJob(int64(101+i), cid, `{"text":"m"}`)
	}
	for round := 0; round < 2; round++ {
		for lo := 0; lo < n; lo += 64 {
			if err := f.ProcessBatch(ctx, cid, jobs[lo:min(lo+64, n)]); err != nil {
				t.Fatal(err)
			}
		}
		if s, _ := loadState(t, rdb, 2, cid); s.Unread != n || s.LastMsgID != 100+n {
			t.Fatalf("round %d: peer unread %d last %d, want %d and %d", round, s.Unread, s.LastMsgID, n, 100+n)
		}
	}
	// Redelivered again, in reverse order and interleaved with new jobs.
	mixed := []*queuev1.DeliverJob{messageJob(300, cid, `{"text":"new"}`)}
	for i := n - 1; i >= 0; i -= 2 {
		mixed = append(mixed, jobs[i])
	}
	mixed = append(mixed, messageJob(301, cid, `{"text":"newest"}`))
	if err := f.ProcessBatch(ctx, cid, mixed); err != nil {
		t.Fatal(err)
	}
	if s, _ := loadState(t, rdb, 2, cid); s.Unread != n+2 || s.LastMsgID != 301 || s.Preview.Text != "newest" {
		t.Fatalf("after the mixed batch: peer %+v, want unread %d", s, n+2)
	}
	if s, _ := loadState(t, rdb, 1, cid); s.Unread != 0 || s.LastMsgID != 301 {
		t.Fatalf("the sender's own messages counted: %+v", s)
	}
}

// A muted conversation counts no unread (decision 30) but still moves its
// newest message and preview.
func TestMutedConversationCountsNoUnread(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	pool := gatetest.Pool(t, rdb, secret)
	f := mustNew(t, rdb, pool, nil, 2*time.Second, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	const cid = 13
	seedState(t, rdb, 2, cid, dialog.State{Type: 1, PeerID: 1, LastMsgID: 10, LastRead: 10, Base: 10, Muted: true})
	if err := f.ProcessBatch(ctx, cid, []*queuev1.DeliverJob{messageJob(11, cid, `{"text":"a"}`), messageJob(12, cid, `{"text":"b"}`)}); err != nil {
		t.Fatal(err)
	}
	if s, _ := loadState(t, rdb, 2, cid); s.Unread != 0 || s.LastMsgID != 12 || s.Preview.Text != "b" || !s.Muted {
		t.Fatalf("muted state %+v", s)
	}
}

// groupMembers is a member source for tests: the members of every group
// conversation, or err.
type groupMembers struct {
	ids   []int64
	err   error
	calls []int64 // member_versions asked for
}

func (g *groupMembers) Members(_ context.Context, _ int64, minVersion int64) ([]int64, error) {
	g.calls = append(g.calls, minVersion)
	return g.ids, g.err
}

// A group job carries no recipients: deliver expands them from the member
// source at the job's member_version, pushes to every member's devices but
// the sending one, and counts unread for everyone but the sender (nobody
// for a no_unread message). A group that is gone drops the job; a member
// list that cannot be read fails the batch, to be retried.
func TestGroupJobExpandsMembers(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	g1 := gatetest.Start(t, rdb, "g1", secret)
	for uid, conn := range map[int64]uint64{31: 1, 32: 2, 33: 3} {
		if err := rdb.HSet(ctx, rediskey.Route(uid), "d", route.Entry{GateID: "g1", ConnID: conn, SinceMs: 1}.String()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const cid = 40
	for _, uid := range []int64{31, 32, 33} {
		seedState(t, rdb, uid, cid, dialog.State{Type: 2, GroupID: 4, LastMsgID: 10, Base: 10})
	}
	pool := gatetest.Pool(t, rdb, secret)
	f := mustNew(t, rdb, pool, nil, 2*time.Second, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	src := &groupMembers{ids: []int64{31, 32, 33}}
	f.SetMembers(src)
	groupJob := func(msgID int64, noUnread bool) *queuev1.DeliverJob {
		j := messageJob(msgID, cid, `{"text":"to the group"}`)
		j.ConversationType, j.Recipients, j.SenderId, j.SenderDevice, j.MemberVersion, j.NoUnread = 2, nil, 31, "d", 7, noUnread
		return j
	}
	if err := f.ProcessBatch(ctx, cid, []*queuev1.DeliverJob{groupJob(11, false), groupJob(12, true)}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(src.calls) != "[7 7]" {
		t.Fatalf("member source asked for versions %v, want [7 7]", src.calls)
	}
	var conns []uint64
	for _, p := range g1.Pushes() {
		for _, tg := range p.GetTargets() {
			conns = append(conns, tg.GetConnId())
		}
	}
	sort.Slice(conns, func(i, j int) bool { return conns[i] < conns[j] })
	if fmt.Sprint(conns) != "[2 2 3 3]" {
		t.Fatalf("pushed to connections %v, want members 32 and 33 twice each (never the sending device)", conns)
	}
	for uid, want := range map[int64]int64{31: 0, 32: 1, 33: 1} {
		if s, _ := loadState(t, rdb, uid, cid); s.Unread != want || s.LastMsgID != 12 {
			t.Fatalf("member %d: unread %d last %d, want unread %d (the no_unread message never counts)", uid, s.Unread, s.LastMsgID, want)
		}
	}

	src.err = status.Error(codes.NotFound, "no group")
	if err := f.Process(ctx, cid, groupJob(13, false)); err != nil {
		t.Fatalf("a job of a group that is gone must be dropped, not retried: %v", err)
	}
	src.err = status.Error(codes.Unavailable, "logic down")
	if err := f.Process(ctx, cid, groupJob(14, false)); err == nil {
		t.Fatal("a member list that cannot be read must fail the batch")
	}
	if s, _ := loadState(t, rdb, 32, cid); s.LastMsgID != 12 {
		t.Fatalf("a dropped or failed job changed the list: %+v", s)
	}
}

// A group recall's SIGNAL job asks for member work: every member's list
// entry is invalidated and every member gets the RECALL mailbox event
// (every device) before the pushes, which reach every member's devices but
// the recalling one. A mailbox that fails fails the batch, to be retried.
func TestGroupRecallDoesMemberWork(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	g1 := gatetest.Start(t, rdb, "g1", secret)
	for uid, conn := range map[int64]uint64{31: 1, 32: 2, 33: 3} {
		if err := rdb.HSet(ctx, rediskey.Route(uid), "d", route.Entry{GateID: "g1", ConnID: conn, SinceMs: 1}.String()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const cid = 41
	for _, uid := range []int64{31, 32, 33} {
		seedState(t, rdb, uid, cid, dialog.State{Type: 2, GroupID: 4, LastMsgID: 10, Base: 10})
	}
	lg := gatetest.StartLogic(t, secret)
	lc, err := logicclient.New([]string{lg.Addr}, secret, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	pool := gatetest.Pool(t, rdb, secret)
	f := mustNew(t, rdb, pool, lc, 2*time.Second, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	f.SetMembers(&groupMembers{ids: []int64{31, 32, 33}})
	recall := func() *queuev1.DeliverJob {
		return &queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_SIGNAL, Command: 9, MsgId: 10, ConversationId: cid, ConversationType: 2,
			SenderId: 31, SenderDevice: "d", PushData: []byte(`{"msg_id":"10","conversation_id":"41"}`), MailboxEventType: 1}
	}

	lg.SetFail(true)
	if err := f.Process(ctx, cid, recall()); err == nil {
		t.Fatal("a recall whose events could not be recorded must fail the batch")
	}
	if n := len(g1.Pushes()); n != 0 {
		t.Fatalf("%d pushes before the events were recorded", n)
	}
	lg.SetFail(false)
	if err := f.Process(ctx, cid, recall()); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []int64{31, 32, 33} {
		if _, ok := loadState(t, rdb, uid, cid); ok {
			t.Fatalf("member %d's list entry survived the recall", uid)
		}
	}
	calls := lg.Calls()
	last := calls[len(calls)-1]
	var got []string
	for _, e := range last.GetEvents() {
		if e.GetEventType() != 1 || e.GetDeviceId() != "" || e.GetConversationId() != cid || e.GetMsgId() != 10 || string(e.GetPayload()) != `{"msg_id":"10","conversation_id":"41"}` {
			t.Fatalf("event %+v", e)
		}
		got = append(got, fmt.Sprint(e.GetUserId()))
	}
	if fmt.Sprint(got) != "[31 32 33]" {
		t.Fatalf("RECALL events for %v, want every member", got)
	}
	var conns []uint64
	for _, p := range g1.Pushes() {
		if p.GetCommand() != 9 {
			t.Fatalf("pushed command %d", p.GetCommand())
		}
		for _, tg := range p.GetTargets() {
			conns = append(conns, tg.GetConnId())
		}
	}
	if fmt.Sprint(conns) != "[2 3]" {
		t.Fatalf("recall pushed to connections %v, want [2 3]", conns)
	}
}

// A group reaction's SIGNAL job asks for the members' events but keeps
// their list entries (keep_lists): a reaction shows in no preview, and a
// 10,000-member group's lists must not all be recomputed for one.
func TestGroupReactionKeepsListsAndRecordsEvents(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	gatetest.Start(t, rdb, "g1", secret)
	const cid = 42
	for _, uid := range []int64{31, 32} {
		seedState(t, rdb, uid, cid, dialog.State{Type: 2, GroupID: 4, LastMsgID: 10, Base: 10})
	}
	lg := gatetest.StartLogic(t, secret)
	lc, err := logicclient.New([]string{lg.Addr}, secret, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	f := mustNew(t, rdb, gatetest.Pool(t, rdb, secret), lc, 2*time.Second, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	f.SetMembers(&groupMembers{ids: []int64{31, 32}})
	payload := `{"msg_id":"10","conversation_id":"42","user_id":"31","emoji":"👍","added":true,"count":1}`
	if err := f.Process(ctx, cid, &queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_SIGNAL, Command: 25, MsgId: 10, ConversationId: cid,
		ConversationType: 2, SenderId: 31, SenderDevice: "d", PushData: []byte(payload), MailboxEventType: 8, KeepLists: true}); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []int64{31, 32} {
		if s, ok := loadState(t, rdb, uid, cid); !ok || s.LastMsgID != 10 {
			t.Fatalf("member %d's list entry changed by a reaction: %+v %v", uid, s, ok)
		}
	}
	calls := lg.Calls()
	if len(calls) == 0 {
		t.Fatal("no mailbox events recorded")
	}
	var got []int64
	for _, e := range calls[len(calls)-1].GetEvents() {
		if e.GetEventType() != 8 || string(e.GetPayload()) != payload {
			t.Fatalf("event %+v", e)
		}
		got = append(got, e.GetUserId())
	}
	if fmt.Sprint(got) != "[31 32]" {
		t.Fatalf("REACTION events for %v, want every member", got)
	}
}

// mustNew is New for a test, which fails on an error.
func mustNew(t testing.TB, rdb redis.Cmdable, gates Gates, mailbox Mailbox, pushTimeout time.Duration, log *zap.Logger, m *metrics.Metrics) *Fanout {
	t.Helper()
	f, err := New(rdb, gates, mailbox, pushTimeout, log, m)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
