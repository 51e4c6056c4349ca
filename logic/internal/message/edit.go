package message

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/conversation"
	"github.com/sparkim/spark/logic/internal/mailbox"
	"github.com/sparkim/spark/logic/internal/sendhook"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// EditRequest asks to replace the content of one of the sender's text
// messages (ConversationID optional).
type EditRequest struct {
	MsgID          int64
	ConversationID int64
	Content        []byte
}

// Edited is the answer to an edit: the version now in effect.
type Edited struct {
	MsgID          int64
	ConversationID int64
	Version        int
	EditedAt       time.Time
}

// Edit handles EDIT_MESSAGE (24) and the API's EditMessage: the sender of
// a text message replaces its content within logic.edit_window, checked
// like a send's (type, 64 KiB, the size rule) and by the before-send hook;
// the message keeps its id and reply snapshot, its version goes up, and
// every member learns it: a mailbox event EDIT (ids and version only; a
// device fetches the content by id) and a push of 24 with the new content
// to their other devices (decision 106). Repeating an edit with the same
// content answers the version in effect and pushes nothing.
func (s *Service) Edit(ctx context.Context, from Sender, req EditRequest) (*Edited, error) {
	if req.MsgID <= 0 || req.ConversationID < 0 {
		return nil, errcode.New(errcode.InvalidArgument, "msg_id is required")
	}
	orig, err := s.message(ctx, MessageRef{MsgID: req.MsgID, ConversationID: req.ConversationID})
	if err != nil {
		return nil, err
	}
	switch {
	case orig.SenderID != from.UserID:
		return nil, errcode.New(errcode.Forbidden, "only the sender may edit a message")
	case orig.Status != store.MessageNormal:
		return nil, errcode.New(errcode.Forbidden, "the message was recalled or deleted")
	case orig.MessageType != protocol.MessageText:
		return nil, errcode.Invalid("msg_id", "only text messages can be edited")
	}
	sr := SendRequest{To: conversation.Target{ConversationID: orig.ConversationID}, ClientMsgID: orig.ClientMsgID, MessageType: protocol.MessageText}
	content, err := s.checkContent(&sr, req.Content)
	if err != nil {
		return nil, err
	}
	if protocol.HasReplyKey(content) {
		return nil, errcode.New(errcode.InvalidArgument, "content."+protocol.ReplyKey+" is written by the server")
	}
	// The sender must still be allowed to write into the conversation: a
	// member muted in the group, or blocked, cannot change what others read.
	conv, err := s.convs.Resolve(ctx, from.UserID, sr.To)
	if err != nil {
		return nil, err
	}
	if conv, err = s.convs.Open(ctx, conversation.Sender{UserID: from.UserID, System: from.System}, conv, time.Now()); err != nil {
		return nil, err
	}
	if kind, ok := s.hookKind(from, conv); ok {
		if content, err = s.hookEdit(ctx, kind, from, conv, &sr, orig.ID, content); err != nil {
			return nil, err
		}
	}
	if snap := protocol.ReplySnapshot(orig.Content); snap != nil {
		if content, err = protocol.WithReply(content, snap); err != nil {
			return nil, errcode.Wrap(errcode.Internal, "keep the reply snapshot", err)
		}
	}
	eventOf := func(m store.Message) ([]byte, error) {
		return protocol.Marshal(protocol.EditPush{MsgID: jsonid.ID(m.ID), ConversationID: jsonid.ID(m.ConversationID),
			SenderID: jsonid.ID(m.SenderID), Version: m.Version, EditedAt: m.EditedAt.Time.UnixMilli()})
	}
	e, err := s.store.EditMessage(ctx, orig.ID, orig.ConversationID, from.UserID, s.cfg.EditWindow, content, time.Now(),
		func(n int) ([]int64, error) { return mailbox.NewIDs(ctx, s.ids, n) },
		func(member int64, m store.Message) store.MailboxEvent {
			p, _ := eventOf(m)
			return store.MailboxEvent{UserID: member, EventType: protocol.EventEdit, ConversationID: m.ConversationID, MsgID: m.ID, Payload: p}
		})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errcode.New(errcode.NotFound, "message not found")
	case errors.Is(err, store.ErrNotSender):
		return nil, errcode.New(errcode.Forbidden, "only the sender may edit a message")
	case errors.Is(err, store.ErrWithdrawn):
		return nil, errcode.New(errcode.Forbidden, "the message was recalled or deleted")
	case errors.Is(err, store.ErrNotText):
		return nil, errcode.Invalid("msg_id", "only text messages can be edited")
	case errors.Is(err, store.ErrEditWindow):
		return nil, errcode.New(errcode.Forbidden, "edit window has passed")
	case err != nil:
		return nil, errcode.Unavailable("edit", err)
	}
	m := e.Message
	reply := &Edited{MsgID: m.ID, ConversationID: m.ConversationID, Version: m.Version, EditedAt: m.EditedAt.Time}
	if e.Unchanged {
		return reply, nil
	}
	push := protocol.EditPush{MsgID: jsonid.ID(m.ID), ConversationID: jsonid.ID(m.ConversationID), SenderID: jsonid.ID(m.SenderID),
		Version: m.Version, EditedAt: m.EditedAt.Time.UnixMilli(), Content: m.Content}
	ev, err := eventOf(m)
	if err != nil {
		return nil, fmt.Errorf("message: edit event: %w", err)
	}
	// A list whose preview is this message shows the new text (a group's
	// lists are deliver's work).
	if err := s.invalidate(ctx, m.ConversationID, e.Members...); err != nil {
		return nil, err
	}
	if err := s.propagate(ctx, from, protocol.CmdEditMessage, protocol.EventEdit, m, e.Group, e.Members, push, ev, false); err != nil {
		return nil, err
	}
	s.log.Debug("message edited", zap.Int64("user_id", from.UserID), zap.Int64("conversation_id", m.ConversationID),
		zap.Int64("msg_id", m.ID), zap.Int("version", m.Version))
	return reply, nil
}

// hookEdit asks the before-send hook about an edit as about a send (its
// edit_of names the message), returning the content to store.
func (s *Service) hookEdit(ctx context.Context, kind sendhook.Kind, from Sender, conv conversation.Conversation, req *SendRequest, msgID int64, content []byte) ([]byte, error) {
	msg := hookMessage(from, conv, req, content)
	msg.EditOf = msgID
	return s.cfg.BeforeSend.Check(ctx, kind, msg, func(raw json.RawMessage) ([]byte, error) {
		c, err := s.checkContent(req, raw)
		if err == nil && protocol.HasReplyKey(c) {
			return nil, errcode.New(errcode.InvalidArgument, "content."+protocol.ReplyKey+" is written by the server")
		}
		return c, err
	})
}
