package push

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/rediskey"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// Unacked queues the notifications of MESSAGE pushes a connection took
// but never acknowledged before it went away (the gate's Closed event):
// the device may never have shown them. Each is a PushJob for that one
// device, without the message's details, which the worker reads from
// MySQL; the idempotency key makes a second job for a device already
// notified harmless.
type Unacked struct {
	rdb        redis.Cmdable
	partitions int
}

// NewUnacked returns the queue of unacknowledged pushes (push.partitions
// streams).
func NewUnacked(rdb redis.Cmdable, partitions int) *Unacked {
	return &Unacked{rdb: rdb, partitions: partitions}
}

// Queue appends one job per unacknowledged push of the session's device.
func (u *Unacked) Queue(ctx context.Context, sess *logicv1.Session, pushes []*logicv1.UnackedPush) error {
	if len(pushes) == 0 || sess.GetUserId() <= 0 {
		return nil
	}
	now := time.Now().UnixMilli()
	_, err := u.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, up := range pushes {
			if up.GetMsgId() <= 0 || up.GetConversationId() <= 0 {
				continue
			}
			b, err := proto.Marshal(&queuev1.PushJob{MsgId: up.GetMsgId(), ConversationId: up.GetConversationId(), EnqueuedAtMs: now,
				Users: []*queuev1.PushUser{{UserId: sess.GetUserId(), OnlyDevices: []string{sess.GetDeviceId()}}}})
			if err != nil {
				return err
			}
			p.XAdd(ctx, &redis.XAddArgs{Stream: rediskey.Push(rediskey.Partition(up.GetConversationId(), u.partitions)), Values: []any{queue.Field, b}})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("push: queue unacknowledged pushes: %w", err)
	}
	return nil
}
