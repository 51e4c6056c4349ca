package fanout

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/dialog"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// memberWork does the per-member work SIGNAL jobs ask for with
// mailbox_event_type (a group recall): every recipient's list entry of the
// conversation is invalidated (pipelined, in chunks; not with keep_lists,
// a reaction's) and every recipient
// gets the mailbox event (every device), appended through logic in chunks.
// It runs before the pushes and before the ack; any failure fails the
// batch, which is retried whole: invalidating twice and a second copy of
// the event are harmless (a device applies a recall once).
func (f *Fanout) memberWork(ctx context.Context, tasks []task) error {
	for i := range tasks {
		t := &tasks[i]
		typ := t.job.GetMailboxEventType()
		if t.skip || t.message || typ == 0 {
			continue
		}
		uids := Recipients(t.job)
		cid := t.job.GetConversationId()
		for lo := 0; lo < len(uids) && !t.job.GetKeepLists(); lo += pipelineChunk {
			if err := f.invalidateChunk(ctx, cid, uids[lo:min(lo+pipelineChunk, len(uids))]); err != nil {
				return fmt.Errorf("fanout: invalidate lists of conversation %d: %w", cid, err)
			}
		}
		if f.mailbox == nil {
			f.jobLog(t.partition, t.job).Warn("no mailbox: the members' events are not recorded", zap.Int("members", len(uids)))
			continue
		}
		payload := t.job.GetMailboxPayload()
		if len(payload) == 0 {
			payload = t.job.GetPushData()
		}
		events := make([]*logicv1.MailboxEvent, 0, min(len(uids), mailboxChunk))
		for lo := 0; lo < len(uids); lo += mailboxChunk {
			events = events[:0]
			for _, uid := range uids[lo:min(lo+mailboxChunk, len(uids))] {
				events = append(events, &logicv1.MailboxEvent{
					UserId: uid, EventType: typ, ConversationId: cid, MsgId: t.job.GetMsgId(), Payload: payload,
				})
			}
			if _, err := f.mailbox.AppendMailbox(ctx, events); err != nil {
				return fmt.Errorf("fanout: mailbox events of conversation %d: %w", cid, err)
			}
		}
	}
	return nil
}

// invalidateChunk drops the list entries of uids for cid in one round trip.
func (f *Fanout) invalidateChunk(ctx context.Context, cid int64, uids []int64) error {
	_, err := f.runScripts(ctx, len(uids), func(sc redis.Scripter, i int) (bool, error) {
		return false, dialog.Invalidate(ctx, sc, uids[i], cid)
	})
	return err
}
