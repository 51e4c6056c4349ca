package api

import (
	"context"
	"encoding/json"
	"math"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/logic/internal/inbox"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/signal"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// SendMessage sends as a user or as the system account through the same
// send path as SEND_MESSAGE (idempotency, permissions, ordered commit,
// enqueue), without a client's rate limits.
func (s *Server) SendMessage(ctx context.Context, req *logicv1.SendMessageRequest) (*logicv1.SendMessageReply, error) {
	from := message.Sender{UserID: req.SenderId, API: true}
	switch {
	case req.System && req.SenderId != 0:
		return nil, invalid("sender_id", "must be 0 with system (the system account is logic.system_user_id)")
	case req.System:
		from = message.Sender{UserID: s.cfg.SystemUserID, System: true, API: true}
	case req.SenderId <= 0:
		return nil, invalid("sender_id", "must be a positive id (or set system)")
	}
	if req.Content == "" {
		return nil, invalid("content", "must be a JSON object")
	}
	ack, err := s.messages.Send(ctx, from, message.SendRequest{
		To:          message.Target{UserID: req.ToUserId, GroupID: req.GroupId, ConversationID: req.ConversationId},
		ClientMsgID: req.ClientMsgId, MessageType: int(req.MessageType), Content: json.RawMessage(req.Content),
		ReplyTo: req.ReplyTo,
		Flags:   message.Flags{NoUnread: req.NoUnread, NoOfflinePush: req.NoOfflinePush},
	})
	if err != nil {
		return nil, s.statusOf("SendMessage", err)
	}
	return &logicv1.SendMessageReply{
		MsgId: ack.MsgID, ConversationId: ack.ConversationID,
		ServerTimeMs: ack.ServerTime.UnixMilli(), ClientMsgId: ack.ClientMsgID,
	}, nil
}

// DeleteMessageForEveryone deletes a message for every member, as a
// group's owner does with DELETE_MESSAGE for_everyone but for any
// conversation: the business decides who may.
func (s *Server) DeleteMessageForEveryone(ctx context.Context, req *logicv1.DeleteMessageForEveryoneRequest) (*logicv1.DeleteMessageForEveryoneReply, error) {
	if req.MsgId <= 0 {
		return nil, invalid("msg_id", "must be a positive id")
	}
	if req.ConversationId < 0 {
		return nil, invalid("conversation_id", "must be 0 or a positive id")
	}
	ref, err := s.messages.DeleteForEveryone(ctx, message.Sender{API: true}, message.MessageRef{MsgID: req.MsgId, ConversationID: req.ConversationId})
	if err != nil {
		return nil, s.statusOf("DeleteMessageForEveryone", err)
	}
	return &logicv1.DeleteMessageForEveryoneReply{MsgId: ref.MsgID, ConversationId: ref.ConversationID}, nil
}

// EditMessage replaces the content of a text message on its sender's
// behalf.
func (s *Server) EditMessage(ctx context.Context, req *logicv1.EditMessageRequest) (*logicv1.EditMessageReply, error) {
	if err := positive("sender_id", req.SenderId); err != nil {
		return nil, err
	}
	if req.MsgId <= 0 {
		return nil, invalid("msg_id", "must be a positive id")
	}
	if req.ConversationId < 0 {
		return nil, invalid("conversation_id", "must be 0 or a positive id")
	}
	e, err := s.messages.Edit(ctx, message.Sender{UserID: req.SenderId, API: true, System: req.SenderId == s.cfg.SystemUserID},
		message.EditRequest{MsgID: req.MsgId, ConversationID: req.ConversationId, Content: []byte(req.Content)})
	if err != nil {
		return nil, s.statusOf("EditMessage", err)
	}
	return &logicv1.EditMessageReply{MsgId: e.MsgID, ConversationId: e.ConversationID, Version: int32(e.Version),
		EditedAtMs: e.EditedAt.UnixMilli()}, nil
}

// MaxHistoryBytes bounds a GetHistory reply: gRPC clients refuse a
// message over 4 MiB unless told otherwise (grpc.MaxCallRecvMsgSize), so
// a page stops before its messages would pass that, whatever the clients'
// frame size. Its count is bounded by the request's limit (at most
// inbox.MaxLimit).
const MaxHistoryBytes = 4 << 20

// historyReserve is room in MaxHistoryBytes for the reply's fields other
// than its messages (next_msg_id, more), rounded up.
const historyReserve = 64

// historyOverhead is the most bytes a HistoryMessage in the reply takes
// beyond its content and client_msg_id: every number at its widest, the
// most reactions a message may carry, the length prefixes of contents up
// to 2 MiB (content is at most 64 KiB), and the repeated field's own tag
// and length.
var historyOverhead = func() int {
	const contentLen, clientMsgIDLen = 1 << 17, 64
	widest := &logicv1.HistoryMessage{
		MsgId: math.MinInt64, ConversationId: math.MinInt64, ConversationType: math.MinInt32,
		SenderId: math.MinInt64, ClientMsgId: strings.Repeat("x", clientMsgIDLen), MessageType: math.MinInt32,
		Content: strings.Repeat("x", contentLen), CreatedAtMs: math.MinInt64, Status: math.MinInt32,
		Version: math.MinInt32, EditedAtMs: math.MinInt64, Reactions: widestReactions(),
	}
	return proto.Size(widest) - contentLen - clientMsgIDLen + 1 + 3
}()

// widestReactions are the most reactions a message carries, each at its
// widest.
func widestReactions() []*logicv1.ReactionCount {
	out := make([]*logicv1.ReactionCount, protocol.MaxReactionKinds)
	for i := range out {
		out[i] = &logicv1.ReactionCount{Emoji: strings.Repeat("x", protocol.MaxEmojiBytes), Count: math.MinInt32, Me: true}
	}
	return out
}

// historyBound is GetHistory's own page bound (inbox.SizeBound).
var historyBound = inbox.SizeBound{
	Budget:      MaxHistoryBytes - historyReserve,
	MessageSize: func(contentLen, clientMsgIDLen int) int { return historyOverhead + contentLen + clientMsgIDLen },
}

// GetHistory pages a conversation's messages as user_id sees them, with
// SYNC_MESSAGES's cursor and permission (members only) and its own page
// bound (MaxHistoryBytes).
func (s *Server) GetHistory(ctx context.Context, req *logicv1.GetHistoryRequest) (*logicv1.GetHistoryReply, error) {
	switch {
	case req.UserId <= 0:
		return nil, invalid("user_id", "must be a positive id")
	case req.ConversationId <= 0:
		return nil, invalid("conversation_id", "must be a positive id")
	case req.AfterMsgId < 0:
		return nil, invalid("after_msg_id", "must not be negative")
	case req.Limit < 0 || req.Limit > inbox.MaxLimit:
		return nil, invalid("limit", "must be 0 to 200")
	}
	page, err := s.inbox.History(ctx, inbox.HistoryQuery{
		UserID: req.UserId, ConversationID: req.ConversationId, After: req.AfterMsgId, Limit: int(req.Limit), Bound: historyBound,
	})
	if err != nil {
		return nil, s.statusOf("GetHistory", err)
	}
	out := &logicv1.GetHistoryReply{NextMsgId: page.Next, More: page.More, Messages: make([]*logicv1.HistoryMessage, 0, len(page.Messages))}
	ids := make([]int64, 0, len(page.Messages))
	for _, m := range page.Messages {
		out.Messages = append(out.Messages, historyMessage(m))
		ids = append(ids, m.ID)
	}
	if err := s.attachReactions(ctx, req.UserId, req.ConversationId, out.Messages, ids); err != nil {
		return nil, s.statusOf("GetHistory", err)
	}
	return out, nil
}

// historyMessage is the protobuf form of a stored message; status is
// SYNC_MESSAGES's (1 normal, 2 recalled, 3 deleted for everyone).
func historyMessage(m inbox.Message) *logicv1.HistoryMessage {
	h := &logicv1.HistoryMessage{
		MsgId: m.ID, ConversationId: m.ConversationID, ConversationType: int32(m.ConversationType),
		SenderId: m.SenderID, ClientMsgId: m.ClientMsgID, MessageType: int32(m.MessageType),
		Content: string(m.Content), CreatedAtMs: m.CreatedAt.UnixMilli(), Status: protocol.StatusNormal,
	}
	switch {
	case m.Deleted:
		h.Status = protocol.StatusDeleted
		h.Content = ""
	case m.Recalled:
		h.Status = protocol.StatusRecalled
	case m.Version > 0:
		h.Version, h.EditedAtMs = int32(m.Version), m.EditedAt.UnixMilli()
	}
	return h
}

// SendSignal sends a transient signal into a conversation on a member's
// behalf (pushed to every online device of the other members and of the
// sender's own, never stored).
func (s *Server) SendSignal(ctx context.Context, req *logicv1.SendSignalRequest) (*logicv1.SendSignalReply, error) {
	if s.signals == nil {
		return nil, s.statusOf("SendSignal", errcode.New(errcode.Internal, "signals are not configured"))
	}
	if err := positive("sender_id", req.SenderId); err != nil {
		return nil, err
	}
	var payload []byte
	if req.Payload != "" {
		payload = []byte(req.Payload)
	}
	n, err := s.signals.Send(ctx, signal.Sender{UserID: req.SenderId},
		signal.Request{ConversationID: req.ConversationId, Kind: req.Kind, Payload: payload})
	if err != nil {
		return nil, s.statusOf("SendSignal", err)
	}
	return &logicv1.SendSignalReply{Delivered: int32(n)}, nil
}
