package gateway

import (
	"context"
	"fmt"

	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// reactionCommand answers REACTION (25): add, remove, get and users over
// the message service's reaction calls.
func (h *Handler) reactionCommand(ctx context.Context, from message.Sender, body []byte) ([]byte, error) {
	var r protocol.ReactionRequest
	if err := decodeFields(body, &r); err != nil {
		return nil, err
	}
	switch r.Op {
	case protocol.ReactionOpAdd, protocol.ReactionOpRemove:
		c, err := h.Messages.React(ctx, from, message.ReactionRequest{MsgID: r.MsgID.Int64(), ConversationID: r.ConversationID.Int64(),
			Emoji: r.Emoji, Add: r.Op == protocol.ReactionOpAdd})
		if err != nil {
			return nil, err
		}
		return protocol.Marshal(protocol.ReactionChange{MsgID: jsonid.ID(c.MsgID), ConversationID: jsonid.ID(c.ConversationID),
			Emoji: c.Emoji, Count: c.Count, Changed: c.Changed})
	case protocol.ReactionOpGet:
		ids := make([]int64, len(r.MsgIDs))
		for i, id := range r.MsgIDs {
			ids[i] = id.Int64()
		}
		page, err := h.Messages.Reactions(ctx, from.UserID, r.ConversationID.Int64(), ids, protocol.PageBudget(h.MaxFrameSize))
		if err != nil {
			return nil, err
		}
		out := protocol.ReactionsReply{ConversationID: jsonid.ID(page.ConversationID), More: page.More, NextMsgID: jsonid.ID(page.Next),
			Messages: make([]protocol.MessageReactions, 0, len(page.Messages))}
		for _, m := range page.Messages {
			w := protocol.MessageReactions{MsgID: jsonid.ID(m.MsgID), Reactions: make([]protocol.ReactionCount, 0, len(m.Counts))}
			for _, c := range m.Counts {
				w.Reactions = append(w.Reactions, protocol.ReactionCount{Emoji: c.Emoji, Count: c.Count, Me: c.Me})
			}
			out.Messages = append(out.Messages, w)
		}
		return protocol.Marshal(out)
	case protocol.ReactionOpUsers:
		page, err := h.Messages.Reactors(ctx, from.UserID, message.MessageRef{MsgID: r.MsgID.Int64(), ConversationID: r.ConversationID.Int64()},
			r.Emoji, r.After.Int64(), r.Limit)
		if err != nil {
			return nil, err
		}
		out := protocol.ReactorsReply{MsgID: jsonid.ID(page.MsgID), ConversationID: jsonid.ID(page.ConversationID), Emoji: page.Emoji,
			Count: page.Count, More: page.More, Next: jsonid.ID(page.Next), Users: make([]protocol.Reactor, 0, len(page.Users))}
		for _, u := range page.Users {
			out.Users = append(out.Users, protocol.Reactor{UserID: jsonid.ID(u.UserID), ReactedAt: u.ReactedAt.UnixMilli()})
		}
		return protocol.Marshal(out)
	case "":
		return nil, errcode.Invalid("op", "required")
	}
	return nil, errcode.Invalid("op", fmt.Sprintf("unknown op %q (add, remove, get, users)", r.Op))
}
