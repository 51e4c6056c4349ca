package consumer

import (
	"context"
	"fmt"
	"reflect"
	"sync"
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

// holdingProcessor records batches; the first batch is held until hold
// says it may go on, so a test can look at the stream meanwhile.
type holdingProcessor struct {
	mu      sync.Mutex
	batches [][]int64
	held    chan struct{} // closed when the first batch arrived
	release chan struct{} // closed by the test to let the first batch finish
	once    sync.Once
}

func (h *holdingProcessor) Process(ctx context.Context, p int, job *queuev1.DeliverJob) error {
	return h.ProcessBatch(ctx, p, []*queuev1.DeliverJob{job})
}

func (h *holdingProcessor) ProcessBatch(ctx context.Context, _ int, jobs []*queuev1.DeliverJob) error {
	var ids []int64
	for _, j := range jobs {
		ids = append(ids, j.GetMsgId())
	}
	h.mu.Lock()
	h.batches = append(h.batches, ids)
	first := len(h.batches) == 1
	h.mu.Unlock()
	if first {
		h.once.Do(func() { close(h.held) })
		select {
		case <-h.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (h *holdingProcessor) seen() [][]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]int64(nil), h.batches...)
}

// pendingCount is the number of entries of p's stream read and not acked.
func pendingCount(t *testing.T, rdb redis.Cmdable, p int) int64 {
	t.Helper()
	pe, err := rdb.XPending(context.Background(), rediskey.Deliver(p), rediskey.DeliverGroup).Result()
	if err != nil {
		t.Fatal(err)
	}
	return pe.Count
}

func addJobs(t *testing.T, rdb redis.Cmdable, p int, ids ...int64) {
	t.Helper()
	for _, id := range ids {
		b, err := proto.Marshal(&queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_MESSAGE, MsgId: id})
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: rediskey.Deliver(p), Values: []any{queue.Field, b}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// The next batch is read while the current one is processed, batches are
// still processed one at a time in stream order, and a stop during a
// batch leaves the batch read ahead pending (unprocessed, unacked) for the
// next owner.
func TestNextBatchIsReadWhileTheCurrentIsProcessedAndReleasedOnStop(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	const p = 5
	stream := rediskey.Deliver(p)
	rdb.Del(ctx, stream)
	if err := EnsureGroup(ctx, rdb, p); err != nil {
		t.Fatal(err)
	}
	addJobs(t, rdb, p, 1, 2, 3, 4, 5, 6)

	proc := &holdingProcessor{held: make(chan struct{}), release: make(chan struct{})}
	c := mustNew(t, rdb, Config{Name: "readahead", BatchSize: 2, Block: 100 * time.Millisecond}, proc, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	stop := make(chan struct{})
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		c.Run(ctx, stop, p)
	}()
	select {
	case <-proc.held:
	case <-time.After(5 * time.Second):
		t.Fatal("first batch never processed")
	}
	// While batch {1,2} is held, batch {3,4} must be read: 4 pending.
	deadline := time.Now().Add(5 * time.Second)
	for pendingCount(t, rdb, p) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries pending while the first batch was processed; want 4 (the next batch read ahead)", pendingCount(t, rdb, p))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Only one batch is read ahead: the rest stays unread.
	time.Sleep(200 * time.Millisecond)
	if n := pendingCount(t, rdb, p); n != 4 {
		t.Fatalf("%d entries pending; want 4 (one batch in hand, one read ahead)", n)
	}
	close(stop)
	close(proc.release)
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after stop")
	}
	if got := proc.seen(); !reflect.DeepEqual(got, [][]int64{{1, 2}}) {
		t.Fatalf("batches processed %v; want only the one in hand at the stop", got)
	}
	if n := pendingCount(t, rdb, p); n != 2 {
		t.Fatalf("%d entries pending after the stop; want the 2 read ahead, released to the next owner", n)
	}

	// The next owner takes the released batch first, then the rest, in order.
	next := &batchRecorder{}
	c2 := mustNew(t, rdb, Config{Name: "next-owner", BatchSize: 2, Block: 100 * time.Millisecond}, next, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	stop2 := make(chan struct{})
	ran2 := make(chan struct{})
	go func() {
		defer close(ran2)
		c2.Run(ctx, stop2, p)
	}()
	deadline = time.Now().Add(5 * time.Second)
	for {
		if n, _ := rdb.XLen(ctx, stream).Result(); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the next owner did not finish the stream")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop2)
	<-ran2
	if got, want := fmt.Sprint(next.batches), "[[3 4] [5 6]]"; got != want {
		t.Fatalf("next owner's batches %s, want %s", got, want)
	}
}

// A MESSAGE job repeating one of the batch whose ack is still running (a
// client's retry enqueued it again) is only acknowledged: its done marker
// is not written yet, so the processor could not tell it was pushed. A
// signal about the same msg_id and other jobs are processed as usual.
func TestJobOfTheBatchBeingAckedIsADuplicate(t *testing.T) {
	enc := func(j *queuev1.DeliverJob) redis.XMessage {
		b, err := proto.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		return redis.XMessage{ID: fmt.Sprintf("1-%d", j.GetMsgId()), Values: map[string]any{queue.Field: string(b)}}
	}
	msgs := []redis.XMessage{
		enc(&queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_MESSAGE, MsgId: 7}),
		enc(&queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_SIGNAL, MsgId: 7, Command: 8}),
		enc(&queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_MESSAGE, MsgId: 8}),
	}
	tests := []struct {
		name string
		prev *inflightAck
		want [][]int64
		dups float64
	}{
		{"no ack running", nil, [][]int64{{7, 7, 8}}, 0},
		{"ack of a batch with msg 7 running", &inflightAck{msgIDs: map[int64]struct{}{7: {}}}, [][]int64{{7, 8}}, 1},
		{"ack of a batch with other msgs running", &inflightAck{msgIDs: map[int64]struct{}{9: {}}}, [][]int64{{7, 7, 8}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &batchRecorder{}
			m := metrics.New(prometheus.NewRegistry())
			c := mustNew(t, nil, Config{Name: "t", BatchSize: 64, Block: time.Second}, rec, zap.NewNop(), m)
			decoded, ok := c.processEntries(context.Background(), context.Background(), 1, msgs, tt.prev, zap.NewNop())
			if !ok {
				t.Fatal("batch not processed")
			}
			if len(decoded) != len(msgs) {
				t.Fatalf("%d decoded jobs for %d entries: every entry must be acknowledged", len(decoded), len(msgs))
			}
			if !reflect.DeepEqual(rec.batches, tt.want) {
				t.Fatalf("processed %v, want %v", rec.batches, tt.want)
			}
			if got := testutil.ToFloat64(m.Jobs.WithLabelValues(metrics.ResultDuplicate)); got != tt.dups {
				t.Fatalf("%v duplicates counted, want %v", got, tt.dups)
			}
		})
	}
}
