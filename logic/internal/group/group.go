// Package group is the groups domain (issue 8): create, members, roles,
// mutes, transfer, dissolve and group info, and the send-permission check
// of a group conversation. It takes typed requests and returns typed
// results; the client protocol, the business API and the internal RPC are
// adapters over it. Errors a caller should show are *errcode.Error
// (40001 naming the field, 40301, 40401, 40901).
//
// Every change runs in one MySQL transaction on the locked group row
// (store.ChangeGroup) and writes at most one MEMBERSHIP mailbox event per
// affected user — the users added, removed or changed — never one per
// member, so a change costs the same in a group of 10 and of 10,000. What
// the other members should learn (Change.NotifyMembers) is for the caller
// to push as a control event. The rules are docs/decisions.md 31–36.
package group

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// System is the ActorID of the business system (the business API acting
// as itself): it may do whatever the owner may, in any group, without
// being a member.
const System int64 = 0

// Limits of one request.
const (
	// MaxUsersPerCall bounds the users of one Create or Add/RemoveMembers,
	// so one transaction (and its mailbox events) stays small; larger
	// groups are filled by several AddMembers calls.
	MaxUsersPerCall = 500
	// DefaultPageSize and MaxPageSize bound a Members page.
	DefaultPageSize = 100
	MaxPageSize     = 1000
	// Field lengths, in characters (the VARCHAR sizes of t_groups).
	MaxNameLen         = 64
	MaxAvatarLen       = 512
	MaxAnnouncementLen = 2048
)

// Role is a member's role.
type Role int

// The roles (t_conversation_members.role).
const (
	RoleMember Role = store.RoleMember
	RoleAdmin  Role = store.RoleAdmin
	RoleOwner  Role = store.RoleOwner
)

// String names the role, for logs and payloads.
func (r Role) String() string {
	switch r {
	case RoleMember:
		return "member"
	case RoleAdmin:
		return "admin"
	case RoleOwner:
		return "owner"
	}
	return fmt.Sprintf("role(%d)", int(r))
}

// Status is a group's status.
type Status int

// The statuses (t_groups.status).
const (
	StatusActive    Status = store.GroupActive
	StatusDissolved Status = store.GroupDissolved
)

// Actions name a change, in the MEMBERSHIP event payload and in Change.
const (
	ActionAdded     = "added"     // the user became a member (Create, AddMembers)
	ActionRemoved   = "removed"   // the user was removed by an owner/admin
	ActionLeft      = "left"      // the user left
	ActionRole      = "role"      // the user's role changed (SetRole, Transfer)
	ActionMuted     = "muted"     // the user's mute changed
	ActionMuteAll   = "mute_all"  // mute-all switched
	ActionUpdated   = "updated"   // name, avatar or announcement changed
	ActionDissolved = "dissolved" // the group was dissolved
)

