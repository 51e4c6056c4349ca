package service

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/sparkim/spark/deliver/internal/consumer"
	"github.com/sparkim/spark/deliver/internal/fanout"
	"github.com/sparkim/spark/deliver/internal/gateclient"
	"github.com/sparkim/spark/deliver/internal/gatetest"
	"github.com/sparkim/spark/deliver/internal/logicclient"
	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

const (
	partitions = 16
	leaseTTL   = 900 * time.Millisecond
	secret     = "test-secret"
)

// recorder is a Processor that remembers the msg ids it saw per partition.
type recorder struct {
	mu   sync.Mutex
	seen map[int][]int64
}

func newRecorder() *recorder { return &recorder{seen: map[int][]int64{}} }

func (r *recorder) Process(_ context.Context, p int, job *queuev1.DeliverJob) error {
	r.mu.Lock()
	r.seen[p] = append(r.seen[p], job.GetMsgId())
	r.mu.Unlock()
	return nil
}

// missing returns the ids of want the recorder never saw, sorted.
func (r *recorder) missing(want map[int64]bool) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[int64]bool{}
	for _, ids := range r.seen {
		for _, id := range ids {
			seen[id] = true
		}
	}
	var out []int64
	for id := range want {
		if !seen[id] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// extra returns the ids the recorder saw that are not in want, sorted.
func (r *recorder) extra(want map[int64]bool) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int64
	for _, ids := range r.seen {
		for _, id := range ids {
			if !want[id] && !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	return out
}

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.seen {
		n += len(s)
	}
	return n
}

type instance struct {
	t      *testing.T
	svc    *Service
	cancel context.CancelFunc
	done   chan struct{}
}

func start(t *testing.T, rdb redis.UniversalClient, id string, proc fanoutProcessor) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).With(zap.String("deliver_id", id))
	cfg := ConfigFrom(config.Default())
	cfg.ID, cfg.Partitions, cfg.BatchSize, cfg.LeaseTTL, cfg.Block, cfg.Drain = id, partitions, 8, leaseTTL, 200*time.Millisecond, time.Second
	svc, err := New(rdb, cfg, proc, log, metrics.New(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{t: t, svc: svc, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(in.done)
		_ = svc.Run(ctx)
	}()
	t.Cleanup(in.stop)
	return in
}

type fanoutProcessor interface {
	Process(ctx context.Context, p int, job *queuev1.DeliverJob) error
}

// stop cancels the instance and waits for Run to return, within a bound:
// a Run that ignores its context would otherwise hang the whole test
// binary until go test's global timeout.
func (in *instance) stop() {
	in.cancel()
	const within = 10 * time.Second
	select {
	case <-in.done:
	case <-time.After(within):
		in.t.Errorf("deliver instance did not return from Run within %v of its context's end", within)
	}
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func enqueue(t *testing.T, rdb redis.UniversalClient, conv, msgID int64, data string) {
	t.Helper()
	job := &queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_MESSAGE, MsgId: msgID, ConversationId: conv, ConversationType: 1,
		SenderId: 1, SenderDevice: "phone", Recipients: []int64{1, 2}, MessageType: 1, PushData: []byte(data),
		EnqueuedAtMs: time.Now().UnixMilli()}
	if _, err := queue.Enqueue(context.Background(), rdb, partitions, job); err != nil {
		t.Fatal(err)
	}
}

// convIn returns the smallest conversation id above 0 whose jobs go to
// partition p.
func convIn(p int) int64 {
	for conv := int64(1); ; conv++ {
		if rediskey.Partition(conv, partitions) == p {
			return conv
		}
	}
}

// convPerPartition returns one conversation id per partition, in
// partition order, so a job on each uses every stream.
func convPerPartition() []int64 {
	convs := make([]int64, partitions)
	for p := range convs {
		convs[p] = convIn(p)
	}
	return convs
}

func pending(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	var n int64
	for p := range partitions {
		res, err := rdb.XPending(context.Background(), rediskey.Deliver(p), rediskey.DeliverGroup).Result()
		if err != nil {
			t.Fatal(err)
		}
		n += res.Count
	}
	return n
}

// startRoutedGates starts gates g1 and g2 and routes user 1's phone to g1
// and pad to g2, user 2's "a" to g1 and "gone" to a connection g1 reports
// missing (a stale route).
func startRoutedGates(t *testing.T, ctx context.Context, rdb redis.Cmdable) (*gatetest.Gate, *gatetest.Gate) {
	t.Helper()
	g1 := gatetest.Start(t, rdb, "g1", secret)
	g2 := gatetest.Start(t, rdb, "g2", secret)
	for uid, devs := range map[int64]map[string]route.Entry{
		1: {"phone": {GateID: "g1", ConnID: 1, SinceMs: 1}, "pad": {GateID: "g2", ConnID: 2, SinceMs: 1}},
		2: {"a": {GateID: "g1", ConnID: 3, SinceMs: 1}, "gone": {GateID: "g1", ConnID: 4, SinceMs: 1}},
	} {
		for dev, e := range devs {
			if err := rdb.HSet(ctx, rediskey.Route(uid), dev, e.String()).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	g1.SetMissing(4)
	return g1, g2
}

func TestFanOutThroughQueue(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	g1, g2 := startRoutedGates(t, ctx, rdb)

	pool := gatetest.Pool(t, rdb, secret)
	m := metrics.New(prometheus.NewRegistry())
	fo, err := fanout.New(rdb, pool, nil, 2*time.Second, zap.NewNop(), m)
	if err != nil {
		t.Fatal(err)
	}

	// Jobs enqueued before deliver starts are kept (group created from 0).
	const n = 20
	conv := convIn(0)
	for i := int64(1); i <= n/2; i++ {
		enqueue(t, rdb, conv, i, fmt.Sprintf(`{"msg_id":"%d"}`, i))
	}
	// An entry nobody can decode never blocks the partition.
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: rediskey.Deliver(0), Values: []any{queue.Field, "\xff\xff garbage"}}).Err(); err != nil {
		t.Fatal(err)
	}
	in := start(t, rdb, "d1", fo)
	for i := int64(n/2 + 1); i <= n; i++ {
		enqueue(t, rdb, conv, i, fmt.Sprintf(`{"msg_id":"%d"}`, i))
	}

	p1 := g1.WaitPushes(n, 10*time.Second)
	p2 := g2.WaitPushes(n, 10*time.Second)
	if len(p1) != n || len(p2) != n {
		t.Fatalf("pushes g1=%d g2=%d, want %d each (one per gate per job)", len(p1), len(p2), n)
	}
	var order []int64
	for _, p := range p1 {
		var env struct {
			Data struct {
				MsgID json.Number `json:"msg_id"`
			} `json:"data"`
		}
		if err := json.Unmarshal(p.GetBody(), &env); err != nil {
			t.Fatal(err)
		}
		id, _ := env.Data.MsgID.Int64()
		order = append(order, id)
	}
	if !slices.IsSorted(order) {
		t.Fatalf("pushes out of stream order: %v", order)
	}
	// The first push found "gone" missing; later jobs no longer target it.
	if got := len(p1[len(p1)-1].GetTargets()); got != 1 {
		t.Fatalf("last g1 push has %d targets, want 1 (stale route removed)", got)
	}
	if ok, _ := rdb.HExists(ctx, rediskey.Route(2), "gone").Result(); ok {
		t.Fatal("missing target's route not removed")
	}

	// A second job for an already delivered msg_id (a client retry of a
	// committed send) is acknowledged without a push.
	enqueue(t, rdb, conv, 5, `{"msg_id":"5"}`)
	eventually(t, 5*time.Second, "queue drained", func() bool {
		l, _ := rdb.XLen(ctx, rediskey.Deliver(0)).Result()
		return l == 0 && pending(t, rdb) == 0
	})
	time.Sleep(100 * time.Millisecond)
	if got := len(g1.Pushes()); got != n {
		t.Fatalf("g1 got %d pushes, want %d: duplicate msg_id pushed again", got, n)
	}
	if ttl, _ := rdb.TTL(ctx, rediskey.DeliverDone(0, 5)).Result(); ttl <= 0 {
		t.Fatalf("done marker TTL %v", ttl)
	}
	in.stop()
}

func TestFairShareAndGracefulHandOver(t *testing.T) {
	rdb := gatetest.Redis(t)
	ra, rb := newRecorder(), newRecorder()
	a := start(t, rdb, "a", ra)
	b := start(t, rdb, "b", rb)
	eventually(t, 10*time.Second, "8 partitions each", func() bool {
		oa, ob := a.svc.Owned(), b.svc.Owned()
		return len(oa) == 8 && len(ob) == 8
	})
	oa, ob := a.svc.Owned(), b.svc.Owned()
	for _, p := range oa {
		if slices.Contains(ob, p) {
			t.Fatalf("partition %d owned twice: a=%v b=%v", p, oa, ob)
		}
	}
	for _, conv := range convPerPartition() {
		enqueue(t, rdb, conv, 100+conv, `{}`)
	}
	eventually(t, 5*time.Second, "jobs processed by both", func() bool { return ra.total()+rb.total() == partitions })

	a.stop()
	eventually(t, 5*time.Second, "b owns all partitions", func() bool { return len(b.svc.Owned()) == partitions })
	for _, conv := range convPerPartition() {
		enqueue(t, rdb, conv, 200+conv, `{}`)
	}
	eventually(t, 5*time.Second, "b processes every partition", func() bool { return rb.total() == len(ob)+partitions })
	if ra.total() != len(oa) {
		t.Fatalf("stopped instance processed %d jobs, want %d", ra.total(), len(oa))
	}
	// The stopped instance left the members set, and no lease names it.
	if ok, _ := rdb.ZScore(context.Background(), rediskey.DeliverMembers(), "a").Result(); ok != 0 {
		t.Fatal("stopped instance still a member")
	}
}

func TestTakeoverFromCrashedInstance(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	// A crashed instance "dead": it held every lease, was seen just now, and
	// had read jobs it never acknowledged.
	for p := range partitions {
		if err := rdb.XGroupCreateMkStream(ctx, rediskey.Deliver(p), rediskey.DeliverGroup, "0").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, rediskey.DeliverLease(p), "dead", leaseTTL).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.ZAdd(ctx, rediskey.DeliverMembers(), redis.Z{Score: float64(time.Now().UnixMilli()), Member: "dead"}).Err(); err != nil {
		t.Fatal(err)
	}
	const perPartition = 3
	for i := int64(1); i <= perPartition; i++ {
		for _, conv := range convPerPartition() {
			enqueue(t, rdb, conv, i*1000+conv, `{}`)
		}
	}
	for p := range partitions {
		if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: rediskey.DeliverGroup, Consumer: "dead",
			Streams: []string{rediskey.Deliver(p), ">"}, Count: 100}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// One more job per partition that nobody read yet.
	for _, conv := range convPerPartition() {
		enqueue(t, rdb, conv, 9000+conv, `{}`)
	}
	if got := pending(t, rdb); got != partitions*perPartition {
		t.Fatalf("set-up: %d pending", got)
	}

	rec := newRecorder()
	b := start(t, rdb, "b", rec)
	time.Sleep(leaseTTL / 3)
	if got := b.svc.Owned(); len(got) != 0 {
		t.Fatalf("took %v while the dead instance's leases were still valid", got)
	}
	eventually(t, 10*time.Second, "takeover of every partition", func() bool { return len(b.svc.Owned()) == partitions })
	eventually(t, 10*time.Second, "every job processed", func() bool { return rec.total() == partitions*(perPartition+1) })
	rec.mu.Lock()
	for p, ids := range rec.seen {
		if !slices.IsSorted(ids) || len(ids) != perPartition+1 {
			t.Errorf("partition %d processed %v, want %d ids in stream order", p, ids, perPartition+1)
		}
	}
	rec.mu.Unlock()
	eventually(t, 5*time.Second, "no pending entries", func() bool { return pending(t, rdb) == 0 })
}

func TestRestartUnderSameIDResumesAtOnce(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	// "b" crashed a moment ago holding long leases; restarted under the same
	// id it must not wait for them to expire.
	for p := range partitions {
		if err := rdb.Set(ctx, rediskey.DeliverLease(p), "b", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	enqueue(t, rdb, 3, 1, `{}`)
	rec := newRecorder()
	start(t, rdb, "b", rec)
	eventually(t, 3*time.Second, "job processed", func() bool { return rec.total() == 1 })
}

func TestRedeliveredJobCountsOnce(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	g1 := gatetest.Start(t, rdb, "g1", secret)
	if err := rdb.HSet(ctx, rediskey.Route(2), "a", route.Entry{GateID: "g1", ConnID: 3, SinceMs: 1}.String()).Err(); err != nil {
		t.Fatal(err)
	}
	conv := convIn(0)
	for uid, peer := range map[int64]int64{1: 2, 2: 1} {
		if ok, err := dialog.WriteCold(ctx, rdb, uid, conv, "", dialog.State{Type: 1, PeerID: peer}); err != nil || !ok {
			t.Fatalf("seed %d: %v %v", uid, ok, err)
		}
	}
	pool := gatetest.Pool(t, rdb, secret)
	fo := mustFanout(t, rdb, pool)

	// A crashed owner read the job and fanned it out, but never acked it.
	if err := consumer.EnsureGroup(ctx, rdb, 0); err != nil {
		t.Fatal(err)
	}
	enqueue(t, rdb, conv, 7, `{"msg_id":"7","content":{"text":"hi"}}`)
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: rediskey.DeliverGroup, Consumer: "dead",
		Streams: []string{rediskey.Deliver(0), ">"}, Count: 10}).Result()
	if err != nil || len(res) != 1 || len(res[0].Messages) != 1 {
		t.Fatalf("read as dead: %v %v", res, err)
	}
	job, err := queue.Decode(res[0].Messages[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := fo.Process(ctx, 0, job); err != nil {
		t.Fatal(err)
	}
	// A signal about that message: no done marker may be left by it.
	sig := &queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_SIGNAL, Command: 8, MsgId: 8, ConversationId: conv,
		SenderId: 1, SenderDevice: "phone", Recipients: []int64{2}, PushData: []byte(`{"conversation_id":"32","msg_id":"7"}`)}
	if _, err := queue.Enqueue(ctx, rdb, partitions, sig); err != nil {
		t.Fatal(err)
	}

	// The next owner claims the pending job and processes it again.
	start(t, rdb, "b", fo)
	eventually(t, 10*time.Second, "queue drained", func() bool {
		l, _ := rdb.XLen(ctx, rediskey.Deliver(0)).Result()
		return l == 0 && pending(t, rdb) == 0
	})
	s, _, err := dialog.Load(ctx, rdb, 2, conv)
	if err != nil {
		t.Fatal(err)
	}
	if s.Unread != 1 || s.LastMsgID != 7 || s.Preview == nil || s.Preview.Text != "hi" {
		t.Fatalf("peer state after redelivery %+v", s)
	}
	if s, _, _ := dialog.Load(ctx, rdb, 1, conv); s.Unread != 0 || s.LastMsgID != 7 {
		t.Fatalf("sender state %+v", s)
	}
	ps := g1.Pushes()
	if len(ps) != 3 || ps[2].GetCommand() != 8 {
		t.Fatalf("%d pushes (want message twice, then the signal)", len(ps))
	}
	if n, _ := rdb.Exists(ctx, rediskey.DeliverDone(0, 7)).Result(); n != 1 {
		t.Fatal("message left no done marker")
	}
	if n, _ := rdb.Exists(ctx, rediskey.DeliverDone(0, 8)).Result(); n != 0 {
		t.Fatal("signal left a done marker")
	}
}

// mustFanout is a fan-out over pool with a 2 s push timeout.
func mustFanout(t testing.TB, rdb redis.Cmdable, pool *gateclient.Pool) *fanout.Fanout {
	t.Helper()
	f, err := fanout.New(rdb, pool, nil, 2*time.Second, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The instance builds from the validated defaults alone, as the deliver
// command wires it, and refuses a zero it used to replace with a default.
func TestNewFromDefaults(t *testing.T) {
	c := config.Default()
	c.Cluster.Secret = secret
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	d := c.Deliver
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: nothing runs
	t.Cleanup(func() { _ = rdb.Close() })
	gates, err := gateclient.New(rdb, c.Cluster.Secret, d.GateAddrTTL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gates.Close() })
	logics, err := logicclient.New(d.LogicAddrs, c.Cluster.Secret, d.LogicTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logics.Close() })
	m := metrics.New(prometheus.NewRegistry())
	fo, err := fanout.New(rdb, gates, logics, d.PushTimeout, zap.NewNop(), m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(rdb, ConfigFrom(c), fo, zap.NewNop(), m); err != nil {
		t.Fatalf("New from config.Default(): %v", err)
	}
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"push_timeout 0", func() error { _, err := fanout.New(rdb, gates, logics, 0, zap.NewNop(), m); return err }()},
		{"logic_timeout 0", func() error { _, err := logicclient.New(d.LogicAddrs, c.Cluster.Secret, 0); return err }()},
		{"batch_size 0", func() error {
			cfg := ConfigFrom(c)
			cfg.BatchSize = 0
			_, err := New(rdb, cfg, fo, zap.NewNop(), m)
			return err
		}()},
		{"no id", func() error {
			cfg := ConfigFrom(c)
			cfg.ID = ""
			_, err := New(rdb, cfg, fo, zap.NewNop(), m)
			return err
		}()},
	} {
		if tt.err == nil {
			t.Errorf("%s accepted", tt.name)
		}
	}
}
