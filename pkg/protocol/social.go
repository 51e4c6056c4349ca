package protocol

import (
	"encoding/json"

	"github.com/sparkim/spark/pkg/jsonid"
)

// ControlEvent is the data of a CONTROL_EVENT (17) push: a mailbox event
// without its seq (the mailbox holds the ones sync must replay). It lives
// here, beside the commands, so the server that writes it and the clients
// that read it share one shape.
type ControlEvent struct {
	EventType      int             `json:"event_type"`
	ConversationID jsonid.ID       `json:"conversation_id"`
	Payload        json.RawMessage `json:"payload"`
}

// The ops of RELATION (19). The acting user is always the session's.
const (
	// RelationOpRequest asks user_id to be friends (note optional).
	RelationOpRequest = "request"
	// RelationOpAccept / RelationOpReject answer user_id's pending request.
	RelationOpAccept = "accept"
	RelationOpReject = "reject"
	// RelationOpRemove ends the friendship with user_id.
	RelationOpRemove = "remove"
	// RelationOpRemark sets the private name of friend user_id ("" clears).
	RelationOpRemark = "remark"
	// RelationOpBlock / RelationOpUnblock block or unblock user_id.
	RelationOpBlock   = "block"
	RelationOpUnblock = "unblock"
	// RelationOpFriends, RelationOpBlocks and RelationOpRequests page the
	// friends, the blocked users and the incoming pending requests, by
	// user id after `after`.
	RelationOpFriends  = "friends"
	RelationOpBlocks   = "blocks"
	RelationOpRequests = "requests"
)

// RelationRequest is the body of RELATION (19). Which fields an op reads
// is listed with the ops; the others are ignored.
type RelationRequest struct {
	Op     string    `json:"op"`
	UserID jsonid.ID `json:"user_id,omitempty"`
	Note   string    `json:"note,omitempty"`
	// Remark is required by "remark"; a pointer so that "" (clear) and
	// absent differ.
	Remark *string   `json:"remark,omitempty"`
	After  jsonid.ID `json:"after,omitempty"`
	Limit  int       `json:"limit,omitempty"`
}

// ChangeReply is the data of a RELATION change: whether anything changed
// (false for an idempotent repeat).
type ChangeReply struct {
	Changed bool `json:"changed"`
}

// Friend is one entry of a friend list (created_at in Unix ms).
type Friend struct {
	UserID    jsonid.ID `json:"user_id"`
	Remark    string    `json:"remark"`
	CreatedAt int64     `json:"created_at"`
}

// FriendsReply is the data of RELATION "friends": a page by user id; Next
// is the "after" of the next page, More whether one follows.
type FriendsReply struct {
	Friends []Friend  `json:"friends"`
	Next    jsonid.ID `json:"next"`
	More    bool      `json:"more"`
}

// BlockedUser is one entry of a block list (created_at in Unix ms).
type BlockedUser struct {
	UserID    jsonid.ID `json:"user_id"`
	CreatedAt int64     `json:"created_at"`
}

// BlocksReply is the data of RELATION "blocks".
type BlocksReply struct {
	Blocks []BlockedUser `json:"blocks"`
	Next   jsonid.ID     `json:"next"`
	More   bool          `json:"more"`
}

// FriendRequest is one incoming pending friend request: UserID asked
// (times in Unix ms: the first request of the pair and the latest one).
type FriendRequest struct {
	UserID    jsonid.ID `json:"user_id"`
	Note      string    `json:"note"`
	CreatedAt int64     `json:"created_at"`
	UpdatedAt int64     `json:"updated_at"`
}

// FriendRequestsReply is the data of RELATION "requests".
type FriendRequestsReply struct {
	Requests []FriendRequest `json:"requests"`
	Next     jsonid.ID       `json:"next"`
	More     bool            `json:"more"`
}

