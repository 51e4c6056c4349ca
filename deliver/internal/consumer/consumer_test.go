package consumer

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/deliver/internal/gatetest"
	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/rediskey"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

func TestMarksDone(t *testing.T) {
	tests := []struct {
		name string
		job  *queuev1.DeliverJob
		want bool
	}{
		{"undecodable entry", nil, false},
		{"message", &queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_MESSAGE, MsgId: 1}, true},
		{"kind unset is a message (first logic version)", &queuev1.DeliverJob{MsgId: 1}, true},
		{"signal", &queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_SIGNAL, MsgId: 1, Command: 9}, false},
		{"unknown kind", &queuev1.DeliverJob{Kind: queuev1.JobKind(42), MsgId: 1}, false},
	}
	for _, tt := range tests {
		if got := MarksDone(tt.job); got != tt.want {
			t.Errorf("%s: MarksDone = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// batchRecorder is a BatchProcessor that records the batches it gets.
type batchRecorder struct{ batches [][]int64 }

func (r *batchRecorder) Process(ctx context.Context, p int, job *queuev1.DeliverJob) error {
	return r.ProcessBatch(ctx, p, []*queuev1.DeliverJob{job})
}

func (r *batchRecorder) ProcessBatch(_ context.Context, _ int, jobs []*queuev1.DeliverJob) error {
	var ids []int64
	for _, j := range jobs {
		ids = append(ids, j.GetMsgId())
	}
	r.batches = append(r.batches, ids)
	return nil
}

func TestBatchWithMalformedEntry(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	const p = 1
	if err := EnsureGroup(ctx, rdb, p); err != nil {
		t.Fatal(err)
	}
	stream := rediskey.Deliver(p)
	add := func(v any) {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{queue.Field, v}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	enc := func(j *queuev1.DeliverJob) []byte {
		b, err := proto.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	add(enc(&queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_MESSAGE, MsgId: 1}))
	add("\xff\xff not a job")
	add(enc(&queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_SIGNAL, MsgId: 1, Command: 8}))
	add(enc(&queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_MESSAGE, MsgId: 2}))
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: rediskey.DeliverGroup, Consumer: "t",
		Streams: []string{stream, ">"}, Count: 10}).Result()
	if err != nil || len(res) != 1 || len(res[0].Messages) != 4 {
		t.Fatalf("read: %v %v", res, err)
	}
	rec := &batchRecorder{}
	m := metrics.New(prometheus.NewRegistry())
	c := mustNew(t, rdb, Config{Name: "t", BatchSize: 64, Block: time.Second}, rec, zap.NewNop(), m)
	if !c.handleEntries(ctx, ctx, p, res[0].Messages, zap.NewNop()) {
		t.Fatal("batch not handled")
	}
	if !reflect.DeepEqual(rec.batches, [][]int64{{1, 1, 2}}) {
		t.Fatalf("batches %v, want the three decodable jobs in one batch", rec.batches)
	}
	if n, _ := rdb.XLen(ctx, stream).Result(); n != 0 {
		t.Fatalf("%d entries left in the stream", n)
	}
	if pe, _ := rdb.XPending(ctx, stream, rediskey.DeliverGroup).Result(); pe.Count != 0 {
		t.Fatalf("%d entries pending", pe.Count)
	}
	for id, want := range map[int64]int64{1: 1, 2: 1} {
		if n, _ := rdb.Exists(ctx, rediskey.DeliverDone(p, id)).Result(); n != want {
			t.Fatalf("done marker of %d: %d", id, n)
		}
	}
	if v := testutil.ToFloat64(m.Jobs.WithLabelValues(metrics.ResultMalformed)); v != 1 {
		t.Fatalf("malformed metric %v", v)
	}
}

// mustNew is New for a test, which fails on an error.
func mustNew(t testing.TB, rdb redis.Cmdable, cfg Config, proc Processor, log *zap.Logger, m *metrics.Metrics) *Consumer {
	t.Helper()
	c, err := New(rdb, cfg, proc, log, m)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
