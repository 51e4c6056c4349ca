package message

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/mailbox"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/rediskey"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// member checks that the user is a member of the conversation: 40301
// otherwise (an unknown conversation too: nothing about it is revealed).
func (s *Service) member(ctx context.Context, cid, uid int64) (store.Member, error) {
	m, err := s.store.GetMember(ctx, cid, uid)
	if errors.Is(err, store.ErrNotFound) {
		return store.Member{}, errcode.New(errcode.Forbidden, "not a member of the conversation")
	}
	if err != nil {
		return store.Member{}, errcode.Unavailable("member", err)
	}
	return m, nil
}

// invalidate drops the list entries of (users, cid) so the next sync
// recomputes them from MySQL. A failure is 50301: the change is committed
// and the client's retry invalidates again.
func (s *Service) invalidate(ctx context.Context, cid int64, users ...int64) error {
	for _, u := range users {
		if err := dialog.Invalidate(ctx, s.rdb, u, cid); err != nil {
			return errcode.Unavailable("invalidate", err)
		}
	}
	return nil
}

// signal queues a push-only SIGNAL job: data pushed as command to every
// device of recipients except the acting device. It is a realtime hint
// (the list entries are already invalidated, so every device converges by
// sync), so a failure is logged, not answered.
func (s *Service) signal(ctx context.Context, from Sender, cmd uint16, cid int64, ctype int, msgID int64, recipients []int64, data any) bool {
	push, err := protocol.Marshal(data)
	if err == nil {
		err = s.enqueueJob(ctx, &queuev1.DeliverJob{
			Kind: queuev1.JobKind_JOB_KIND_SIGNAL, Command: uint32(cmd), MsgId: msgID, ConversationId: cid,
			ConversationType: int32(ctype), SenderId: from.UserID, SenderDevice: from.DeviceID,
			Recipients: recipients, PushData: push, CreatedAtMs: time.Now().UnixMilli(),
		}, 0, nil, time.Now())
	}
	if err != nil {
		s.metrics.EnqueueFailures.Inc()
		s.log.Warn("signal enqueue failed", zap.Uint16("command", cmd), zap.Int64("user_id", from.UserID),
			zap.String("device_id", from.DeviceID), zap.Int64("conversation_id", cid), zap.Int64("msg_id", msgID), zap.Error(err))
		return false
	}
	return true
}

// ReadMark is how far a user has read a conversation: the request of
// Read (up to MsgID) and its answer (the effective last read id).
type ReadMark struct {
	ConversationID int64
	MsgID          int64
}

// MessageRef names a message: the request of Recall and Delete
// (ConversationID optional, 0) and their answer (both set).
type MessageRef struct {
	MsgID          int64
	ConversationID int64
}

// SettingsChange changes a user's flags of a conversation; a nil flag is
// left unchanged.
type SettingsChange struct {
	ConversationID int64
	Muted          *bool
	Pinned         *bool
	// Hidden removes the conversation from the list until its next
	// message (false shows it again).
	Hidden *bool
}

// Settings are a user's effective flags of a conversation.
type Settings struct {
	ConversationID int64
	Muted          bool
	Pinned         bool
	Hidden         bool
}

// The client forms of the answers, for the SIGNAL pushes and mailbox
// events that carry them to the user's other devices.
func (r ReadMark) push() protocol.ReadReply {
	return protocol.ReadReply{ConversationID: jsonid.ID(r.ConversationID), MsgID: jsonid.ID(r.MsgID)}
}

func (r MessageRef) push() protocol.MessageRef {
	return protocol.MessageRef{MsgID: jsonid.ID(r.MsgID), ConversationID: jsonid.ID(r.ConversationID)}
}

func (r Settings) push() protocol.SettingsReply {
	return protocol.SettingsReply{ConversationID: jsonid.ID(r.ConversationID), Muted: r.Muted, Pinned: r.Pinned, Hidden: r.Hidden}
}