// The ops of GROUP (20). The acting user is always the session's.
const (
	GroupOpCreate     = "create"      // name, member_ids, avatar?, announcement?; the actor owns it
	GroupOpAdd        = "add"         // group_id, user_ids
	GroupOpRemove     = "remove"      // group_id, user_ids
	GroupOpLeave      = "leave"       // group_id
	GroupOpRole       = "role"        // group_id, user_id, role ("member" | "admin")
	GroupOpMuteAll    = "mute_all"    // group_id, mute
	GroupOpMuteMember = "mute_member" // group_id, user_id, until (Unix ms; 0 unmutes)
	GroupOpTransfer   = "transfer"    // group_id, user_id (the new owner)
	GroupOpDissolve   = "dissolve"    // group_id
	GroupOpUpdate     = "update"      // group_id, name?, avatar?, announcement?
	GroupOpInfo       = "info"        // group_id
	GroupOpMembers    = "members"     // group_id, after?, limit?
)

// Group roles as GROUP writes and reads them.
const (
	GroupRoleMember = "member"
	GroupRoleAdmin  = "admin"
	GroupRoleOwner  = "owner"
)

// GroupRequest is the body of GROUP (20). Optional and tri-state fields
// are pointers, so "absent" differs from false, 0 and "".
type GroupRequest struct {
	Op           string      `json:"op"`
	GroupID      jsonid.ID   `json:"group_id,omitempty"`
	UserID       jsonid.ID   `json:"user_id,omitempty"`
	UserIDs      []jsonid.ID `json:"user_ids,omitempty"`
	MemberIDs    []jsonid.ID `json:"member_ids,omitempty"`
	Name         *string     `json:"name,omitempty"`
	Avatar       *string     `json:"avatar,omitempty"`
	Announcement *string     `json:"announcement,omitempty"`
	Role         string      `json:"role,omitempty"`
	Mute         *bool       `json:"mute,omitempty"`
	// Until is a member mute's end in Unix ms; 0 unmutes.
	Until *int64    `json:"until,omitempty"`
	After jsonid.ID `json:"after,omitempty"`
	Limit int       `json:"limit,omitempty"`
}

// GroupInfo is a group as its members see it (times in Unix ms; status 1
// active, 2 dissolved).
type GroupInfo struct {
	GroupID        jsonid.ID `json:"group_id"`
	ConversationID jsonid.ID `json:"conversation_id"`
	Name           string    `json:"name"`
	Avatar         string    `json:"avatar"`
	Announcement   string    `json:"announcement"`
	OwnerID        jsonid.ID `json:"owner_id"`
	MuteAll        bool      `json:"mute_all"`
	Status         int       `json:"status"`
	MemberCount    int       `json:"member_count"`
	MemberVersion  int64     `json:"member_version"`
	MaxMembers     int       `json:"max_members"`
	CreatedAt      int64     `json:"created_at"`
	UpdatedAt      int64     `json:"updated_at"`
}

// GroupChangeReply is the data of a GROUP change: the group after it,
// whether anything changed, and who joined or left.
type GroupChangeReply struct {
	Group   GroupInfo   `json:"group"`
	Changed bool        `json:"changed"`
	Added   []jsonid.ID `json:"added"`
	Removed []jsonid.ID `json:"removed"`
}

// GroupInfoReply is the data of GROUP "info".
type GroupInfoReply struct {
	Group GroupInfo `json:"group"`
}

// GroupMember is one member (times in Unix ms; mute_until 0 = not muted).
type GroupMember struct {
	UserID    jsonid.ID `json:"user_id"`
	Role      string    `json:"role"`
	MuteUntil int64     `json:"mute_until"`
	JoinedAt  int64     `json:"joined_at"`
}

// GroupMembersReply is the data of GROUP "members": a page by user id;
// Next is the "after" of the next page ("0" on the last), More whether one
// follows, MemberVersion the group's member_version read before the page.
type GroupMembersReply struct {
	GroupID       jsonid.ID     `json:"group_id"`
	Members       []GroupMember `json:"members"`
	Next          jsonid.ID     `json:"next"`
	More          bool          `json:"more"`
	MemberVersion int64         `json:"member_version"`
}
