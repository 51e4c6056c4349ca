package message

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/mailbox"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// ReactionRequest adds (Add) or removes a user's Emoji on a message
// (ConversationID optional).
type ReactionRequest struct {
	MsgID          int64
	ConversationID int64
	Emoji          string
	Add            bool
}

// Reaction is the answer to a reaction change: the emoji's count on the
// message now, and whether anything changed.
type Reaction struct {
	MsgID          int64
	ConversationID int64
	Emoji          string
	Count          int
	Changed        bool
}

// React handles REACTION (25) add and remove and the API's AddReaction and
// RemoveReaction: a member reacts to a message that is neither recalled
// nor deleted, with one emoji (protocol.ValidEmoji), within
// logic.reaction_kinds emojis per message and logic.reactions_per_user
// per user (40303 past either); adding one the user has is 40902. Every
// member learns of a change: a mailbox event REACTION with the push's
// fields, and the push to their devices but the acting one (decision
// 107). Removing a reaction the user does not have answers the count and
// changes nothing.
func (s *Service) React(ctx context.Context, from Sender, req ReactionRequest) (*Reaction, error) {
	switch {
	case req.MsgID <= 0 || req.ConversationID < 0:
		return nil, errcode.Invalid("msg_id", "must be a positive id")
	case !protocol.ValidEmoji(req.Emoji):
		return nil, errcode.Invalid("emoji", fmt.Sprintf("not one emoji of at most %d bytes", protocol.MaxEmojiBytes))
	}
	m, err := s.message(ctx, MessageRef{MsgID: req.MsgID, ConversationID: req.ConversationID})
	if err != nil {
		return nil, err
	}
	if _, err := s.member(ctx, m.ConversationID, from.UserID); err != nil {
		return nil, err
	}
	pushOf := func(m store.Message, count int) protocol.ReactionPush {
		return protocol.ReactionPush{MsgID: jsonid.ID(m.ID), ConversationID: jsonid.ID(m.ConversationID), UserID: jsonid.ID(from.UserID),
			Emoji: req.Emoji, Added: req.Add, Count: count}
	}
	r, err := s.store.React(ctx, m.ID, m.ConversationID,
		store.ReactionChange{UserID: from.UserID, Emoji: req.Emoji, Add: req.Add, Kinds: s.cfg.ReactionKinds, PerUser: s.cfg.ReactionsPerUser, Now: time.Now()},
		func(n int) ([]int64, error) { return mailbox.NewIDs(ctx, s.ids, n) },
		func(member int64, m store.Message, count int) store.MailboxEvent {
			p, _ := protocol.Marshal(pushOf(m, count))
			return store.MailboxEvent{UserID: member, EventType: protocol.EventReaction, ConversationID: m.ConversationID, MsgID: m.ID, Payload: p}
		})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errcode.New(errcode.NotFound, "message not found")
	case errors.Is(err, store.ErrWithdrawn):
		return nil, errcode.New(errcode.Forbidden, "the message was recalled or deleted")
	case errors.Is(err, store.ErrDuplicateReaction):
		return nil, errcode.New(errcode.Duplicate, "duplicate: already reacted with this emoji")
	case errors.Is(err, store.ErrReactionKinds):
		return nil, errcode.New(errcode.LimitReached, fmt.Sprintf("limit reached: the message carries %d different emojis (logic.reaction_kinds)", s.cfg.ReactionKinds))
	case errors.Is(err, store.ErrReactionsPerUser):
		return nil, errcode.New(errcode.LimitReached, fmt.Sprintf("limit reached: %d reactions of yours on this message (logic.reactions_per_user)", s.cfg.ReactionsPerUser))
	case err != nil:
		return nil, errcode.Unavailable("react", err)
	}
	reply := &Reaction{MsgID: m.ID, ConversationID: m.ConversationID, Emoji: req.Emoji, Count: r.Count, Changed: r.Changed}
	if !r.Changed {
		return reply, nil
	}
	push := pushOf(r.Message, r.Count)
	if err := s.propagate(ctx, from, protocol.CmdReaction, protocol.EventReaction, r.Message, r.Group, r.Members, push, nil, true); err != nil {
		return nil, err
	}
	s.log.Debug("reaction", zap.Int64("user_id", from.UserID), zap.Int64("msg_id", m.ID), zap.String("emoji", req.Emoji),
		zap.Bool("added", req.Add), zap.Int("count", r.Count))
	return reply, nil
}