// Read handles READ_MESSAGE (8): last_read_msg_id moves forward only,
// clamped to the conversation's last_msg_id; the answer carries the
// effective value.
func (s *Service) Read(ctx context.Context, from Sender, req ReadMark) (*ReadMark, error) {
	cid, mid := req.ConversationID, req.MsgID
	if cid <= 0 || mid <= 0 {
		return nil, errcode.New(errcode.InvalidArgument, "conversation_id and msg_id are required")
	}
	if _, err := s.member(ctx, cid, from.UserID); err != nil {
		return nil, err
	}
	conv, err := s.store.GetConversation(ctx, cid)
	if err != nil {
		return nil, errcode.Unavailable("conversation", err)
	}
	// Never past the newest message: a bogus id would hide every later one
	// from unread.
	mid = min(mid, conv.LastMsgID)
	eff, moved, err := s.store.AdvanceRead(ctx, cid, from.UserID, mid)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errcode.New(errcode.Forbidden, "not a member of the conversation")
	}
	if err != nil {
		return nil, errcode.Unavailable("read", err)
	}
	reply := &ReadMark{ConversationID: cid, MsgID: eff}
	if !moved {
		// Nothing changed in MySQL; repair a list entry that missed an
		// earlier invalidation (a retry after a Redis failure), else done.
		st, ok, err := dialog.Load(ctx, s.rdb, from.UserID, cid)
		if err != nil {
			return nil, errcode.Unavailable("dialog state", err)
		}
		if !ok || st.LastRead >= eff {
			return reply, nil
		}
	}
	if err := s.invalidate(ctx, cid, from.UserID); err != nil {
		return nil, err
	}
	s.signal(ctx, from, protocol.CmdReadMessage, cid, conv.Type, eff, []int64{from.UserID}, reply.push())
	return reply, nil
}

// Recall handles RECALL_MESSAGE (9): the sender, within the recall window,
// marks the message recalled and every participant gets a RECALL mailbox
// event in the same transaction; then their list entries are invalidated
// and a SIGNAL pushes 9 to their devices. Recalling twice answers the same
// and pushes nothing more once the first push was queued (the mailbox
// events carry the recall to sync either way), so a client repeating a
// recall cannot make every device of the other side ring again.
func (s *Service) Recall(ctx context.Context, from Sender, req MessageRef) (*MessageRef, error) {
	if req.MsgID <= 0 || req.ConversationID < 0 {
		return nil, errcode.New(errcode.InvalidArgument, "msg_id is required")
	}
	r, err := s.store.RecallMessage(ctx, req.MsgID, req.ConversationID, from.UserID, s.cfg.RecallWindow, time.Now(),
		func(n int) ([]int64, error) { return mailbox.NewIDs(ctx, s.ids, n) },
		func(member int64, m store.Message) store.MailboxEvent {
			p, _ := protocol.Marshal(MessageRef{MsgID: m.ID, ConversationID: m.ConversationID}.push())
			return store.MailboxEvent{UserID: member, EventType: protocol.EventRecall, ConversationID: m.ConversationID, MsgID: m.ID, Payload: p}
		})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errcode.New(errcode.NotFound, "message not found")
	case errors.Is(err, store.ErrNotSender):
		return nil, errcode.New(errcode.Forbidden, "only the sender may recall")
	case errors.Is(err, store.ErrRecallWindow):
		return nil, errcode.New(errcode.Forbidden, "recall window has passed")
	case err != nil:
		return nil, errcode.Unavailable("recall", err)
	}
	cid := r.Message.ConversationID
	reply := &MessageRef{MsgID: r.Message.ID, ConversationID: cid}
	pushed := r.Already && s.recallPushed(ctx, r.Message.ID)
	if pushed && r.Group {
		return reply, nil
	}
	if r.Group {
		// The members' events and list entries are deliver's work, in
		// chunks: the job must be queued, or the recall is answered 50301
		// and the client's retry queues it again (a repeat recall does).
		if err := s.groupRecall(ctx, from, cid, r.Message.ID, reply); err != nil {
			return nil, err
		}
		s.markRecallPushed(ctx, r.Message.ID)
		s.log.Debug("group message recalled", zap.Int64("user_id", from.UserID), zap.Int64("conversation_id", cid),
			zap.Int64("msg_id", r.Message.ID), zap.Bool("again", r.Already))
		return reply, nil
	}
	// A repeat still repairs list entries an earlier attempt failed to
	// invalidate; that is invisible to clients.
	if err := s.invalidate(ctx, cid, r.Members...); err != nil {
		return nil, err
	}
	if pushed {
		return reply, nil
	}
	ctype, err := s.store.ConversationType(ctx, cid)
	if err != nil {
		ctype = 0 // only informative in the job
	}
	if s.signal(ctx, from, protocol.CmdRecallMessage, cid, ctype, r.Message.ID, r.Members, reply.push()) {
		s.markRecallPushed(ctx, r.Message.ID)
	}
	s.log.Debug("message recalled", zap.Int64("user_id", from.UserID), zap.Int64("conversation_id", cid),
		zap.Int64("msg_id", r.Message.ID), zap.Bool("again", r.Already))
	return reply, nil
}

// recallPushedTTL outlasts any sensible client retry of a recall; a
// repeat after it pushes once more, which is harmless.
const recallPushedTTL = 24 * time.Hour

// recallPushed reports whether a recall's push or job was queued; when
// Redis cannot tell, it reports false and the push goes again (a duplicate
// push is harmless, a missing group job is not).
func (s *Service) recallPushed(ctx context.Context, msgID int64) bool {
	n, err := s.rdb.Exists(ctx, rediskey.RecallPushed(msgID)).Result()
	return err == nil && n == 1
}

