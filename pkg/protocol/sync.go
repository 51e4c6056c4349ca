package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/sparkim/spark/pkg/jsonid"
)

// Cursor is an opaque sync cursor: written as a JSON string, read from a
// string or an integer number (a client may send 0 on a fresh device).
type Cursor string

// UnmarshalJSON accepts "…", an integer number and null (empty).
func (c *Cursor) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		*c = ""
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = Cursor(s)
		return nil
	}
	var id jsonid.ID
	if err := id.UnmarshalJSON(b); err != nil {
		return fmt.Errorf("protocol: cursor %s is neither a string nor an integer", b)
	}
	*c = Cursor(id.String())
	return nil
}

// SyncInboxRequest is the body of SYNC_INBOX (10). Absent cursors mean a
// fresh device; limit 0 means the default.
type SyncInboxRequest struct {
	DialogCursor Cursor    `json:"dialog_cursor"`
	MailboxSeq   jsonid.ID `json:"mailbox_seq"`
	Limit        int       `json:"limit"`
}

// Preview is the short form of a conversation's newest message.
type Preview struct {
	MsgID       jsonid.ID `json:"msg_id"`
	MessageType int       `json:"message_type"`
	Text        string    `json:"text"`
	SenderID    jsonid.ID `json:"sender_id"`
	Recalled    bool      `json:"recalled,omitempty"`
}

// Conversation is one entry of a SYNC_INBOX answer. Exactly one of PeerID
// (P2P) and GroupID (group) is set; Preview is absent before the first
// message.
type Conversation struct {
	ConversationID   jsonid.ID `json:"conversation_id"`
	ConversationType int       `json:"conversation_type"`
	PeerID           jsonid.ID `json:"peer_id,omitempty"`
	GroupID          jsonid.ID `json:"group_id,omitempty"`
	LastMsgID        jsonid.ID `json:"last_msg_id"`
	LastMsgAt        int64     `json:"last_msg_at"`
	Unread           int64     `json:"unread"`
	Muted            bool      `json:"muted"`
	Pinned           bool      `json:"pinned"`
	// Hidden: the user hid the conversation and no newer message came
	// since; clients leave it out of the list.
	Hidden  bool     `json:"hidden"`
	Preview *Preview `json:"preview,omitempty"`
}

// MailboxEvent is one mailbox event of a SYNC_INBOX answer. Payload is the
// stored JSON object ({} when none).
type MailboxEvent struct {
	Seq            jsonid.ID       `json:"seq"`
	EventType      int             `json:"event_type"`
	ConversationID jsonid.ID       `json:"conversation_id"`
	MsgID          jsonid.ID       `json:"msg_id"`
	Payload        json.RawMessage `json:"payload"`
}

// SyncInboxReply is the data of a SYNC_INBOX (10, more follow) or
// SYNC_INBOX_FINISH (11) answer; the client sends the cursors back.
type SyncInboxReply struct {
	Conversations []Conversation `json:"conversations"`
	Events        []MailboxEvent `json:"events"`
	DialogCursor  string         `json:"dialog_cursor"`
	MailboxSeq    jsonid.ID      `json:"mailbox_seq"`
}

// SyncMessagesRequest is the body of SYNC_MESSAGES (12).
type SyncMessagesRequest struct {
	ConversationID jsonid.ID `json:"conversation_id"`
	LastMsgID      jsonid.ID `json:"last_msg_id"`
	Limit          int       `json:"limit"`
	// MsgIDs, when set, asks for these messages of the conversation (at
	// most 100) instead of a page after LastMsgID: a device that learnt
	// of edits fetches their current versions.
	MsgIDs []jsonid.ID `json:"msg_ids,omitempty"`
}

// SyncMessagesReply is the data of a SYNC_MESSAGES (12, more follow) or
// SYNC_MESSAGES_FINISH (13) answer. NextMsgID is the cursor of the next
// request (the last id scanned).
type SyncMessagesReply struct {
	ConversationID jsonid.ID `json:"conversation_id"`
	Messages       []Message `json:"messages"`
	NextMsgID      jsonid.ID `json:"next_msg_id"`
}

// ReadRequest is the body of READ_MESSAGE (8); last_msg_id is an alias of
// msg_id.
type ReadRequest struct {
	ConversationID jsonid.ID `json:"conversation_id"`
	MsgID          jsonid.ID `json:"msg_id"`
	LastMsgID      jsonid.ID `json:"last_msg_id"`
}

// ReadReply is the data of a READ_MESSAGE answer and push: MsgID is the
// effective last read id.
type ReadReply struct {
	ConversationID jsonid.ID `json:"conversation_id"`
	MsgID          jsonid.ID `json:"msg_id"`
}

// MessageRef names a message: the body of RECALL_MESSAGE (9) and
// DELETE_MESSAGE (15) (conversation_id optional), and the data of their
// answers and pushes (both set).
type MessageRef struct {
	MsgID          jsonid.ID `json:"msg_id"`
	ConversationID jsonid.ID `json:"conversation_id"`
}

// DeleteRequest is the body of DELETE_MESSAGE (15), and its answer and
// push.
type DeleteRequest struct {
	MsgID          jsonid.ID `json:"msg_id"`
	ConversationID jsonid.ID `json:"conversation_id"`
	// ForEveryone deletes the message for every member instead of for the
	// caller: a group's owner and admins may (decision 98).
	ForEveryone bool `json:"for_everyone,omitempty"`
}

// SettingsRequest is the body of CONVERSATION_SETTINGS (16); an absent
// flag is left unchanged.
type SettingsRequest struct {
	ConversationID jsonid.ID `json:"conversation_id"`
	Muted          *bool     `json:"muted"`
	Pinned         *bool     `json:"pinned"`
	// Hidden removes the conversation from the list until its next
	// message (false shows it again).
	Hidden *bool `json:"hidden"`
}

// SettingsReply is the data of a CONVERSATION_SETTINGS answer and push:
// the effective flags.
type SettingsReply struct {
	ConversationID jsonid.ID `json:"conversation_id"`
	Muted          bool      `json:"muted"`
	Pinned         bool      `json:"pinned"`
	Hidden         bool      `json:"hidden"`
}

// KickPayload is the payload of a KICK mailbox event.
type KickPayload struct {
	Reason string `json:"reason"`
}
