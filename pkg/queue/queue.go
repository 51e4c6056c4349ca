// Package queue is the deliver queue on Redis Streams: logic appends a
// DeliverJob to the stream of the conversation's partition, deliver reads it
// through the consumer group and acknowledges it after the pushes.
package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/pkg/rediskey"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// Field is the stream entry field holding the encoded job.
const Field = "job"

// Enqueue appends job to its partition's stream and returns the entry id.
func Enqueue(ctx context.Context, rdb redis.Cmdable, partitions int, job *queuev1.DeliverJob) (string, error) {
	b, err := proto.Marshal(job)
	if err != nil {
		return "", fmt.Errorf("queue: encode job: %w", err)
	}
	key := rediskey.Deliver(rediskey.Partition(job.ConversationId, partitions))
	id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{Field, b}}).Result()
	if err != nil {
		return "", fmt.Errorf("queue: XADD %s: %w", key, err)
	}
	return id, nil
}

// ErrMalformed reports a stream entry that holds no decodable job.
var ErrMalformed = errors.New("queue: malformed entry")

// Decode returns the job in a stream entry.
func Decode(msg redis.XMessage) (*queuev1.DeliverJob, error) {
	v, ok := msg.Values[Field]
	if !ok {
		return nil, fmt.Errorf("%w %s: no %q field", ErrMalformed, msg.ID, Field)
	}
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("%w %s: field is %T", ErrMalformed, msg.ID, v)
	}
	job := new(queuev1.DeliverJob)
	if err := proto.Unmarshal([]byte(s), job); err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrMalformed, msg.ID, err)
	}
	return job, nil
}
