package api

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/logic/internal/notify"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// groupChanged answers a group change and tells the notifier about it
// (its failure is logged: the change is committed, and the affected users
// have their mailbox events).
func (s *Server) groupChanged(ctx context.Context, op string, ch group.Change, err error) (*logicv1.GroupReply, error) {
	if err != nil {
		return nil, s.statusOf(op, err)
	}
	notify.AfterGroupChange(ctx, s.notifier, s.log, ch, zap.String("rpc", op))
	return &logicv1.GroupReply{Group: groupOf(ch.Group), Changed: ch.Changed, Added: ch.Added, Removed: ch.Removed}, nil
}

func groupOf(g group.Info) *logicv1.Group {
	return &logicv1.Group{
		GroupId: g.GroupID, ConversationId: g.ConversationID, Name: g.Name, Avatar: g.Avatar,
		Announcement: g.Announcement, OwnerId: g.OwnerID, MuteAll: g.MuteAll, Status: int32(g.Status),
		MemberCount: int32(g.MemberCount), MemberVersion: g.MemberVersion, MaxMembers: int32(g.MaxMembers),
		CreatedAtMs: g.CreatedAt.UnixMilli(), UpdatedAtMs: g.UpdatedAt.UnixMilli(),
	}
}

// target checks the operator and group of a group call.
func target(operatorID, groupID int64) error {
	return first(operator(operatorID), positive("group_id", groupID))
}

// CreateGroup creates a group.
func (s *Server) CreateGroup(ctx context.Context, req *logicv1.CreateGroupRequest) (*logicv1.GroupReply, error) {
	if err := positive("owner_id", req.OwnerId); err != nil {
		return nil, err
	}
	ch, err := s.groups.Create(ctx, group.CreateRequest{
		OwnerID: req.OwnerId, MemberIDs: req.MemberIds, Name: req.Name, Avatar: req.Avatar, Announcement: req.Announcement,
	})
	return s.groupChanged(ctx, "CreateGroup", ch, err)
}

// AddGroupMembers adds users to a group.
func (s *Server) AddGroupMembers(ctx context.Context, req *logicv1.ChangeGroupMembersRequest) (*logicv1.GroupReply, error) {
	if err := target(req.OperatorId, req.GroupId); err != nil {
		return nil, err
	}
	ch, err := s.groups.AddMembers(ctx, group.MembersChangeRequest{ActorID: req.OperatorId, GroupID: req.GroupId, UserIDs: req.UserIds})
	return s.groupChanged(ctx, "AddGroupMembers", ch, err)
}

// RemoveGroupMembers removes users from a group.
func (s *Server) RemoveGroupMembers(ctx context.Context, req *logicv1.ChangeGroupMembersRequest) (*logicv1.GroupReply, error) {
	if err := target(req.OperatorId, req.GroupId); err != nil {
		return nil, err
	}
	ch, err := s.groups.RemoveMembers(ctx, group.MembersChangeRequest{ActorID: req.OperatorId, GroupID: req.GroupId, UserIDs: req.UserIds})
	return s.groupChanged(ctx, "RemoveGroupMembers", ch, err)
}

// LeaveGroup makes a member leave.
func (s *Server) LeaveGroup(ctx context.Context, req *logicv1.LeaveGroupRequest) (*logicv1.GroupReply, error) {
	if err := first(positive("group_id", req.GroupId), positive("user_id", req.UserId)); err != nil {
		return nil, err
	}
	ch, err := s.groups.Leave(ctx, group.LeaveRequest{GroupID: req.GroupId, UserID: req.UserId})
	return s.groupChanged(ctx, "LeaveGroup", ch, err)
}

// SetGroupRole makes a member an admin or a member.
func (s *Server) SetGroupRole(ctx context.Context, req *logicv1.SetGroupRoleRequest) (*logicv1.GroupReply, error) {
	if err := first(target(req.OperatorId, req.GroupId), positive("user_id", req.UserId)); err != nil {
		return nil, err
	}
	if _, ok := logicv1.GroupRole_name[int32(req.Role)]; !ok {
		return nil, invalid("role", "unknown role")
	}
	ch, err := s.groups.SetRole(ctx, group.SetRoleRequest{
		ActorID: req.OperatorId, GroupID: req.GroupId, UserID: req.UserId, Role: group.Role(req.Role),
	})
	return s.groupChanged(ctx, "SetGroupRole", ch, err)
}

// MuteGroup switches mute-all.
func (s *Server) MuteGroup(ctx context.Context, req *logicv1.MuteGroupRequest) (*logicv1.GroupReply, error) {
	if err := target(req.OperatorId, req.GroupId); err != nil {
		return nil, err
	}
	ch, err := s.groups.MuteAll(ctx, group.MuteAllRequest{ActorID: req.OperatorId, GroupID: req.GroupId, On: req.Mute})
	return s.groupChanged(ctx, "MuteGroup", ch, err)
}