// propagate tells the members of m's conversation of a change to m. A
// P2P conversation's mailbox events were written in the change's
// transaction, so the push to members is a realtime hint (signal). A
// group's events are deliver's work, in chunks: the job (the push, and
// the event's payload when it differs, eventPayload) must be queued, or
// the change is answered 50301 and the client's retry queues it again.
// keepLists spares the members' list entries (the change shows in no
// preview).
func (s *Service) propagate(ctx context.Context, from Sender, cmd uint16, eventType int, m store.Message, group bool, members []int64,
	push any, eventPayload []byte, keepLists bool) error {
	if !group {
		s.signal(ctx, from, cmd, m.ConversationID, protocol.ConversationP2P, m.ID, members, push)
		return nil
	}
	data, err := protocol.Marshal(push)
	if err != nil {
		return fmt.Errorf("message: push of command %d: %w", cmd, err)
	}
	if err := s.enqueueJob(ctx, &queuev1.DeliverJob{
		Kind: queuev1.JobKind_JOB_KIND_SIGNAL, Command: uint32(cmd), MsgId: m.ID, ConversationId: m.ConversationID,
		ConversationType: protocol.ConversationGroup, SenderId: from.UserID, SenderDevice: from.DeviceID,
		PushData: data, MailboxPayload: eventPayload, CreatedAtMs: time.Now().UnixMilli(), MailboxEventType: int32(eventType),
		KeepLists: keepLists,
	}, 0, nil, time.Now()); err != nil {
		s.metrics.EnqueueFailures.Inc()
		return errcode.Unavailable(fmt.Sprintf("enqueue command %d", cmd), err)
	}
	return nil
}

// ReactionsPage is the answer to a get: the counts of the asked messages
// that have reactions, in id order. More says the page stopped at its
// byte budget; the ids from Next on were not answered.
type ReactionsPage struct {
	ConversationID int64
	Messages       []MessageReactions
	More           bool
	Next           int64
}

// MessageReactions are one message's counts, in the order the emojis
// were first used.
type MessageReactions struct {
	MsgID  int64
	Counts []store.ReactionCount
}

// Reactions handles REACTION get and the API's ListReactions: the counts
// and "reacted by me" of up to 100 messages of a conversation the user is
// a member of; budget (0: none) bounds the page's bytes as
// protocol.MessageReactionsBound counts them.
func (s *Service) Reactions(ctx context.Context, userID, cid int64, msgIDs []int64, budget int) (*ReactionsPage, error) {
	switch {
	case cid <= 0:
		return nil, errcode.Invalid("conversation_id", "must be a positive id")
	case len(msgIDs) == 0 || len(msgIDs) > protocol.MaxReactionMsgIDs:
		return nil, errcode.Invalid("msg_ids", fmt.Sprintf("1 to %d message ids", protocol.MaxReactionMsgIDs))
	}
	ids := slices.Clone(msgIDs)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if ids[0] <= 0 {
		return nil, errcode.Invalid("msg_ids", "must be positive ids")
	}
	if _, err := s.member(ctx, cid, userID); err != nil {
		return nil, err
	}
	counts, err := s.store.ReactionCounts(ctx, cid, userID, ids)
	if err != nil {
		return nil, errcode.Unavailable("reactions", err)
	}
	page := &ReactionsPage{ConversationID: cid}
	used := 0
	for lo := 0; lo < len(counts); {
		hi := lo + 1
		for hi < len(counts) && counts[hi].MsgID == counts[lo].MsgID {
			hi++
		}
		if used += protocol.MessageReactionsBound(hi - lo); budget > 0 && used > budget && len(page.Messages) > 0 {
			page.More, page.Next = true, counts[lo].MsgID
			break
		}
		page.Messages = append(page.Messages, MessageReactions{MsgID: counts[lo].MsgID, Counts: counts[lo:hi]})
		lo = hi
	}
	return page, nil
}

// ReactorsPage is a page of who reacted to a message with one emoji.
type ReactorsPage struct {
	MsgID          int64
	ConversationID int64
	Emoji          string
	Count          int
	Users          []store.Reactor
	More           bool
	Next           int64
}

// Reactors handles REACTION users and the API's ListReactors: who reacted
// to a message of a conversation the user is a member of with emoji,
// limit (1–100, 0: 50) at a time by user id after after.
func (s *Service) Reactors(ctx context.Context, userID int64, ref MessageRef, emoji string, after int64, limit int) (*ReactorsPage, error) {
	switch {
	case ref.MsgID <= 0 || ref.ConversationID < 0:
		return nil, errcode.Invalid("msg_id", "must be a positive id")
	case !protocol.ValidEmoji(emoji):
		return nil, errcode.Invalid("emoji", fmt.Sprintf("not one emoji of at most %d bytes", protocol.MaxEmojiBytes))
	case after < 0:
		return nil, errcode.Invalid("after", "must not be negative")
	case limit < 0 || limit > protocol.MaxReactorsLimit:
		return nil, errcode.Invalid("limit", fmt.Sprintf("must be 0 to %d", protocol.MaxReactorsLimit))
	case limit == 0:
		limit = protocol.DefaultReactorsLimit
	}
	m, err := s.message(ctx, ref)
	if err != nil {
		return nil, err
	}
	if _, err := s.member(ctx, m.ConversationID, userID); err != nil {
		return nil, err
	}
	page := &ReactorsPage{MsgID: m.ID, ConversationID: m.ConversationID, Emoji: emoji}
	if m.Status != store.MessageNormal {
		return page, nil
	}
	users, n, err := s.store.Reactors(ctx, m.ID, emoji, after, limit+1)
	if err != nil {
		return nil, errcode.Unavailable("reactors", err)
	}
	page.Count = n
	if len(users) > limit {
		users = users[:limit]
		page.More, page.Next = true, users[limit-1].UserID
	}
	page.Users = users
	return page, nil
}
