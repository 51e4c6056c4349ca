package consumer

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/deliver/internal/fanout"
	"github.com/sparkim/spark/deliver/internal/gatetest"
	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

const secret = "test-secret"

// BenchmarkBatch64 measures one partition's batch of 64 MESSAGE jobs end to
// end against the real Redis and a fake gate: done markers, routes, list
// scripts, pushes and the ack. 8 conversations of 16 users, every user with
// two devices on two gates, every list state present (the hot path).
func BenchmarkBatch64(b *testing.B) {
	const (
		batch = 64
		p     = 3
		convs = 8
	)
	rdb := gatetest.Redis(b)
	ctx := context.Background()
	gatetest.Start(b, rdb, "g1", secret)
	gatetest.Start(b, rdb, "g2", secret)
	for uid := int64(1); uid <= 2*convs; uid++ {
		for i, g := range []string{"g1", "g2"} {
			e := route.Entry{GateID: g, ConnID: uint64(uid*10) + uint64(i), SinceMs: 1}
			if err := rdb.HSet(ctx, rediskey.Route(uid), "dev"+strconv.Itoa(i), e.String()).Err(); err != nil {
				b.Fatal(err)
			}
		}
	}
	for c := int64(0); c < convs; c++ {
		a, z := 2*c+1, 2*c+2
		for _, uid := range []int64{a, z} {
			if _, err := dialog.WriteCold(ctx, rdb, uid, c+1, "", dialog.State{Type: 1, PeerID: a + z - uid, Base: 1}); err != nil {
				b.Fatal(err)
			}
		}
	}
	pool := gatetest.Pool(b, rdb, secret)
	m := metrics.New(prometheus.NewRegistry())
	fo, err := fanout.New(rdb, pool, nil, 2*time.Second, zap.NewNop(), m)
	if err != nil {
		b.Fatal(err)
	}
	c, err := New(rdb, Config{Name: "bench", BatchSize: batch, Block: time.Second}, fo, zap.NewNop(), m)
	if err != nil {
		b.Fatal(err)
	}
	if err := EnsureGroup(ctx, rdb, p); err != nil {
		b.Fatal(err)
	}
	stream := rediskey.Deliver(p)
	msgID := int64(1000)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		pipe := rdb.Pipeline()
		for j := range batch {
			msgID++
			cid := int64(j%convs) + 1
			job := &queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_MESSAGE, MsgId: msgID, ConversationId: cid, ConversationType: 1,
				SenderId: 2*cid - 1, SenderDevice: "dev0", Recipients: []int64{2*cid - 1, 2 * cid}, MessageType: 1,
				CreatedAtMs: time.Now().UnixMilli(), EnqueuedAtMs: time.Now().UnixMilli(),
				PushData: []byte(`{"msg_id":"` + strconv.FormatInt(msgID, 10) + `","conversation_id":"` + strconv.FormatInt(cid, 10) +
					`","sender_id":"1","message_type":1,"content":{"text":"hello, this is a benchmark message"},"created_at":1}`)}
			raw, err := proto.Marshal(job)
			if err != nil {
				b.Fatal(err)
			}
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{queue.Field, raw}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: rediskey.DeliverGroup, Consumer: "bench",
			Streams: []string{stream, ">"}, Count: batch}).Result()
		if err != nil || len(res) != 1 || len(res[0].Messages) != batch {
			b.Fatalf("read batch: %v %v", res, err)
		}
		b.StartTimer()
		if !c.handleEntries(ctx, ctx, p, res[0].Messages, zap.NewNop()) {
			b.Fatal("batch not handled")
		}
	}
}
