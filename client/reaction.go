package client

import (
	"context"
	"fmt"

	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// CmdReaction (25) adds, removes and reads emoji reactions; the same
// command is the push of a change to the members' devices.
const CmdReaction = protocol.CmdReaction

// EventReaction is the mailbox event of a reaction change; its payload is
// the push's (protocol.ReactionPush).
const EventReaction = protocol.EventReaction

// React adds the caller's emoji to message msgID (conversationID may be
// 0); the same emoji twice is 40902.
func (c *Conn) React(ctx context.Context, conversationID, msgID int64, emoji string) (protocol.ReactionChange, error) {
	return c.reaction(ctx, protocol.ReactionOpAdd, conversationID, msgID, emoji)
}

// Unreact removes it; Changed is false when the caller had none.
func (c *Conn) Unreact(ctx context.Context, conversationID, msgID int64, emoji string) (protocol.ReactionChange, error) {
	return c.reaction(ctx, protocol.ReactionOpRemove, conversationID, msgID, emoji)
}

func (c *Conn) reaction(ctx context.Context, op string, conversationID, msgID int64, emoji string) (protocol.ReactionChange, error) {
	var out protocol.ReactionChange
	req := protocol.ReactionRequest{Op: op, ConversationID: jsonid.ID(conversationID), MsgID: jsonid.ID(msgID), Emoji: emoji}
	if _, err := c.call(ctx, CmdReaction, req, &out); err != nil {
		return out, fmt.Errorf("client: reaction %s %s on %d: %w", op, emoji, msgID, err)
	}
	return out, nil
}

// Reactions reads the counts, and the caller's own, of messages of one
// conversation (at most 100 ids), following the pages the frame limit
// cuts. Messages without reactions are absent.
func (c *Conn) Reactions(ctx context.Context, conversationID int64, ids []int64) ([]protocol.MessageReactions, error) {
	req := protocol.ReactionRequest{Op: protocol.ReactionOpGet, ConversationID: jsonid.ID(conversationID)}
	for _, id := range ids {
		req.MsgIDs = append(req.MsgIDs, jsonid.ID(id))
	}
	var out []protocol.MessageReactions
	for {
		var page protocol.ReactionsReply
		if _, err := c.call(ctx, CmdReaction, req, &page); err != nil {
			return out, fmt.Errorf("client: reactions in %d: %w", conversationID, err)
		}
		out = append(out, page.Messages...)
		if !page.More {
			return out, nil
		}
		rest := req.MsgIDs[:0:0]
		for _, id := range req.MsgIDs {
			if id >= page.NextMsgID {
				rest = append(rest, id)
			}
		}
		req.MsgIDs = rest
	}
}

// Reactors reads a page of who reacted to msgID with emoji, by user id
// after after (0: from the start); limit 0 is the server's default page.
func (c *Conn) Reactors(ctx context.Context, conversationID, msgID int64, emoji string, after int64, limit int) (protocol.ReactorsReply, error) {
	var out protocol.ReactorsReply
	req := protocol.ReactionRequest{Op: protocol.ReactionOpUsers, ConversationID: jsonid.ID(conversationID), MsgID: jsonid.ID(msgID),
		Emoji: emoji, After: jsonid.ID(after), Limit: limit}
	if _, err := c.call(ctx, CmdReaction, req, &out); err != nil {
		return out, fmt.Errorf("client: reactors of %s on %d: %w", emoji, msgID, err)
	}
	return out, nil
}
