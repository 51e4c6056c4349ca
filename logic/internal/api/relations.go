package api

import (
	"context"

	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/notify"
	"github.com/sparkim/spark/logic/internal/relation"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// pair checks two distinct user ids.
func pair(userID int64, otherField string, other int64) error {
	if err := first(positive("user_id", userID), positive(otherField, other)); err != nil {
		return err
	}
	if userID == other {
		return invalid(otherField, "must differ from user_id")
	}
	return nil
}

// relationChanged answers a relationship change and tells the notifier
// about it (its failure is logged: the change is committed and its
// mailbox events let devices catch up by sync).
func (s *Server) relationChanged(ctx context.Context, op string, ch relation.Change, err error) (*logicv1.ChangeReply, error) {
	if err != nil {
		return nil, s.statusOf(op, err)
	}
	notify.AfterRelationChange(ctx, s.notifier, s.log, ch, zap.String("rpc", op))
	return &logicv1.ChangeReply{Changed: ch.Changed}, nil
}

// AddFriend makes two users friends without a request.
func (s *Server) AddFriend(ctx context.Context, req *logicv1.FriendPair) (*logicv1.ChangeReply, error) {
	if err := pair(req.UserId, "friend_id", req.FriendId); err != nil {
		return nil, err
	}
	ch, err := s.relations.AddFriend(ctx, req.UserId, req.FriendId)
	return s.relationChanged(ctx, "AddFriend", ch, err)
}

// RequestFriend asks friend_id to befriend user_id, on user_id's behalf.
func (s *Server) RequestFriend(ctx context.Context, req *logicv1.FriendRequestRequest) (*logicv1.ChangeReply, error) {
	if err := pair(req.UserId, "friend_id", req.FriendId); err != nil {
		return nil, err
	}
	ch, err := s.relations.RequestFriend(ctx, relation.FriendRequest{From: req.UserId, To: req.FriendId, Note: req.Note})
	return s.relationChanged(ctx, "RequestFriend", ch, err)
}

// AcceptFriend accepts friend_id's pending request to user_id.
func (s *Server) AcceptFriend(ctx context.Context, req *logicv1.FriendPair) (*logicv1.ChangeReply, error) {
	if err := pair(req.UserId, "friend_id", req.FriendId); err != nil {
		return nil, err
	}
	ch, err := s.relations.AcceptFriend(ctx, req.UserId, req.FriendId)
	return s.relationChanged(ctx, "AcceptFriend", ch, err)
}

// RemoveFriend ends a friendship.
func (s *Server) RemoveFriend(ctx context.Context, req *logicv1.FriendPair) (*logicv1.ChangeReply, error) {
	if err := pair(req.UserId, "friend_id", req.FriendId); err != nil {
		return nil, err
	}
	ch, err := s.relations.RemoveFriend(ctx, req.UserId, req.FriendId)
	return s.relationChanged(ctx, "RemoveFriend", ch, err)
}

// Block makes user_id block target_id.
func (s *Server) Block(ctx context.Context, req *logicv1.BlockRequest) (*logicv1.ChangeReply, error) {
	if err := pair(req.UserId, "target_id", req.TargetId); err != nil {
		return nil, err
	}
	ch, err := s.relations.Block(ctx, req.UserId, req.TargetId)
	return s.relationChanged(ctx, "Block", ch, err)
}

// Unblock removes user_id's block of target_id.
func (s *Server) Unblock(ctx context.Context, req *logicv1.BlockRequest) (*logicv1.ChangeReply, error) {
	if err := pair(req.UserId, "target_id", req.TargetId); err != nil {
		return nil, err
	}
	ch, err := s.relations.Unblock(ctx, req.UserId, req.TargetId)
	return s.relationChanged(ctx, "Unblock", ch, err)
}

// listRequest checks and converts a list page request.
func listRequest(req *logicv1.ListRequest) (relation.ListRequest, error) {
	switch {
	case req.UserId <= 0:
		return relation.ListRequest{}, invalid("user_id", "must be a positive id")
	case req.AfterUserId < 0:
		return relation.ListRequest{}, invalid("after_user_id", "must not be negative")
	case req.Limit < 0 || req.Limit > relation.MaxPageSize:
		return relation.ListRequest{}, invalid("limit", "must be 0 to 500")
	}
	return relation.ListRequest{UserID: req.UserId, After: req.AfterUserId, Limit: int(req.Limit)}, nil
}

// ListFriends pages a user's friends.
func (s *Server) ListFriends(ctx context.Context, req *logicv1.ListRequest) (*logicv1.ListFriendsReply, error) {
	lr, err := listRequest(req)
	if err != nil {
		return nil, err
	}
	p, err := s.relations.ListFriends(ctx, lr)
	if err != nil {
		return nil, s.statusOf("ListFriends", err)
	}
	out := &logicv1.ListFriendsReply{NextUserId: p.Next, More: p.More}
	for _, f := range p.Friends {
		out.Friends = append(out.Friends, &logicv1.Friend{UserId: f.UserID, Remark: f.Remark, CreatedAtMs: f.CreatedAt})
	}
	return out, nil
}

// ListBlocks pages the users a user blocked.
func (s *Server) ListBlocks(ctx context.Context, req *logicv1.ListRequest) (*logicv1.ListBlocksReply, error) {
	lr, err := listRequest(req)
	if err != nil {
		return nil, err
	}
	p, err := s.relations.ListBlocks(ctx, lr)
	if err != nil {
		return nil, s.statusOf("ListBlocks", err)
	}
	out := &logicv1.ListBlocksReply{NextUserId: p.Next, More: p.More}
	for _, b := range p.Blocked {
		out.Blocked = append(out.Blocked, &logicv1.Blocked{UserId: b.UserID, CreatedAtMs: b.CreatedAt})
	}
	return out, nil
}
