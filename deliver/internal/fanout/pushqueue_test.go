package fanout

import (
	"context"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/deliver/internal/gatetest"
	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// With push on, a MESSAGE job queues one notification job naming every
// recipient but the sender, each with the devices a live connection took
// the push on: a dropped push, a failed gate, a missing connection, a dead
// gate and no route at all count as offline. A no_offline_push job and a
// job with push off queue nothing.
func TestMessageQueuesNotificationWorkForOfflineDevices(t *testing.T) {
	rdb := gatetest.Redis(t)
	ctx := context.Background()
	g1 := gatetest.Start(t, rdb, "g1", secret)
	g2 := gatetest.Start(t, rdb, "g2", secret)
	g1.SetDropped(11)
	g1.SetMissing(12)
	g2.SetFail(true)
	for uid, devs := range map[int64]map[string]route.Entry{
		1: {"phone": {GateID: "g1", ConnID: 10}, "pad": {GateID: "g2", ConnID: 20}},
		2: {"a": {GateID: "g1", ConnID: 11}, "gone": {GateID: "g1", ConnID: 12}, "ok": {GateID: "g1", ConnID: 13},
			"ok2": {GateID: "g1", ConnID: 14}, "b": {GateID: "g2", ConnID: 21}, "dead": {GateID: "gdead", ConnID: 30}},
	} {
		for dev, e := range devs {
			e.SinceMs = 1
			if err := rdb.HSet(ctx, rediskey.Route(uid), dev, e.String()).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	pool := gatetest.Pool(t, rdb, secret)
	m := metrics.New(prometheus.NewRegistry())
	f := mustNew(t, rdb, pool, nil, time.Second, zap.NewNop(), m)
	const cid = 8
	stream := rediskey.Push(rediskey.Partition(cid, 2))

	// Push off (the default): nothing queued.
	if err := f.Process(ctx, cid, messageJob(300, cid, `{"text":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	if n := rdb.XLen(ctx, stream).Val(); n != 0 {
		t.Fatalf("push off queued %d entries", n)
	}
	f.SetPushPartitions(2)
	quiet := messageJob(301, cid, `{"text":"psst"}`)
	quiet.NoOfflinePush = true
	for _, j := range []*queuev1.DeliverJob{quiet, messageJob(302, cid, `{"text":"lunch?"}`)} {
		if err := f.Process(ctx, cid, j); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := rdb.XRange(ctx, stream, "-", "+").Result()
	if err != nil || len(entries) != 1 {
		t.Fatalf("%d entries (%v), want one: the no_offline_push job queues none", len(entries), err)
	}
	var pj queuev1.PushJob
	if err := proto.Unmarshal([]byte(entries[0].Values[queue.Field].(string)), &pj); err != nil {
		t.Fatal(err)
	}
	if pj.GetMsgId() != 302 || pj.GetConversationId() != cid || pj.GetSenderId() != 1 || len(pj.GetPreview()) == 0 {
		t.Fatalf("push job %v", &pj)
	}
	if len(pj.GetUsers()) != 1 || pj.GetUsers()[0].GetUserId() != 2 {
		t.Fatalf("users %v, want only user 2 (never the sender)", pj.GetUsers())
	}
	online := pj.GetUsers()[0].GetOnlineDevices()
	sort.Strings(online)
	if want := []string{"ok", "ok2"}; !reflect.DeepEqual(online, want) {
		t.Fatalf("online devices %v, want %v", online, want)
	}
}
