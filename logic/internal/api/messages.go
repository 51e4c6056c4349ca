package api

import (
	"context"
	"encoding/json"

	"github.com/sparkim/spark/logic/internal/inbox"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// SendMessage sends as a user or as the system account through the same
// send path as SEND_MESSAGE (idempotency, permissions, ordered commit,
// enqueue), without a client's rate limits.
func (s *Server) SendMessage(ctx context.Context, req *logicv1.SendMessageRequest) (*logicv1.SendMessageReply, error) {
	from := message.Sender{UserID: req.SenderId}
	switch {
	case req.System && req.SenderId != 0:
		return nil, invalid("sender_id", "must be 0 with system (the system account is logic.system_user_id)")
	case req.System:
		from = message.Sender{UserID: s.cfg.SystemUserID, System: true}
	case req.SenderId <= 0:
		return nil, invalid("sender_id", "must be a positive id (or set system)")
	}
	if req.Content == "" {
		return nil, invalid("content", "must be a JSON object")
	}
	ack, err := s.messages.Send(ctx, from, message.SendRequest{
		To:          message.Target{UserID: req.ToUserId, GroupID: req.GroupId, ConversationID: req.ConversationId},
		ClientMsgID: req.ClientMsgId, MessageType: int(req.MessageType), Content: json.RawMessage(req.Content),
		Flags: message.Flags{NoUnread: req.NoUnread, NoOfflinePush: req.NoOfflinePush},
	})
	if err != nil {
		return nil, s.statusOf("SendMessage", err)
	}
	return &logicv1.SendMessageReply{
		MsgId: ack.MsgID.Int64(), ConversationId: ack.ConversationID.Int64(),
		ServerTimeMs: ack.ServerTime, ClientMsgId: ack.ClientMsgID,
	}, nil
}

// GetHistory pages a conversation's messages as user_id sees them, with
// SYNC_MESSAGES's paging and permission (members only).
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
	rep, more, err := s.inbox.SyncMessages(ctx, inbox.User{UserID: req.UserId}, protocol.SyncMessagesRequest{
		ConversationID: jsonid.ID(req.ConversationId), LastMsgID: jsonid.ID(req.AfterMsgId), Limit: int(req.Limit),
	})
	if err != nil {
		return nil, s.statusOf("GetHistory", err)
	}
	out := &logicv1.GetHistoryReply{NextMsgId: rep.NextMsgID.Int64(), More: more, Messages: make([]*logicv1.HistoryMessage, 0, len(rep.Messages))}
	for _, m := range rep.Messages {
		out.Messages = append(out.Messages, &logicv1.HistoryMessage{
			MsgId: m.MsgID.Int64(), ConversationId: m.ConversationID.Int64(), ConversationType: int32(m.ConversationType),
			SenderId: m.SenderID.Int64(), ClientMsgId: m.ClientMsgID, MessageType: int32(m.MessageType),
			Content: string(m.Content), CreatedAtMs: m.CreatedAt, Status: int32(m.Status),
		})
	}
	return out, nil
}
