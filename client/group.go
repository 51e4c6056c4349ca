package client

import (
	"context"
	"fmt"
	"time"

	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// The group types are the protocol's; the aliases keep callers short.
type (
	// GroupInfo is a group as its members see it.
	GroupInfo = protocol.GroupInfo
	// GroupChange is the answer to a GROUP change: the group after it,
	// whether anything changed, who joined and who left.
	GroupChange = protocol.GroupChangeReply
	// GroupMember is one member of a group.
	GroupMember = protocol.GroupMember
	// GroupMembersPage is one page of a group's members.
	GroupMembersPage = protocol.GroupMembersReply
)

// NewGroup describes a group to create; the caller becomes its owner and
// a member whether listed in MemberIDs or not.
type NewGroup struct {
	Name         string
	MemberIDs    []int64
	Avatar       string
	Announcement string
}

// GroupUpdate names the fields to change; nil leaves a field as it is.
type GroupUpdate struct {
	Name, Avatar, Announcement *string
}

// Group sends GROUP (20) with req and decodes the answer's data into out
// (nil: ignored). The typed helpers below cover every op; this is for
// callers that build requests themselves.
func (c *Conn) Group(ctx context.Context, req protocol.GroupRequest, out any) error {
	if _, err := c.call(ctx, protocol.CmdGroup, req, out); err != nil {
		return fmt.Errorf("client: group %s: %w", req.Op, err)
	}
	return nil
}

func (c *Conn) groupChange(ctx context.Context, req protocol.GroupRequest) (GroupChange, error) {
	var out GroupChange
	err := c.Group(ctx, req, &out)
	return out, err
}

func jsonIDs(in []int64) []jsonid.ID {
	out := make([]jsonid.ID, len(in))
	for i, id := range in {
		out[i] = jsonid.ID(id)
	}
	return out
}

// CreateGroup creates a group owned by the caller.
func (c *Conn) CreateGroup(ctx context.Context, g NewGroup) (GroupChange, error) {
	req := protocol.GroupRequest{Op: protocol.GroupOpCreate, Name: &g.Name, MemberIDs: jsonIDs(g.MemberIDs)}
	if g.Avatar != "" {
		req.Avatar = &g.Avatar
	}
	if g.Announcement != "" {
		req.Announcement = &g.Announcement
	}
	return c.groupChange(ctx, req)
}

// AddGroupMembers adds users to a group (owner and admins).
func (c *Conn) AddGroupMembers(ctx context.Context, groupID int64, userIDs []int64) (GroupChange, error) {
	return c.groupChange(ctx, protocol.GroupRequest{Op: protocol.GroupOpAdd, GroupID: jsonid.ID(groupID), UserIDs: jsonIDs(userIDs)})
}

// RemoveGroupMembers removes users from a group (owner and admins, a
// lower role only).
func (c *Conn) RemoveGroupMembers(ctx context.Context, groupID int64, userIDs []int64) (GroupChange, error) {
	return c.groupChange(ctx, protocol.GroupRequest{Op: protocol.GroupOpRemove, GroupID: jsonid.ID(groupID), UserIDs: jsonIDs(userIDs)})
}

// LeaveGroup makes the caller leave a group (the owner of an active group
// transfers or dissolves first).
func (c *Conn) LeaveGroup(ctx context.Context, groupID int64) (GroupChange, error) {
	return c.groupChange(ctx, protocol.GroupRequest{Op: protocol.GroupOpLeave, GroupID: jsonid.ID(groupID)})
}

// SetGroupRole makes a member an admin or a member again
// (protocol.GroupRoleAdmin / GroupRoleMember; the owner only).
func (c *Conn) SetGroupRole(ctx context.Context, groupID, userID int64, role string) (GroupChange, error) {
	return c.groupChange(ctx, protocol.GroupRequest{Op: protocol.GroupOpRole, GroupID: jsonid.ID(groupID), UserID: jsonid.ID(userID), Role: role})
}

// MuteGroup switches mute-all: while on, only the owner and admins send.
func (c *Conn) MuteGroup(ctx context.Context, groupID int64, mute bool) (GroupChange, error) {
	return c.groupChange(ctx, protocol.GroupRequest{Op: protocol.GroupOpMuteAll, GroupID: jsonid.ID(groupID), Mute: &mute})
}

// MuteGroupMember mutes a member until a time; the zero time unmutes.
func (c *Conn) MuteGroupMember(ctx context.Context, groupID, userID int64, until time.Time) (GroupChange, error) {
	var ms int64
	if !until.IsZero() {
		ms = until.UnixMilli()
	}
	return c.groupChange(ctx, protocol.GroupRequest{Op: protocol.GroupOpMuteMember, GroupID: jsonid.ID(groupID), UserID: jsonid.ID(userID), Until: &ms})
}

// TransferGroup makes a member the owner (the owner only); the caller
// becomes an admin.
func (c *Conn) TransferGroup(ctx context.Context, groupID, userID int64) (GroupChange, error) {
	return c.groupChange(ctx, protocol.GroupRequest{Op: protocol.GroupOpTransfer, GroupID: jsonid.ID(groupID), UserID: jsonid.ID(userID)})
}

// DissolveGroup dissolves a group (the owner only).
func (c *Conn) DissolveGroup(ctx context.Context, groupID int64) (GroupChange, error) {
	return c.groupChange(ctx, protocol.GroupRequest{Op: protocol.GroupOpDissolve, GroupID: jsonid.ID(groupID)})
}

// UpdateGroup sets a group's name, avatar or announcement (owner and
// admins).
func (c *Conn) UpdateGroup(ctx context.Context, groupID int64, u GroupUpdate) (GroupChange, error) {
	return c.groupChange(ctx, protocol.GroupRequest{Op: protocol.GroupOpUpdate, GroupID: jsonid.ID(groupID),
		Name: u.Name, Avatar: u.Avatar, Announcement: u.Announcement})
}

// GroupInfo reads a group (members only).
func (c *Conn) GroupInfo(ctx context.Context, groupID int64) (GroupInfo, error) {
	var out protocol.GroupInfoReply
	err := c.Group(ctx, protocol.GroupRequest{Op: protocol.GroupOpInfo, GroupID: jsonid.ID(groupID)}, &out)
	return out.Group, err
}

// GroupMembers returns one page of a group's members with user id > after
// (0: from the start), at most limit (0: the server's default).
func (c *Conn) GroupMembers(ctx context.Context, groupID, after int64, limit int) (GroupMembersPage, error) {
	var out GroupMembersPage
	err := c.Group(ctx, protocol.GroupRequest{Op: protocol.GroupOpMembers, GroupID: jsonid.ID(groupID), After: jsonid.ID(after), Limit: limit}, &out)
	return out, err
}

// SendGroupText sends a text message to a group.
func (c *Conn) SendGroupText(ctx context.Context, groupID int64, text string) (protocol.SendAck, error) {
	content, err := TextContent(text)
	if err != nil {
		return protocol.SendAck{}, err
	}
	return c.Send(ctx, protocol.SendRequest{GroupID: jsonid.ID(groupID), MessageType: 1, Content: content})
}