// MuteGroupMember mutes a member until until_ms (0 unmutes).
func (s *Server) MuteGroupMember(ctx context.Context, req *logicv1.MuteGroupMemberRequest) (*logicv1.GroupReply, error) {
	if err := first(target(req.OperatorId, req.GroupId), positive("user_id", req.UserId)); err != nil {
		return nil, err
	}
	if req.UntilMs < 0 {
		return nil, invalid("until_ms", "must be a Unix ms time or 0 (unmute)")
	}
	var until time.Time
	if req.UntilMs > 0 {
		until = time.UnixMilli(req.UntilMs)
	}
	ch, err := s.groups.MuteMember(ctx, group.MuteMemberRequest{
		ActorID: req.OperatorId, GroupID: req.GroupId, UserID: req.UserId, Until: until,
	})
	return s.groupChanged(ctx, "MuteGroupMember", ch, err)
}

// TransferGroup makes a member the owner.
func (s *Server) TransferGroup(ctx context.Context, req *logicv1.TransferGroupRequest) (*logicv1.GroupReply, error) {
	if err := first(target(req.OperatorId, req.GroupId), positive("new_owner_id", req.NewOwnerId)); err != nil {
		return nil, err
	}
	ch, err := s.groups.Transfer(ctx, group.TransferRequest{ActorID: req.OperatorId, GroupID: req.GroupId, NewOwnerID: req.NewOwnerId})
	return s.groupChanged(ctx, "TransferGroup", ch, err)
}

// DissolveGroup dissolves a group.
func (s *Server) DissolveGroup(ctx context.Context, req *logicv1.GroupRef) (*logicv1.GroupReply, error) {
	if err := target(req.OperatorId, req.GroupId); err != nil {
		return nil, err
	}
	ch, err := s.groups.Dissolve(ctx, group.DissolveRequest{ActorID: req.OperatorId, GroupID: req.GroupId})
	return s.groupChanged(ctx, "DissolveGroup", ch, err)
}

// UpdateGroup sets the name, avatar or announcement fields present.
func (s *Server) UpdateGroup(ctx context.Context, req *logicv1.UpdateGroupRequest) (*logicv1.GroupReply, error) {
	if err := target(req.OperatorId, req.GroupId); err != nil {
		return nil, err
	}
	ch, err := s.groups.Update(ctx, group.UpdateRequest{
		ActorID: req.OperatorId, GroupID: req.GroupId, Name: req.Name, Avatar: req.Avatar, Announcement: req.Announcement,
	})
	return s.groupChanged(ctx, "UpdateGroup", ch, err)
}

// GetGroup reads a group's info.
func (s *Server) GetGroup(ctx context.Context, req *logicv1.GroupRef) (*logicv1.Group, error) {
	if err := target(req.OperatorId, req.GroupId); err != nil {
		return nil, err
	}
	g, err := s.groups.Get(ctx, group.GetRequest{ActorID: req.OperatorId, GroupID: req.GroupId})
	if err != nil {
		return nil, s.statusOf("GetGroup", err)
	}
	return groupOf(g), nil
}

// ListGroupMembers pages a group's members.
func (s *Server) ListGroupMembers(ctx context.Context, req *logicv1.ListGroupMembersRequest) (*logicv1.ListGroupMembersReply, error) {
	if err := target(req.OperatorId, req.GroupId); err != nil {
		return nil, err
	}
	switch {
	case req.AfterUserId < 0:
		return nil, invalid("after_user_id", "must not be negative")
	case req.Limit < 0 || req.Limit > group.MaxPageSize:
		return nil, invalid("limit", "must be 0 to 1000")
	}
	p, err := s.groups.Members(ctx, group.MembersRequest{
		ActorID: req.OperatorId, GroupID: req.GroupId, AfterUserID: req.AfterUserId, Limit: int(req.Limit),
	})
	if err != nil {
		return nil, s.statusOf("ListGroupMembers", err)
	}
	out := &logicv1.ListGroupMembersReply{NextUserId: p.NextUserID, MemberVersion: p.MemberVersion}
	for _, m := range p.Members {
		gm := &logicv1.GroupMember{UserId: m.UserID, Role: logicv1.GroupRole(m.Role), JoinedAtMs: m.JoinedAt.UnixMilli()}
		if !m.MuteUntil.IsZero() {
			gm.MuteUntilMs = m.MuteUntil.UnixMilli()
		}
		out.Members = append(out.Members, gm)
	}
	return out, nil
}
