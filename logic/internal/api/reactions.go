package api

import (
	"context"

	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// AddReaction adds a member's reaction through the same domain call as
// REACTION add (caps, duplicates, the members' events and pushes).
func (s *Server) AddReaction(ctx context.Context, req *logicv1.ReactionRequest) (*logicv1.ReactionReply, error) {
	return s.react(ctx, "AddReaction", req, true)
}

// RemoveReaction removes one, as REACTION remove does.
func (s *Server) RemoveReaction(ctx context.Context, req *logicv1.ReactionRequest) (*logicv1.ReactionReply, error) {
	return s.react(ctx, "RemoveReaction", req, false)
}

func (s *Server) react(ctx context.Context, rpc string, req *logicv1.ReactionRequest, add bool) (*logicv1.ReactionReply, error) {
	if err := positive("user_id", req.UserId); err != nil {
		return nil, err
	}
	if req.ConversationId < 0 {
		return nil, invalid("conversation_id", "must be 0 or a positive id")
	}
	r, err := s.messages.React(ctx, message.Sender{UserID: req.UserId, API: true},
		message.ReactionRequest{MsgID: req.MsgId, ConversationID: req.ConversationId, Emoji: req.Emoji, Add: add})
	if err != nil {
		return nil, s.statusOf(rpc, err)
	}
	return &logicv1.ReactionReply{MsgId: r.MsgID, ConversationId: r.ConversationID, Emoji: r.Emoji, Count: int32(r.Count), Changed: r.Changed}, nil
}

// ListReactions answers the counts of up to 100 messages as REACTION get
// does, unpaged: a gRPC reply has room for 100 messages' counts.
func (s *Server) ListReactions(ctx context.Context, req *logicv1.ListReactionsRequest) (*logicv1.ListReactionsReply, error) {
	if err := positive("user_id", req.UserId); err != nil {
		return nil, err
	}
	page, err := s.messages.Reactions(ctx, req.UserId, req.ConversationId, req.MsgIds, 0)
	if err != nil {
		return nil, s.statusOf("ListReactions", err)
	}
	out := &logicv1.ListReactionsReply{Messages: make([]*logicv1.MessageReactions, 0, len(page.Messages))}
	for _, m := range page.Messages {
		out.Messages = append(out.Messages, &logicv1.MessageReactions{MsgId: m.MsgID, Reactions: reactionCounts(m)})
	}
	return out, nil
}

// ListReactors pages who reacted with one emoji, as REACTION users does.
func (s *Server) ListReactors(ctx context.Context, req *logicv1.ListReactorsRequest) (*logicv1.ListReactorsReply, error) {
	if err := positive("user_id", req.UserId); err != nil {
		return nil, err
	}
	page, err := s.messages.Reactors(ctx, req.UserId, message.MessageRef{MsgID: req.MsgId}, req.Emoji, req.After, int(req.Limit))
	if err != nil {
		return nil, s.statusOf("ListReactors", err)
	}
	out := &logicv1.ListReactorsReply{MsgId: page.MsgID, ConversationId: page.ConversationID, Emoji: page.Emoji,
		Count: int32(page.Count), Next: page.Next, More: page.More, Users: make([]*logicv1.Reactor, 0, len(page.Users))}
	for _, u := range page.Users {
		out.Users = append(out.Users, &logicv1.Reactor{UserId: u.UserID, ReactedAtMs: u.ReactedAt.UnixMilli()})
	}
	return out, nil
}

// attachReactions sets the reactions of a history page's messages (ids in
// the same order), asking for at most 100 at a time.
func (s *Server) attachReactions(ctx context.Context, user, cid int64, msgs []*logicv1.HistoryMessage, ids []int64) error {
	byID := make(map[int64]*logicv1.HistoryMessage, len(msgs))
	for i, m := range msgs {
		byID[ids[i]] = m
	}
	for lo := 0; lo < len(ids); lo += protocol.MaxReactionMsgIDs {
		page, err := s.messages.Reactions(ctx, user, cid, ids[lo:min(lo+protocol.MaxReactionMsgIDs, len(ids))], 0)
		if err != nil {
			return err
		}
		for _, m := range page.Messages {
			if h := byID[m.MsgID]; h != nil && h.Status == protocol.StatusNormal {
				h.Reactions = reactionCounts(m)
			}
		}
	}
	return nil
}

func reactionCounts(m message.MessageReactions) []*logicv1.ReactionCount {
	out := make([]*logicv1.ReactionCount, 0, len(m.Counts))
	for _, c := range m.Counts {
		out = append(out, &logicv1.ReactionCount{Emoji: c.Emoji, Count: int32(c.Count), Me: c.Me})
	}
	return out
}
