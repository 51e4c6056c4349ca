// Package clientwire converts between the client protocol's JSON bodies
// (pkg/protocol) and the domain services' typed requests and results. The
// client gateway is its user; a front door that speaks the same bodies
// (the HTTP API) can be another, while the business API maps the same
// domain types to protobuf itself. The domain services never see these
// bodies, so no front door's encoding or size limit reaches them.
package clientwire

import (
	"encoding/json"
	"math"

	"github.com/sparkim/spark/logic/internal/auth"
	"github.com/sparkim/spark/logic/internal/inbox"
	"github.com/sparkim/spark/logic/internal/mailbox"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// SendRequest converts the SEND_MESSAGE body.
func SendRequest(w protocol.SendRequest) message.SendRequest {
	return message.SendRequest{
		To:          message.Target{UserID: w.ToUserID.Int64(), GroupID: w.GroupID.Int64(), ConversationID: w.ConversationID.Int64()},
		ClientMsgID: w.ClientMsgID, MsgID: w.MsgID.Int64(), MessageType: w.MessageType, Content: w.Content,
		ReplyTo: w.ReplyTo.Int64(),
	}
}

// PageBound is the byte bound of a sync page answered in frames of
// maxFrame bytes (logic.max_frame_size): the page's list fits what the
// frame leaves after header and envelope, each message counted at its
// exact JSON upper bound.
func PageBound(maxFrame int) inbox.SizeBound {
	return inbox.SizeBound{Budget: protocol.PageBudget(maxFrame), MessageSize: protocol.MessageBound}
}

// HistoryQuery converts the SYNC_MESSAGES body of user uid, bounded by
// bound (PageBound).
func HistoryQuery(uid int64, w protocol.SyncMessagesRequest, bound inbox.SizeBound) inbox.HistoryQuery {
	q := inbox.HistoryQuery{UserID: uid, ConversationID: w.ConversationID.Int64(), After: w.LastMsgID.Int64(), Limit: w.Limit, Bound: bound}
	for _, id := range w.MsgIDs {
		q.IDs = append(q.IDs, id.Int64())
	}
	return q
}

// SyncMessagesReply is the data of the SYNC_MESSAGES answer of page.
func SyncMessagesReply(page inbox.HistoryPage) *protocol.SyncMessagesReply {
	r := &protocol.SyncMessagesReply{
		ConversationID: jsonid.ID(page.ConversationID), NextMsgID: jsonid.ID(page.Next),
		Messages: make([]protocol.Message, 0, len(page.Messages)),
	}
	for _, m := range page.Messages {
		r.Messages = append(r.Messages, Message(m))
	}
	return r
}

// Message is the client form of a stored message.
func Message(m inbox.Message) protocol.Message {
	w := protocol.Message{
		MsgID: jsonid.ID(m.ID), ConversationID: jsonid.ID(m.ConversationID), ConversationType: m.ConversationType,
		SenderID: jsonid.ID(m.SenderID), ClientMsgID: m.ClientMsgID, MessageType: m.MessageType,
		CreatedAt: m.CreatedAt.UnixMilli(), Status: protocol.StatusNormal,
	}
	switch {
	case m.Deleted:
		w.Status = protocol.StatusDeleted
	case m.Recalled:
		w.Status = protocol.StatusRecalled
	default:
		w.Content = json.RawMessage(m.Content)
		if m.Version > 0 {
			w.Version, w.EditedAt = m.Version, m.EditedAt.UnixMilli()
		}
	}
	return w
}

// SendAck is the data of SEND_ACK.
func SendAck(a *message.Ack) protocol.SendAck {
	return protocol.SendAck{
		MsgID: jsonid.ID(a.MsgID), ClientMsgID: a.ClientMsgID,
		ConversationID: jsonid.ID(a.ConversationID), ServerTime: a.ServerTime.UnixMilli(),
	}
}

// ReadMark converts the READ_MESSAGE body; last_msg_id is an alias of
// msg_id, taken when msg_id is not set.
func ReadMark(w protocol.ReadRequest) message.ReadMark {
	mid := w.MsgID.Int64()
	if mid <= 0 {
		mid = w.LastMsgID.Int64()
	}
	return message.ReadMark{ConversationID: w.ConversationID.Int64(), MsgID: mid}
}

// ReadReply is the data of the READ_MESSAGE answer.
func ReadReply(r *message.ReadMark) protocol.ReadReply {
	return protocol.ReadReply{ConversationID: jsonid.ID(r.ConversationID), MsgID: jsonid.ID(r.MsgID)}
}

// MessageRef converts the RECALL_MESSAGE and DELETE_MESSAGE body.
func MessageRef(w protocol.MessageRef) message.MessageRef {
	return message.MessageRef{MsgID: w.MsgID.Int64(), ConversationID: w.ConversationID.Int64()}
}

// MessageRefReply is the data of the RECALL_MESSAGE and DELETE_MESSAGE
// answers.
func MessageRefReply(r *message.MessageRef) protocol.MessageRef {
	return protocol.MessageRef{MsgID: jsonid.ID(r.MsgID), ConversationID: jsonid.ID(r.ConversationID)}
}

// DeletedForEveryoneReply is the data of DELETE_MESSAGE's answer to a
// deletion for everyone.
func DeletedForEveryoneReply(r *message.MessageRef) protocol.DeleteRequest {
	return protocol.DeleteRequest{MsgID: jsonid.ID(r.MsgID), ConversationID: jsonid.ID(r.ConversationID), ForEveryone: true}
}

// SettingsChange converts the CONVERSATION_SETTINGS body.
func SettingsChange(w protocol.SettingsRequest) message.SettingsChange {
	return message.SettingsChange{ConversationID: w.ConversationID.Int64(), Muted: w.Muted, Pinned: w.Pinned, Hidden: w.Hidden}
}

// SettingsReply is the data of the CONVERSATION_SETTINGS answer.
func SettingsReply(r *message.Settings) protocol.SettingsReply {
	return protocol.SettingsReply{ConversationID: jsonid.ID(r.ConversationID), Muted: r.Muted, Pinned: r.Pinned, Hidden: r.Hidden}
}

// InboxQuery converts the SYNC_INBOX body of a device, bounded by bound
// (ListBound).
func InboxQuery(uid int64, device string, w protocol.SyncInboxRequest, bound inbox.ListBound) inbox.InboxQuery {
	return inbox.InboxQuery{
		UserID: uid, DeviceID: device, DialogCursor: string(w.DialogCursor), MailboxSeq: w.MailboxSeq.Int64(),
		Limit: w.Limit, Bound: bound,
	}
}

// ListBound is the byte bound of a SYNC_INBOX page answered in frames of
// maxFrame bytes (logic.max_frame_size): each entry counted at its JSON
// length.
func ListBound(maxFrame int) inbox.ListBound {
	return inbox.ListBound{
		Budget:           protocol.PageBudget(maxFrame),
		ConversationSize: func(c inbox.Conversation) int { return encodedLen(Conversation(c)) },
		EventSize:        func(e mailbox.Event) int { return encodedLen(MailboxEvent(e)) },
	}
}

// encodedLen is the length of v as it will be written.
func encodedLen(v any) int {
	b, err := protocol.Marshal(v)
	if err != nil {
		// Unencodable entries fail the whole answer when it is written;
		// counting them as huge only ends the page early.
		return math.MaxInt32
	}
	return len(b)
}

// SyncInboxReply is the data of the SYNC_INBOX answer of page.
func SyncInboxReply(page inbox.InboxPage) *protocol.SyncInboxReply {
	r := &protocol.SyncInboxReply{
		Conversations: make([]protocol.Conversation, 0, len(page.Conversations)),
		Events:        make([]protocol.MailboxEvent, 0, len(page.Events)),
		DialogCursor:  page.DialogCursor, MailboxSeq: jsonid.ID(page.MailboxSeq),
	}
	for _, c := range page.Conversations {
		r.Conversations = append(r.Conversations, Conversation(c))
	}
	for _, e := range page.Events {
		r.Events = append(r.Events, MailboxEvent(e))
	}
	return r
}

// Conversation is the client form of a conversation list entry.
func Conversation(c inbox.Conversation) protocol.Conversation {
	w := protocol.Conversation{
		ConversationID: jsonid.ID(c.ID), ConversationType: c.Type, PeerID: jsonid.ID(c.PeerID), GroupID: jsonid.ID(c.GroupID),
		LastMsgID: jsonid.ID(c.LastMsgID), LastMsgAt: c.LastMsgAt, Unread: c.Unread, Muted: c.Muted, Pinned: c.Pinned, Hidden: c.Hidden,
	}
	if p := c.Preview; p != nil {
		w.Preview = &protocol.Preview{MsgID: jsonid.ID(p.MsgID), MessageType: p.MessageType, Text: p.Text, SenderID: jsonid.ID(p.SenderID), Recalled: p.Recalled}
	}
	return w
}

// MailboxEvent is the client form of a mailbox event.
func MailboxEvent(e mailbox.Event) protocol.MailboxEvent {
	return protocol.MailboxEvent{
		Seq: jsonid.ID(e.Seq), EventType: e.EventType, ConversationID: jsonid.ID(e.ConversationID),
		MsgID: jsonid.ID(e.MsgID), Payload: json.RawMessage(e.Payload),
	}
}

// Credentials converts the AUTH body.
func Credentials(w protocol.AuthRequest) auth.Credentials {
	return auth.Credentials{Token: w.Token, DeviceID: w.DeviceID, Platform: w.Platform, AppVersion: w.AppVersion}
}

// AuthReply is the data of a successful AUTH answer.
func AuthReply(a *auth.Authenticated) protocol.AuthReply {
	return protocol.AuthReply{UserID: jsonid.ID(a.UserID), DeviceID: a.DeviceID, ServerTime: a.Since}
}