// Info is a group as members see it.
type Info struct {
	GroupID        int64
	ConversationID int64
	Name           string
	Avatar         string
	Announcement   string
	OwnerID        int64
	MuteAll        bool
	Status         Status
	MemberCount    int
	// MemberVersion changes with every change of the member list, a role,
	// a member mute, and with dissolve.
	MemberVersion int64
	MaxMembers    int
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

func infoOf(g store.Group) Info {
	return Info{
		GroupID: g.ID, ConversationID: g.ConversationID, Name: g.Name, Avatar: g.Avatar,
		Announcement: g.Announcement, OwnerID: g.OwnerID, MuteAll: g.MuteAll, Status: Status(g.Status),
		MemberCount: g.MemberCount, MemberVersion: g.MemberVersion, MaxMembers: g.MaxMembers,
		CreatedAt: g.CreatedAt, UpdatedAt: g.UpdatedAt,
	}
}

// Member is one member of a group.
type Member struct {
	UserID int64
	Role   Role
	// MuteUntil: the member may not send before it; zero when not muted
	// (a mute that has expired is reported as it was set).
	MuteUntil time.Time
	JoinedAt  time.Time
}

func memberOf(m store.GroupMember) Member {
	out := Member{UserID: m.UserID, Role: Role(m.Role), JoinedAt: m.JoinedAt}
	if m.MuteUntil.Valid {
		out.MuteUntil = m.MuteUntil.Time
	}
	return out
}

// Event is a MEMBERSHIP mailbox event a change wrote.
type Event struct {
	UserID  int64
	Seq     int64
	Payload json.RawMessage
}

// Change is what a changing operation did, for the caller to push control
// events and invalidate list entries and member caches.
type Change struct {
	// Group is the group after the change; Group.MemberVersion is the new
	// member_version.
	Group Info
	// Action is one of the Action constants.
	Action string
	// ActorID is who made the change (System for the business system).
	ActorID int64
	// Changed is false for an idempotent repeat: nothing was written, no
	// event, the same member_version.
	Changed bool
	// Added and Removed are the users who became and stopped being
	// members (ascending): their conversation lists change.
	Added, Removed []int64
	// Affected are the users given exactly one MEMBERSHIP mailbox event in
	// the change's transaction (ascending); Events are those events.
	Affected []int64
	Events   []Event
	// NotifyMembers: the change concerns every member (mute-all, info,
	// roles, transfer, dissolve, membership), so the caller should push a
	// control event to the group's members; they got no mailbox event.
	NotifyMembers bool
}

// EventPayload is the JSON payload of a MEMBERSHIP event (and a natural
// body for the control push of a change): ids only, never content.
type EventPayload struct {
	Action        string    `json:"action"`
	GroupID       jsonid.ID `json:"group_id"`
	OperatorID    jsonid.ID `json:"operator_id"`
	MemberVersion int64     `json:"member_version"`
	// Role is the user's role after an "added" or "role" event.
	Role *int `json:"role,omitempty"`
	// MuteUntil is a "muted" event's end, Unix ms; 0 = unmuted.
	MuteUntil *int64 `json:"mute_until,omitempty"`
}

// Payload returns the control-push payload of c (no role or mute fields).
func (c Change) Payload() json.RawMessage {
	b, _ := protocol.Marshal(EventPayload{Action: c.Action, GroupID: jsonid.ID(c.Group.GroupID),
		OperatorID: jsonid.ID(c.ActorID), MemberVersion: c.Group.MemberVersion})
	return b
}

// Requests. ActorID is the user acting (System for the business system).

// CreateRequest creates a group owned by OwnerID with MemberIDs (the
// owner is a member whether listed or not).
type CreateRequest struct {
	OwnerID      int64
	MemberIDs    []int64
	Name         string
	Avatar       string
	Announcement string
}

// MembersChangeRequest adds or removes UserIDs.
type MembersChangeRequest struct {
	ActorID int64
	GroupID int64
	UserIDs []int64
}

// LeaveRequest: UserID leaves GroupID.
type LeaveRequest struct {
	GroupID int64
	UserID  int64
}

// SetRoleRequest makes UserID an admin or a member again.
type SetRoleRequest struct {
	ActorID int64
	GroupID int64
	UserID  int64
	Role    Role
}

// MuteAllRequest switches mute-all On or off.
type MuteAllRequest struct {
	ActorID int64
	GroupID int64
	On      bool
}

// MuteMemberRequest mutes UserID until Until; a zero Until unmutes.
type MuteMemberRequest struct {
	ActorID int64
	GroupID int64
	UserID  int64
	Until   time.Time
}

// TransferRequest makes NewOwnerID, a member, the owner; the old owner
// becomes an admin.
type TransferRequest struct {
	ActorID    int64
	GroupID    int64
	NewOwnerID int64
}

// DissolveRequest dissolves a group.
type DissolveRequest struct {
	ActorID int64
	GroupID int64
}

// UpdateRequest sets the non-nil fields.
type UpdateRequest struct {
	ActorID      int64
	GroupID      int64
	Name         *string
	Avatar       *string
	Announcement *string
}

// GetRequest reads a group's info.
type GetRequest struct {
	ActorID int64
	GroupID int64
}

// MembersRequest reads a page of members with user_id > AfterUserID.
type MembersRequest struct {
	ActorID     int64
	GroupID     int64
	AfterUserID int64
	Limit       int // 0 = DefaultPageSize
}

// MembersPage is one page of members by user id.
type MembersPage struct {
	Members []Member
	// NextUserID is the AfterUserID of the next page; 0 on the last page.
	NextUserID int64
	// MemberVersion is the group's member_version read before the page.
	MemberVersion int64
}

// Errors.

func forbidden(why string) *errcode.Error {
	return errcode.New(errcode.Forbidden, "forbidden: "+why)
}

func conflict(why string) *errcode.Error {
	return errcode.New(errcode.Conflict, "conflict: "+why)
}

var (
	errGroupNotFound = errcode.New(errcode.NotFound, "group not found")
	errNotMember     = forbidden("not a member of the group")
	errDissolved     = conflict("the group is dissolved")
)

func memberNotFound(field string) *errcode.Error {
	return errcode.New(errcode.NotFound, "not found: "+field+" is not a member of the group")
}

func checkText(field, v string, maxLen int, required bool) error {
	switch {
	case !utf8.ValidString(v):
		return errcode.Invalid(field, "not valid UTF-8")
	case required && v == "":
		return errcode.Invalid(field, "empty")
	case utf8.RuneCountInString(v) > maxLen:
		return errcode.Invalid(field, fmt.Sprintf("longer than %d characters", maxLen))
	}
	return nil
}

func checkGroupID(id int64) error {
	if id <= 0 {
		return errcode.Invalid("group_id", "must be a positive id")
	}
	return nil
}

func checkActor(id int64) error {
	if id < 0 {
		return errcode.Invalid("actor_id", "must be a user id or 0 (system)")
	}
	return nil
}

// userIDs validates a list of user ids and returns it sorted without
// duplicates.
func userIDs(field string, ids []int64, allowEmpty bool) ([]int64, error) {
	if len(ids) == 0 && !allowEmpty {
		return nil, errcode.Invalid(field, "empty")
	}
	for _, id := range ids {
		if id <= 0 {
			return nil, errcode.Invalid(field, fmt.Sprintf("%d is not a user id", id))
		}
	}
	out := slices.Clone(ids)
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > MaxUsersPerCall {
		return nil, errcode.Invalid(field, fmt.Sprintf("more than %d users in one call", MaxUsersPerCall))
	}
	return out, nil
}

// IDs issues group, conversation and mailbox event ids (a
// *msgid.Generator).
type IDs interface {
	Next(ctx context.Context) (int64, error)
}

// Config configures the service.
type Config struct {
	// MaxMembers is the member limit of new groups
	// (logic.group_max_members), at least 1.
	MaxMembers int
}

// Service is the groups domain service. It is safe for concurrent use.
type Service struct {
	store      *store.Store
	ids        IDs
	maxMembers int
	now        func() time.Time
}

// New returns a Service; it refuses a member limit below 1.
func New(st *store.Store, ids IDs, cfg Config) (*Service, error) {
	if cfg.MaxMembers < 1 {
		return nil, fmt.Errorf("group: logic.group_max_members %d must be at least 1", cfg.MaxMembers)
	}
	return &Service{store: st, ids: ids, maxMembers: cfg.MaxMembers, now: time.Now}, nil
}

// MaxMembers returns the member limit new groups get.
func (s *Service) MaxMembers() int { return s.maxMembers }

func (s *Service) newIDs(ctx context.Context, n int) ([]int64, error) {
	out := make([]int64, n)
	for i := range out {
		id, err := s.ids.Next(ctx)
		if err != nil {
			return nil, fmt.Errorf("group: issue id: %w", err)
		}
		out[i] = id
	}
	return out, nil
}
