package protocol

import (
	"encoding/json"

	"github.com/sparkim/spark/pkg/jsonid"
)

// AuthRequest is the body of AUTH.
type AuthRequest struct {
	Token      string `json:"token"`
	DeviceID   string `json:"device_id"`
	Platform   string `json:"platform"`
	AppVersion string `json:"app_version"`
}

// AuthReply is the data of a successful AUTH answer.
type AuthReply struct {
	UserID     jsonid.ID `json:"user_id"`
	DeviceID   string    `json:"device_id"`
	ServerTime int64     `json:"server_time"`
}

// MsgIDReply is the data of GENERATE_MSG_ID.
type MsgIDReply struct {
	MsgID jsonid.ID `json:"msg_id"`
}

// SendRequest is the body of SEND_MESSAGE; exactly one target is set.
type SendRequest struct {
	ToUserID       jsonid.ID       `json:"to_user_id"`
	GroupID        jsonid.ID       `json:"group_id"`
	ConversationID jsonid.ID       `json:"conversation_id"`
	ClientMsgID    string          `json:"client_msg_id"`
	MsgID          jsonid.ID       `json:"msg_id"`
	MessageType    int             `json:"message_type"`
	Content        json.RawMessage `json:"content"`
	// ReplyTo names a message of the same conversation this one replies
	// to; the server stores its snapshot in content under ReplyKey.
	ReplyTo jsonid.ID `json:"reply_to,omitempty"`
}

// SendAck is the data of SEND_ACK.
type SendAck struct {
	MsgID          jsonid.ID `json:"msg_id"`
	ClientMsgID    string    `json:"client_msg_id"`
	ConversationID jsonid.ID `json:"conversation_id"`
	ServerTime     int64     `json:"server_time"`
}

// Message is the data of a MESSAGE push and an item of SYNC_MESSAGES.
type Message struct {
	MsgID            jsonid.ID       `json:"msg_id"`
	ConversationID   jsonid.ID       `json:"conversation_id"`
	ConversationType int             `json:"conversation_type"`
	SenderID         jsonid.ID       `json:"sender_id"`
	ClientMsgID      string          `json:"client_msg_id"`
	MessageType      int             `json:"message_type"`
	Content          json.RawMessage `json:"content,omitempty"`
	CreatedAt        int64           `json:"created_at"`
	Status           int             `json:"status,omitempty"`
	// Version counts the message's edits (absent: never edited) and
	// EditedAt is the newest edit's time (EDIT_MESSAGE, 24).
	Version  int   `json:"version,omitempty"`
	EditedAt int64 `json:"edited_at,omitempty"`
}

// Kick is the data of KICK.
type Kick struct {
	Reason string `json:"reason"`
}

// EditRequest is the body of EDIT_MESSAGE (24): the new content of one of
// the sender's text messages (ConversationID optional).
type EditRequest struct {
	MsgID          jsonid.ID       `json:"msg_id"`
	ConversationID jsonid.ID       `json:"conversation_id,omitempty"`
	Content        json.RawMessage `json:"content"`
}

// EditReply answers EDIT_MESSAGE: the version now in effect.
type EditReply struct {
	MsgID          jsonid.ID `json:"msg_id"`
	ConversationID jsonid.ID `json:"conversation_id"`
	Version        int       `json:"version"`
	EditedAt       int64     `json:"edited_at"`
}

// EditPush is the data of an EDIT_MESSAGE push and the payload of
// mailbox event EDIT (7): the message's new version.
type EditPush struct {
	MsgID          jsonid.ID       `json:"msg_id"`
	ConversationID jsonid.ID       `json:"conversation_id"`
	SenderID       jsonid.ID       `json:"sender_id"`
	Version        int             `json:"version"`
	EditedAt       int64           `json:"edited_at"`
	Content        json.RawMessage `json:"content"`
}
