package client

import (
	"context"
	"fmt"

	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// CmdConversationSettings (16) changes a conversation's muted and pinned
// flags for the caller; it is this server's extension of the Spark commands.
const CmdConversationSettings = protocol.CmdConversationSettings

// The sync types are the protocol's; the aliases keep callers short.
type (
	// Preview is the short form of a conversation's newest message.
	Preview = protocol.Preview
	// Conversation is one entry of the conversation list.
	Conversation = protocol.Conversation
	// MailboxEvent is an event sync cannot rebuild.
	MailboxEvent = protocol.MailboxEvent
	// ReadReply is the answer to READ_MESSAGE.
	ReadReply = protocol.ReadReply
)

// Mailbox event types.
const (
	EventRecall        = protocol.EventRecall
	EventKick          = protocol.EventKick
	EventMembership    = protocol.EventMembership
	EventFriend        = protocol.EventFriend
	EventMissedMessage = protocol.EventMissedMessage
)

// InboxPage is one answer to SYNC_INBOX.
type InboxPage struct {
	protocol.SyncInboxReply
	// Last is true when the answer came as SYNC_INBOX_FINISH (11).
	Last bool `json:"-"`
}

type syncInboxRequest struct {
	DialogCursor string `json:"dialog_cursor"`
	MailboxSeq   string `json:"mailbox_seq"`
	Limit        int    `json:"limit,omitempty"`
}

// SyncInboxPage requests one page of conversation changes and mailbox
// events after the given cursors ("0" or "" on a fresh device).
func (c *Conn) SyncInboxPage(ctx context.Context, dialogCursor, mailboxSeq string, limit int) (InboxPage, error) {
	var p InboxPage
	r, err := c.call(ctx, protocol.CmdSyncInbox, syncInboxRequest{dialogCursor, mailboxSeq, limit}, &p)
	if err != nil {
		return p, err
	}
	switch r.Command {
	case protocol.CmdSyncInbox:
	case protocol.CmdSyncInboxFinish:
		p.Last = true
	default:
		return p, fmt.Errorf("client: SYNC_INBOX answered with command %d", r.Command)
	}
	return p, nil
}

// SyncInbox pages until the last page and returns everything with the new
// cursors. A conversation changed several times during the paging appears
// once per change; callers keep the last.
func (c *Conn) SyncInbox(ctx context.Context, dialogCursor, mailboxSeq string, limit int) (InboxPage, error) {
	var all InboxPage
	for pages := 0; ; pages++ {
		p, err := c.SyncInboxPage(ctx, dialogCursor, mailboxSeq, limit)
		if err != nil {
			return all, err
		}
		all.Conversations = append(all.Conversations, p.Conversations...)
		all.Events = append(all.Events, p.Events...)
		dialogCursor, mailboxSeq = p.DialogCursor, p.MailboxSeq.String()
		all.DialogCursor, all.MailboxSeq = p.DialogCursor, p.MailboxSeq
		if p.Last {
			all.Last = true
			return all, nil
		}
		if pages > 100000 {
			return all, fmt.Errorf("client: SYNC_INBOX does not finish")
		}
	}
}

// MessagesPage is one answer to SYNC_MESSAGES.
type MessagesPage struct {
	protocol.SyncMessagesReply
	// Last is true when the answer came as SYNC_MESSAGES_FINISH (13).
	Last bool `json:"-"`
}

type syncMessagesRequest struct {
	ConversationID jsonid.ID `json:"conversation_id"`
	LastMsgID      jsonid.ID `json:"last_msg_id"`
	Limit          int       `json:"limit,omitempty"`
}

// SyncMessagesPage requests one page of a conversation's messages after
// lastMsgID.
func (c *Conn) SyncMessagesPage(ctx context.Context, conversationID, lastMsgID int64, limit int) (MessagesPage, error) {
	var p MessagesPage
	r, err := c.call(ctx, protocol.CmdSyncMessages, syncMessagesRequest{jsonid.ID(conversationID), jsonid.ID(lastMsgID), limit}, &p)
	if err != nil {
		return p, err
	}
	switch r.Command {
	case protocol.CmdSyncMessages:
	case protocol.CmdSyncMessagesDone:
		p.Last = true
	default:
		return p, fmt.Errorf("client: SYNC_MESSAGES answered with command %d", r.Command)
	}
	return p, nil
}

// SyncMessages pages a conversation from lastMsgID to its end and returns
// the messages and the cursor to continue from.
func (c *Conn) SyncMessages(ctx context.Context, conversationID, lastMsgID int64, limit int) ([]protocol.Message, int64, error) {
	var out []protocol.Message
	for {
		p, err := c.SyncMessagesPage(ctx, conversationID, lastMsgID, limit)
		if err != nil {
			return out, lastMsgID, err
		}
		out = append(out, p.Messages...)
		if next := p.NextMsgID.Int64(); next > lastMsgID {
			lastMsgID = next
		} else if !p.Last {
			return out, lastMsgID, fmt.Errorf("client: SYNC_MESSAGES cursor did not advance from %d", lastMsgID)
		}
		if p.Last {
			return out, lastMsgID, nil
		}
	}
}

// Read marks a conversation read up to msgID.
func (c *Conn) Read(ctx context.Context, conversationID, msgID int64) (ReadReply, error) {
	var out ReadReply
	_, err := c.call(ctx, protocol.CmdReadMessage, map[string]jsonid.ID{
		"conversation_id": jsonid.ID(conversationID), "msg_id": jsonid.ID(msgID),
	}, &out)
	return out, err
}

// Recall recalls one of the caller's messages.
func (c *Conn) Recall(ctx context.Context, conversationID, msgID int64) error {
	_, err := c.call(ctx, protocol.CmdRecallMessage, map[string]jsonid.ID{
		"conversation_id": jsonid.ID(conversationID), "msg_id": jsonid.ID(msgID),
	}, nil)
	return err
}

// Delete deletes a message for the caller, on all the caller's devices.
func (c *Conn) Delete(ctx context.Context, conversationID, msgID int64) error {
	_, err := c.call(ctx, protocol.CmdDeleteMessage, map[string]jsonid.ID{
		"conversation_id": jsonid.ID(conversationID), "msg_id": jsonid.ID(msgID),
	}, nil)
	return err
}

// DeleteForEveryone deletes a message for every member of its group
// conversation (the caller must be the group's owner or an admin): it
// becomes a status-3 tombstone for all.
func (c *Conn) DeleteForEveryone(ctx context.Context, conversationID, msgID int64) error {
	_, err := c.call(ctx, protocol.CmdDeleteMessage, protocol.DeleteRequest{
		ConversationID: jsonid.ID(conversationID), MsgID: jsonid.ID(msgID), ForEveryone: true,
	}, nil)
	return err
}

// SetConversation changes the caller's muted and pinned flags of a
// conversation; nil leaves a flag unchanged.
func (c *Conn) SetConversation(ctx context.Context, conversationID int64, muted, pinned *bool) error {
	body := map[string]any{"conversation_id": jsonid.ID(conversationID)}
	if muted != nil {
		body["muted"] = *muted
	}
	if pinned != nil {
		body["pinned"] = *pinned
	}
	_, err := c.call(ctx, CmdConversationSettings, body, nil)
	return err
}
