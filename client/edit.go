package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// CmdEditMessage (24) replaces the content of one of the caller's text
// messages; the same command is its push to the members' other devices.
const CmdEditMessage = protocol.CmdEditMessage

// EventEdit is the mailbox event of an edit: its payload names the
// message and its version; MessagesByID fetches the new content.
const EventEdit = protocol.EventEdit

// Edit replaces the content of text message msgID (conversationID may be
// 0) with content ({"t":1,"text":…}) and returns the version in effect.
func (c *Conn) Edit(ctx context.Context, conversationID, msgID int64, content json.RawMessage) (protocol.EditReply, error) {
	var out protocol.EditReply
	req := protocol.EditRequest{MsgID: jsonid.ID(msgID), ConversationID: jsonid.ID(conversationID), Content: content}
	if _, err := c.call(ctx, CmdEditMessage, req, &out); err != nil {
		return out, fmt.Errorf("client: edit %d: %w", msgID, err)
	}
	return out, nil
}

// MessagesByID fetches the current versions of messages of one
// conversation (at most 100 ids; the ones deleted for the caller are
// absent), e.g. after EDIT mailbox events, with SYNC_MESSAGES' msg_ids.
func (c *Conn) MessagesByID(ctx context.Context, conversationID int64, ids []int64) ([]protocol.Message, error) {
	req := protocol.SyncMessagesRequest{ConversationID: jsonid.ID(conversationID)}
	for _, id := range ids {
		req.MsgIDs = append(req.MsgIDs, jsonid.ID(id))
	}
	var out []protocol.Message
	for len(req.MsgIDs) > 0 {
		var page protocol.SyncMessagesReply
		f, err := c.call(ctx, protocol.CmdSyncMessages, req, &page)
		if err != nil {
			return out, fmt.Errorf("client: messages by id in %d: %w", conversationID, err)
		}
		out = append(out, page.Messages...)
		if f.Command != protocol.CmdSyncMessages || len(page.Messages) == 0 {
			return out, nil
		}
		// A page the frame limit cut: ask for the ids after its last.
		rest := req.MsgIDs[:0:0]
		for _, id := range req.MsgIDs {
			if id > page.NextMsgID {
				rest = append(rest, id)
			}
		}
		req.MsgIDs = rest
	}
	return out, nil
}