// markRecallPushed records that a recall's push or job was queued. A
// failure only means a repeat pushes again.
func (s *Service) markRecallPushed(ctx context.Context, msgID int64) {
	if err := s.rdb.Set(ctx, rediskey.RecallPushed(msgID), 1, recallPushedTTL).Err(); err != nil {
		s.log.Warn("recall marker not written; a repeat will push again", zap.Int64("msg_id", msgID), zap.Error(err))
	}
}

// groupRecall queues the SIGNAL job of a group recall: deliver expands the
// members, invalidates their list entries, appends a RECALL mailbox event
// for each (every device) and pushes command 9 to their devices but the
// recalling one.
func (s *Service) groupRecall(ctx context.Context, from Sender, cid, msgID int64, reply *MessageRef) error {
	push, err := protocol.Marshal(reply.push())
	if err != nil {
		return fmt.Errorf("message: recall push: %w", err)
	}
	err = s.enqueueJob(ctx, &queuev1.DeliverJob{
		Kind: queuev1.JobKind_JOB_KIND_SIGNAL, Command: uint32(protocol.CmdRecallMessage), MsgId: msgID, ConversationId: cid,
		ConversationType: protocol.ConversationGroup, SenderId: from.UserID, SenderDevice: from.DeviceID,
		PushData: push, CreatedAtMs: time.Now().UnixMilli(), MailboxEventType: protocol.EventRecall,
	}, 0, nil, time.Now())
	if err != nil {
		s.metrics.EnqueueFailures.Inc()
		return errcode.Unavailable("enqueue recall", err)
	}
	return nil
}

// message reads the message a request names (its conversation too, when
// given): 40401 when there is none.
func (s *Service) message(ctx context.Context, req MessageRef) (store.Message, error) {
	m, err := s.store.GetMessage(ctx, req.MsgID, req.ConversationID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Message{}, errcode.New(errcode.NotFound, "message not found")
	}
	if err != nil {
		return store.Message{}, errcode.Unavailable("message", err)
	}
	return m, nil
}

// Delete handles DELETE_MESSAGE (15): delete for me, on all my devices.
func (s *Service) Delete(ctx context.Context, from Sender, req MessageRef) (*MessageRef, error) {
	if req.MsgID <= 0 || req.ConversationID < 0 {
		return nil, errcode.New(errcode.InvalidArgument, "msg_id is required")
	}
	m, err := s.message(ctx, req)
	if err != nil {
		return nil, err
	}
	if _, err := s.member(ctx, m.ConversationID, from.UserID); err != nil {
		return nil, err
	}
	reply := &MessageRef{MsgID: m.ID, ConversationID: m.ConversationID}
	evID, err := s.ids.Next(ctx)
	if err != nil {
		return nil, errcode.Unavailable("event id", err)
	}
	payload, err := protocol.Marshal(reply.push())
	if err != nil {
		return nil, fmt.Errorf("message: delete event payload: %w", err)
	}
	// The event is for every device of the user (device_id ""), so a device
	// that was offline and already holds the message drops it on sync.
	ev := store.MailboxEvent{UserID: from.UserID, EventType: protocol.EventDelete, ConversationID: m.ConversationID, MsgID: m.ID, Payload: payload}
	deleted, err := s.store.DeleteForUser(ctx, from.UserID, m.ConversationID, m.ID, evID, ev)
	if err != nil {
		return nil, errcode.Unavailable("delete", err)
	}
	if err := s.invalidate(ctx, m.ConversationID, from.UserID); err != nil {
		return nil, err
	}
	ctype, err := s.store.ConversationType(ctx, m.ConversationID)
	if err != nil {
		ctype = 0
	}
	// A repeat changes nothing: no push (the DELETE event brings it to
	// sync either way).
	if deleted {
		s.signal(ctx, from, protocol.CmdDeleteMessage, m.ConversationID, ctype, m.ID, []int64{from.UserID}, reply.push())
	}
	return reply, nil
}

