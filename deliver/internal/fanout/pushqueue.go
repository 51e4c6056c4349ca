package fanout

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/retry"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// pushUsersPerJob bounds the users of one PushJob entry, so a large
// group's notification work is several bounded entries.
const pushUsersPerJob = 1000

// pushQueueRetry paces the XADDs of notification work while Redis
// refuses them: the pushes went out, so the batch is not failed for it.
var pushQueueRetry = retry.Policy{Initial: 50 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2, Jitter: true}

// SetPushPartitions makes f queue the notification work of every MESSAGE
// job (push.partitions streams; 0 turns it off, the default). Call it
// before processing.
func (f *Fanout) SetPushPartitions(n int) { f.pushPartitions = n }

// pushJobs builds the notification work of a batch's MESSAGE jobs: every
// recipient except the sender, each with the devices a live gate took the
// push on (attempted and not dropped). A job marked no_offline_push has
// none. Who is muted, who has a token and whether the interval collapses
// it is decided by the worker, which has MySQL.
func (f *Fanout) pushJobs(tasks []task) ([]*queuev1.PushJob, error) {
	var out []*queuev1.PushJob
	now := time.Now().UnixMilli()
	for i := range tasks {
		t := &tasks[i]
		if !t.message || t.skip || t.job.GetNoOfflinePush() {
			continue
		}
		missed := make(map[targetKey]struct{}, len(t.missed))
		for _, m := range t.missed {
			missed[targetKey{m.Entry.ConnID, m.UserID, m.DeviceID}] = struct{}{}
		}
		online := make(map[int64][]string)
		for _, a := range t.attempted {
			if _, ok := missed[targetKey{a.Entry.ConnID, a.UserID, a.DeviceID}]; !ok {
				online[a.UserID] = append(online[a.UserID], a.DeviceID)
			}
		}
		pj, at, err := f.preview(t.partition, t.job)
		if err != nil {
			return nil, fmt.Errorf("fanout: push job preview: %w", err)
		}
		var cur *queuev1.PushJob
		for _, uid := range Recipients(t.job) {
			if uid == t.job.GetSenderId() {
				continue
			}
			if cur == nil || len(cur.Users) == pushUsersPerJob {
				cur = &queuev1.PushJob{
					MsgId: t.job.GetMsgId(), ConversationId: t.job.GetConversationId(), ConversationType: t.job.GetConversationType(),
					SenderId: t.job.GetSenderId(), MessageType: t.job.GetMessageType(), Preview: pj, CreatedAtMs: at, EnqueuedAtMs: now,
				}
				out = append(out, cur)
			}
			cur.Users = append(cur.Users, &queuev1.PushUser{UserId: uid, OnlineDevices: online[uid]})
		}
	}
	return out, nil
}

// queuePush appends the batch's notification work to the push streams,
// retrying while Redis refuses (the pushes went out; failing the batch
// would push again). An entry appended twice (a crash before the ack makes
// the next owner run the job again) is harmless: the worker's idempotency
// key per message and device sends one notification.
func (f *Fanout) queuePush(ctx context.Context, tasks []task) error {
	if f.pushPartitions <= 0 {
		return nil
	}
	jobs, err := f.pushJobs(tasks)
	if err != nil || len(jobs) == 0 {
		return err
	}
	bo := retry.NewBackoff(pushQueueRetry)
	for lo := 0; lo < len(jobs); lo += pipelineChunk {
		chunk := jobs[lo:min(lo+pipelineChunk, len(jobs))]
		for {
			_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, j := range chunk {
					b, err := proto.Marshal(j)
					if err != nil {
						return fmt.Errorf("encode push job: %w", err)
					}
					p.XAdd(ctx, &redis.XAddArgs{Stream: rediskey.Push(rediskey.Partition(j.GetConversationId(), f.pushPartitions)), Values: []any{queue.Field, b}})
				}
				return nil
			})
			if err == nil {
				f.m.PushJobs.Add(float64(len(chunk)))
				break
			}
			f.m.RedisErrors.Inc()
			f.log.Warn("queue notification work, will retry", zap.Int("jobs", len(chunk)), zap.Error(err))
			if !bo.Sleep(ctx) {
				return fmt.Errorf("fanout: queue notification work: %w", err)
			}
		}
		bo.Reset()
	}
	return nil
}
