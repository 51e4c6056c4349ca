package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// CmdRelation (19) and CmdGroup (20) are this server's extensions of the
// Spark commands: friends and blocks, and groups, for the signed-in user.
const (
	CmdRelation = protocol.CmdRelation
	CmdGroup    = protocol.CmdGroup
)

// The relationship types are the protocol's; the aliases keep callers
// short.
type (
	// Friend is one entry of the friend list.
	Friend = protocol.Friend
	// FriendsPage is one page of the friend list.
	FriendsPage = protocol.FriendsReply
	// BlocksPage is one page of the users the caller blocked.
	BlocksPage = protocol.BlocksReply
	// FriendRequestsPage is one page of incoming pending friend requests.
	FriendRequestsPage = protocol.FriendRequestsReply
	// ControlEvent is the data of a CONTROL_EVENT (17) push.
	ControlEvent = protocol.ControlEvent
)

// Relation sends RELATION (19) with req and decodes the answer's data
// into out (nil: ignored). The typed helpers below cover every op; this
// is for callers that build requests themselves.
func (c *Conn) Relation(ctx context.Context, req protocol.RelationRequest, out any) error {
	if _, err := c.call(ctx, protocol.CmdRelation, req, out); err != nil {
		return fmt.Errorf("client: relation %s: %w", req.Op, err)
	}
	return nil
}

// relationChange runs a change op on userID and reports whether it
// changed anything (false for an idempotent repeat).
func (c *Conn) relationChange(ctx context.Context, req protocol.RelationRequest) (bool, error) {
	var out protocol.ChangeReply
	err := c.Relation(ctx, req, &out)
	return out.Changed, err
}

// RequestFriend asks userID to be friends, with an optional note.
func (c *Conn) RequestFriend(ctx context.Context, userID int64, note string) (bool, error) {
	return c.relationChange(ctx, protocol.RelationRequest{Op: protocol.RelationOpRequest, UserID: jsonid.ID(userID), Note: note})
}

// AcceptFriend accepts userID's pending friend request.
func (c *Conn) AcceptFriend(ctx context.Context, userID int64) (bool, error) {
	return c.relationChange(ctx, protocol.RelationRequest{Op: protocol.RelationOpAccept, UserID: jsonid.ID(userID)})
}

// RejectFriend rejects userID's pending friend request (userID is not
// told).
func (c *Conn) RejectFriend(ctx context.Context, userID int64) (bool, error) {
	return c.relationChange(ctx, protocol.RelationRequest{Op: protocol.RelationOpReject, UserID: jsonid.ID(userID)})
}

// RemoveFriend ends the friendship with userID.
func (c *Conn) RemoveFriend(ctx context.Context, userID int64) (bool, error) {
	return c.relationChange(ctx, protocol.RelationRequest{Op: protocol.RelationOpRemove, UserID: jsonid.ID(userID)})
}

// SetRemark sets the caller's private name for friend userID ("" clears
// it).
func (c *Conn) SetRemark(ctx context.Context, userID int64, remark string) (bool, error) {
	return c.relationChange(ctx, protocol.RelationRequest{Op: protocol.RelationOpRemark, UserID: jsonid.ID(userID), Remark: &remark})
}

// Block blocks userID: P2P sends between the two are refused both ways.
func (c *Conn) Block(ctx context.Context, userID int64) (bool, error) {
	return c.relationChange(ctx, protocol.RelationRequest{Op: protocol.RelationOpBlock, UserID: jsonid.ID(userID)})
}

// Unblock removes the caller's block of userID.
func (c *Conn) Unblock(ctx context.Context, userID int64) (bool, error) {
	return c.relationChange(ctx, protocol.RelationRequest{Op: protocol.RelationOpUnblock, UserID: jsonid.ID(userID)})
}

// Friends returns one page of the caller's friends with user id > after
// (0: from the start), at most limit (0: the server's default).
func (c *Conn) Friends(ctx context.Context, after int64, limit int) (FriendsPage, error) {
	var out FriendsPage
	err := c.Relation(ctx, protocol.RelationRequest{Op: protocol.RelationOpFriends, After: jsonid.ID(after), Limit: limit}, &out)
	return out, err
}

// Blocks returns one page of the users the caller blocked.
func (c *Conn) Blocks(ctx context.Context, after int64, limit int) (BlocksPage, error) {
	var out BlocksPage
	err := c.Relation(ctx, protocol.RelationRequest{Op: protocol.RelationOpBlocks, After: jsonid.ID(after), Limit: limit}, &out)
	return out, err
}

// FriendRequests returns one page of the pending friend requests to the
// caller, by requester id.
func (c *Conn) FriendRequests(ctx context.Context, after int64, limit int) (FriendRequestsPage, error) {
	var out FriendRequestsPage
	err := c.Relation(ctx, protocol.RelationRequest{Op: protocol.RelationOpRequests, After: jsonid.ID(after), Limit: limit}, &out)
	return out, err
}

// ControlEvent decodes the data of a CONTROL_EVENT (17) push.
func (f Frame) ControlEvent() (ControlEvent, error) {
	var ev ControlEvent
	if f.Command != protocol.CmdControlEvent {
		return ev, fmt.Errorf("client: command %d is not CONTROL_EVENT", f.Command)
	}
	env, err := f.Envelope()
	if err != nil {
		return ev, err
	}
	if err := json.Unmarshal(env.Data, &ev); err != nil {
		return ev, fmt.Errorf("client: decode control event: %w", err)
	}
	return ev, nil
}