// DeleteForEveryone handles DELETE_MESSAGE (15) with for_everyone and the
// API's DeleteMessageForEveryone (from.UserID 0): the message becomes a
// status-3 tombstone for every member, who get a DELETE mailbox event
// (for_everyone) and a push of 15, as a recall does with its own
// (decision 98). From a device only a group's owner and admins may; the
// sender withdraws their own message with RECALL. Deleting again, or a
// message already recalled, answers success and pushes nothing more.
func (s *Service) DeleteForEveryone(ctx context.Context, from Sender, req MessageRef) (*MessageRef, error) {
	if req.MsgID <= 0 || req.ConversationID < 0 {
		return nil, errcode.New(errcode.InvalidArgument, "msg_id is required")
	}
	m, err := s.message(ctx, req)
	if err != nil {
		return nil, err
	}
	if from.UserID != 0 {
		mem, err := s.member(ctx, m.ConversationID, from.UserID)
		if err != nil {
			return nil, err
		}
		ctype, err := s.store.ConversationType(ctx, m.ConversationID)
		if err != nil {
			return nil, errcode.Unavailable("conversation", err)
		}
		if ctype != store.ConversationGroup || mem.Role < store.RoleAdmin {
			return nil, errcode.New(errcode.Forbidden, "only a group's owner and admins delete a message for everyone; a sender recalls their own")
		}
	}
	ref := MessageRef{MsgID: m.ID, ConversationID: m.ConversationID}
	push := protocol.DeleteRequest{MsgID: jsonid.ID(m.ID), ConversationID: jsonid.ID(m.ConversationID), ForEveryone: true}
	payload, err := protocol.Marshal(push)
	if err != nil {
		return nil, fmt.Errorf("message: delete push: %w", err)
	}
	r, err := s.store.DeleteForEveryone(ctx, m.ID, m.ConversationID, from.UserID, time.Now(),
		func(n int) ([]int64, error) { return mailbox.NewIDs(ctx, s.ids, n) },
		func(member int64, m store.Message) store.MailboxEvent {
			return store.MailboxEvent{UserID: member, EventType: protocol.EventDelete, ConversationID: m.ConversationID, MsgID: m.ID, Payload: payload}
		})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errcode.New(errcode.NotFound, "message not found")
	case err != nil:
		return nil, errcode.Unavailable("delete for everyone", err)
	}
	// The withdrawal marker is shared with recall: a message is withdrawn
	// once, whichever way.
	pushed := r.Already && s.recallPushed(ctx, m.ID)
	if pushed && r.Group {
		return &ref, nil
	}
	if r.Group {
		err := s.enqueueJob(ctx, &queuev1.DeliverJob{
			Kind: queuev1.JobKind_JOB_KIND_SIGNAL, Command: uint32(protocol.CmdDeleteMessage), MsgId: m.ID, ConversationId: m.ConversationID,
			ConversationType: protocol.ConversationGroup, SenderId: from.UserID, SenderDevice: from.DeviceID,
			PushData: payload, CreatedAtMs: time.Now().UnixMilli(), MailboxEventType: protocol.EventDelete,
		}, 0, nil, time.Now())
		if err != nil {
			s.metrics.EnqueueFailures.Inc()
			return nil, errcode.Unavailable("enqueue delete", err)
		}
		s.markRecallPushed(ctx, m.ID)
		return &ref, nil
	}
	if err := s.invalidate(ctx, m.ConversationID, r.Members...); err != nil {
		return nil, err
	}
	if pushed {
		return &ref, nil
	}
	if s.signal(ctx, from, protocol.CmdDeleteMessage, m.ConversationID, protocol.ConversationP2P, m.ID, r.Members, push) {
		s.markRecallPushed(ctx, m.ID)
	}
	return &ref, nil
}

// Settings handles CONVERSATION_SETTINGS (16): mute / pin flags of the
// user's membership (absent = unchanged); the answer carries both flags.
func (s *Service) Settings(ctx context.Context, from Sender, req SettingsChange) (*Settings, error) {
	cid := req.ConversationID
	if cid <= 0 {
		return nil, errcode.New(errcode.InvalidArgument, "conversation_id is required")
	}
	before, err := s.member(ctx, cid, from.UserID)
	if err != nil {
		return nil, err
	}
	m, err := s.store.UpdateSettings(ctx, cid, from.UserID, req.Muted, req.Pinned, req.Hidden)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errcode.New(errcode.Forbidden, "not a member of the conversation")
	}
	if err != nil {
		return nil, errcode.Unavailable("settings", err)
	}
	conv, err := s.store.GetConversation(ctx, cid)
	if err != nil {
		return nil, errcode.Unavailable("conversation", err)
	}
	reply := &Settings{ConversationID: cid, Muted: m.Muted, Pinned: m.Pinned, Hidden: m.Hidden(conv.LastMsgID)}
	if req.Muted == nil && req.Pinned == nil && req.Hidden == nil {
		return reply, nil
	}
	if err := s.invalidate(ctx, cid, from.UserID); err != nil {
		return nil, err
	}
	// Settings that did not change push nothing to the other devices.
	if before.Muted != m.Muted || before.Pinned != m.Pinned || before.Hidden(conv.LastMsgID) != reply.Hidden {
		s.signal(ctx, from, protocol.CmdConversationSettings, cid, conv.Type, 0, []int64{from.UserID}, reply.push())
	}
	return reply, nil
}
