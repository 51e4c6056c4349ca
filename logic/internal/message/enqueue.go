package message

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/conversation"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/failpoint"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/retry"
	"github.com/sparkim/spark/pkg/tracing"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// enqueueAttemptTimeout bounds one XADD (or the first, pipelined XADDs of
// a group commit). A healthy Redis answers in milliseconds; half a second
// leaves the budget room for a second attempt after a hung one.
const enqueueAttemptTimeout = 500 * time.Millisecond

// enqueueBudget bounds all the XADD attempts of one job, from the start of
// the first. With Redis down, the client's Redis library may spend a whole
// attempt's timeout retrying its dial, so without a budget a send would
// wait out every attempt (3 s with three) before its 50301; with it, the
// client hears 50301 within about a second and retries (decision 72).
const enqueueBudget = time.Second

// Job builds the deliver job of a committed message of conv: the push
// data and the list preview are encoded here once for every recipient
// (deliver parses neither), and the recipients are
// listed when the conversation knows them (P2P); deliver expands a group's
// members itself.
func Job(row store.Message, conv conversation.Conversation, flags Flags, now time.Time) (*queuev1.DeliverJob, error) {
	push, err := protocol.Marshal(protocol.Message{
		MsgID:            jsonid.ID(row.ID),
		ConversationID:   jsonid.ID(row.ConversationID),
		ConversationType: conv.Type,
		SenderID:         jsonid.ID(row.SenderID),
		ClientMsgID:      row.ClientMsgID,
		MessageType:      row.MessageType,
		Content:          json.RawMessage(row.Content),
		CreatedAt:        row.CreatedAt.UnixMilli(),
	})
	if err != nil {
		return nil, err
	}
	preview, err := dialog.EncodePreview(dialog.PreviewOf(row.ID, row.SenderID, row.MessageType, []byte(row.Content)))
	if err != nil {
		return nil, err
	}
	return &queuev1.DeliverJob{
		Kind:             queuev1.JobKind_JOB_KIND_MESSAGE,
		MsgId:            row.ID,
		ConversationId:   row.ConversationID,
		ConversationType: int32(conv.Type),
		SenderId:         row.SenderID,
		SenderDevice:     row.SenderDevice,
		Recipients:       conv.Recipients(),
		MessageType:      int32(row.MessageType),
		PushData:         push,
		CreatedAtMs:      row.CreatedAt.UnixMilli(),
		EnqueuedAtMs:     now.UnixMilli(),
		MemberVersion:    conv.MemberVersion,
		NoUnread:         flags.NoUnread,
		NoOfflinePush:    flags.NoOfflinePush,
		Preview:          preview,
	}, nil
}

// enqueue XADDs the job of a committed message with bounded retries;
// 50301 when all fail.
func (s *Service) enqueue(ctx context.Context, row store.Message, conv conversation.Conversation, flags Flags) error {
	job, err := Job(row, conv, flags, time.Now())
	if err != nil {
		return errcode.Wrap(errcode.Internal, "", err)
	}
	if tracing.On() {
		job.TraceParent = tracing.Parent(ctx)
	}
	return s.enqueueFrom(ctx, row, job, 0, nil, time.Now())
}

// enqueueFrom makes the XADD attempts of job from attempt first on (the
// group commit made attempt 0 already when first is 1, starting at start;
// prev is its error) and reports a final failure as 50301.
func (s *Service) enqueueFrom(ctx context.Context, row store.Message, job *queuev1.DeliverJob, first int, prev error, start time.Time) error {
	if err := s.enqueueJob(ctx, job, first, prev, start); err != nil {
		s.metrics.EnqueueFailures.Inc()
		s.log.Warn("enqueue failed; no SEND_ACK", zap.Int64("user_id", row.SenderID), zap.Int64("conversation_id", row.ConversationID),
			zap.Int64("msg_id", row.ID), zap.Error(err))
		return errcode.Unavailable("enqueue", err)
	}
	return nil
}

// enqueueRetry paces the XADD attempts of one job: 20 ms before the
// second, doubling to 200 ms.
var enqueueRetry = retry.Policy{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2}

// enqueueJob XADDs a job with bounded retries (logic.enqueue_retries),
// starting at attempt first; prev is the error of the attempts before it.
// The attempts, counted from start (when attempt 0 began), end within
// enqueueBudget.
func (s *Service) enqueueJob(ctx context.Context, job *queuev1.DeliverJob, first int, prev error, start time.Time) error {
	ctx, cancel := context.WithDeadline(ctx, start.Add(enqueueBudget))
	defer cancel()
	last := prev
attempts:
	for attempt := first; attempt < s.cfg.EnqueueRetries; attempt++ {
		if attempt > 0 {
			if err := retry.Sleep(ctx, enqueueRetry.Delay(attempt-1)); err != nil {
				last = errors.Join(last, err)
				break attempts
			}
		}
		if last = failpoint.Inject("logic/send/beforeEnqueue"); last == nil {
			actx, cancel := context.WithTimeout(ctx, enqueueAttemptTimeout)
			job.EnqueuedAtMs = time.Now().UnixMilli()
			_, last = queue.Enqueue(actx, s.rdb, s.cfg.Partitions, job)
			cancel()
			if last == nil {
				return nil
			}
		}
		s.metrics.EnqueueAttemptFailures.Inc()
	}
	return last
}
