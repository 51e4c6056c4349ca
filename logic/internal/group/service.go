package group

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// rank orders who may act on whom: the system above the owner above admins
// above members. A role change or moderation (remove, mute) needs a rank
// strictly above the target's; the owner is never its target.
const rankSystem = 3

// Create creates a group: its conversation, the owner (role owner) and the
// members, each given one "added" MEMBERSHIP event. Every user must exist
// (40401); the members, owner included, must fit in the member limit
// (40001 member_ids).
func (s *Service) Create(ctx context.Context, req CreateRequest) (Change, error) {
	if req.OwnerID <= 0 {
		return Change{}, errcode.Invalid("owner_id", "must be a positive user id")
	}
	ids, err := userIDs("member_ids", append(slices.Clone(req.MemberIDs), req.OwnerID), false)
	if err != nil {
		return Change{}, err
	}
	if len(ids) > s.maxMembers {
		return Change{}, errcode.Invalid("member_ids", fmt.Sprintf("more than the member limit %d", s.maxMembers))
	}
	if err := checkText("name", req.Name, MaxNameLen, true); err != nil {
		return Change{}, err
	}
	if err := checkText("avatar", req.Avatar, MaxAvatarLen, false); err != nil {
		return Change{}, err
	}
	if err := checkText("announcement", req.Announcement, MaxAnnouncementLen, false); err != nil {
		return Change{}, err
	}
	if err := s.usersExist(ctx, "member_ids", ids); err != nil {
		return Change{}, err
	}
	newIDs, err := s.newIDs(ctx, 2+len(ids))
	if err != nil {
		return Change{}, err
	}
	g := store.Group{
		ID: newIDs[0], ConversationID: newIDs[1], Name: req.Name, Avatar: req.Avatar, Announcement: req.Announcement,
		OwnerID: req.OwnerID, Status: store.GroupActive, MaxMembers: s.maxMembers,
	}
	members := make([]store.GroupMember, len(ids))
	events := make([]store.MailboxEvent, len(ids))
	for i, uid := range ids {
		role := RoleMember
		if uid == req.OwnerID {
			role = RoleOwner
		}
		members[i] = store.GroupMember{UserID: uid, Role: int(role)}
		r := int(role)
		events[i] = membershipEvent(uid, g.ConversationID, EventPayload{
			Action: ActionAdded, GroupID: jsonid.ID(g.ID), OperatorID: jsonid.ID(req.OwnerID), MemberVersion: 1, Role: &r,
		})
	}
	created, err := s.store.CreateGroup(ctx, store.NewGroup{Group: g, Members: members}, events, newIDs[2:])
	if err != nil {
		return Change{}, fmt.Errorf("group: create: %w", err)
	}
	return Change{
		Group: infoOf(created.Group), Action: ActionAdded, ActorID: req.OwnerID, Changed: true,
		Added: ids, Affected: ids, Events: eventsOf(created.Events),
	}, nil
}

// AddMembers adds users (owner and admins may). Users already members are
// skipped without an event; adding only members is an unchanged success.
// Past the group's limit it is 40901 and nothing is added.
func (s *Service) AddMembers(ctx context.Context, req MembersChangeRequest) (Change, error) {
	ids, err := s.checkMembersChange(req)
	if err != nil {
		return Change{}, err
	}
	if err := s.usersExist(ctx, "user_ids", ids); err != nil {
		return Change{}, err
	}
	return s.change(ctx, req.GroupID, req.ActorID, ActionAdded, len(ids), func(ctx context.Context, t *store.GroupTx, c *Change) error {
		if _, err := s.actorRank(ctx, t, req.ActorID, RoleAdmin); err != nil {
			return err
		}
		if err := active(t); err != nil {
			return err
		}
		have, err := t.Members(ctx, ids)
		if err != nil {
			return err
		}
		var add []store.GroupMember
		for _, uid := range ids {
			if _, ok := have[uid]; !ok {
				add = append(add, store.GroupMember{UserID: uid, Role: store.RoleMember})
				c.Added = append(c.Added, uid)
			}
		}
		if err := t.AddMembers(ctx, add); err != nil {
			if errors.Is(err, store.ErrGroupFull) {
				g := t.Group()
				return conflict(fmt.Sprintf("the group is full: %d members, limit %d", g.MemberCount, g.MaxMembers))
			}
			return err
		}
		r := int(RoleMember)
		return notifyAll(t, c, c.Added, ActionAdded, req.ActorID, &r, nil)
	})
}

// RemoveMembers removes users: the owner may remove admins and members,
// admins may remove members; nobody removes the owner (40301). Users who
// are not members are skipped; if any target is forbidden nothing is
// removed.
func (s *Service) RemoveMembers(ctx context.Context, req MembersChangeRequest) (Change, error) {
	ids, err := s.checkMembersChange(req)
	if err != nil {
		return Change{}, err
	}
	return s.change(ctx, req.GroupID, req.ActorID, ActionRemoved, len(ids), func(ctx context.Context, t *store.GroupTx, c *Change) error {
		rank, err := s.actorRank(ctx, t, req.ActorID, RoleAdmin)
		if err != nil {
			return err
		}
		if err := active(t); err != nil {
			return err
		}
		have, err := t.Members(ctx, ids)
		if err != nil {
			return err
		}
		for _, uid := range ids {
			m, ok := have[uid]
			if !ok {
				continue
			}
			if err := canModerate(rank, m); err != nil {
				return err
			}
			c.Removed = append(c.Removed, uid)
		}
		if _, err := t.RemoveMembers(ctx, c.Removed); err != nil {
			return err
		}
		return notifyAll(t, c, c.Removed, ActionRemoved, req.ActorID, nil, nil)
	})
}

// Leave removes UserID from the group. The owner of an active group may not
// leave (40301: transfer ownership or dissolve first); any member of a
// dissolved group may, which drops it from their list. Leaving a group one
// is not a member of is an unchanged success (a retried leave).
func (s *Service) Leave(ctx context.Context, req LeaveRequest) (Change, error) {
	if err := checkGroupID(req.GroupID); err != nil {
		return Change{}, err
	}
	if req.UserID <= 0 {
		return Change{}, errcode.Invalid("user_id", "must be a positive user id")
	}
	return s.change(ctx, req.GroupID, req.UserID, ActionLeft, 1, func(ctx context.Context, t *store.GroupTx, c *Change) error {
		m, ok, err := t.Member(ctx, req.UserID)
		if err != nil || !ok {
			return err
		}
		if m.Role == store.RoleOwner && t.Group().Status == store.GroupActive {
			return forbidden("the owner cannot leave; transfer ownership or dissolve the group")
		}
		if _, err := t.RemoveMembers(ctx, []int64{req.UserID}); err != nil {
			return err
		}
		c.Removed = []int64{req.UserID}
		return notifyAll(t, c, c.Removed, ActionLeft, req.UserID, nil, nil)
	})
}

// SetRole makes a member an admin or a member (the owner only). The owner's
// own role changes only by Transfer (40301).
func (s *Service) SetRole(ctx context.Context, req SetRoleRequest) (Change, error) {
	if err := s.checkTarget(req.ActorID, req.GroupID, req.UserID); err != nil {
		return Change{}, err
	}
	if req.Role != RoleMember && req.Role != RoleAdmin {
		return Change{}, errcode.Invalid("role", "must be 0 (member) or 1 (admin)")
	}
	return s.change(ctx, req.GroupID, req.ActorID, ActionRole, 1, func(ctx context.Context, t *store.GroupTx, c *Change) error {
		if _, err := s.actorRank(ctx, t, req.ActorID, RoleOwner); err != nil {
			return err
		}
		if err := active(t); err != nil {
			return err
		}
		m, ok, err := t.Member(ctx, req.UserID)
		if err != nil {
			return err
		}
		if !ok {
			return memberNotFound("user_id")
		}
		if m.Role == store.RoleOwner {
			return forbidden("the owner's role changes only by transfer")
		}
		if m.Role == int(req.Role) {
			return nil
		}
		if err := t.SetRole(ctx, req.UserID, int(req.Role)); err != nil {
			return err
		}
		r := int(req.Role)
		c.NotifyMembers = true
		return notifyAll(t, c, []int64{req.UserID}, ActionRole, req.ActorID, &r, nil)
	})
}

// MuteAll switches mute-all (owner and admins): while on, only the owner
// and admins may send.
func (s *Service) MuteAll(ctx context.Context, req MuteAllRequest) (Change, error) {
	if err := checkActor(req.ActorID); err != nil {
		return Change{}, err
	}
	if err := checkGroupID(req.GroupID); err != nil {
		return Change{}, err
	}
	return s.change(ctx, req.GroupID, req.ActorID, ActionMuteAll, 0, func(ctx context.Context, t *store.GroupTx, c *Change) error {
		if _, err := s.actorRank(ctx, t, req.ActorID, RoleAdmin); err != nil {
			return err
		}
		if err := active(t); err != nil {
			return err
		}
		if t.Group().MuteAll != req.On {
			t.Update(func(g *store.Group) { g.MuteAll = req.On })
			c.NotifyMembers = true
		}
		return nil
	})
}

// MuteMember mutes a member until a time, or unmutes (zero Until). The
// owner may mute admins and members, admins members only; the owner is
// never muted (40301). An Until not after now is 40001.
func (s *Service) MuteMember(ctx context.Context, req MuteMemberRequest) (Change, error) {
	if err := s.checkTarget(req.ActorID, req.GroupID, req.UserID); err != nil {
		return Change{}, err
	}
	until := sql.NullTime{}
	if !req.Until.IsZero() {
		if !req.Until.After(s.now()) {
			return Change{}, errcode.Invalid("until", "must be in the future (or zero to unmute)")
		}
		until = sql.NullTime{Time: req.Until.UTC().Truncate(time.Millisecond), Valid: true}
	}
	return s.change(ctx, req.GroupID, req.ActorID, ActionMuted, 1, func(ctx context.Context, t *store.GroupTx, c *Change) error {
		rank, err := s.actorRank(ctx, t, req.ActorID, RoleAdmin)
		if err != nil {
			return err
		}
		if err := active(t); err != nil {
			return err
		}
		m, ok, err := t.Member(ctx, req.UserID)
		if err != nil {
			return err
		}
		if !ok {
			return memberNotFound("user_id")
		}
		if err := canModerate(rank, m); err != nil {
			return err
		}
		if m.MuteUntil.Valid == until.Valid && (!until.Valid || m.MuteUntil.Time.Equal(until.Time)) {
			return nil
		}
		if err := t.SetMuteUntil(ctx, req.UserID, until); err != nil {
			return err
		}
		var at int64
		if until.Valid {
			at = until.Time.UnixMilli()
		}
		return notifyAll(t, c, []int64{req.UserID}, ActionMuted, req.ActorID, nil, &at)
	})
}

// Transfer makes a member the owner (the owner only); the old owner
// becomes an admin. Both get a "role" event. Transferring to the owner is
// an unchanged success.
func (s *Service) Transfer(ctx context.Context, req TransferRequest) (Change, error) {
	if err := checkActor(req.ActorID); err != nil {
		return Change{}, err
	}
	if err := checkGroupID(req.GroupID); err != nil {
		return Change{}, err
	}
	if req.NewOwnerID <= 0 {
		return Change{}, errcode.Invalid("new_owner_id", "must be a positive user id")
	}
	return s.change(ctx, req.GroupID, req.ActorID, ActionRole, 2, func(ctx context.Context, t *store.GroupTx, c *Change) error {
		if _, err := s.actorRank(ctx, t, req.ActorID, RoleOwner); err != nil {
			return err
		}
		if err := active(t); err != nil {
			return err
		}
		old := t.Group().OwnerID
		if req.NewOwnerID == old {
			return nil
		}
		if _, ok, err := t.Member(ctx, req.NewOwnerID); err != nil {
			return err
		} else if !ok {
			return memberNotFound("new_owner_id")
		}
		if err := t.SetRole(ctx, old, store.RoleAdmin); err != nil {
			return err
		}
		if err := t.SetRole(ctx, req.NewOwnerID, store.RoleOwner); err != nil {
			return err
		}
		t.Update(func(g *store.Group) { g.OwnerID = req.NewOwnerID })
		c.NotifyMembers = true
		admin, owner := int(RoleAdmin), int(RoleOwner)
		if err := notifyAll(t, c, []int64{old}, ActionRole, req.ActorID, &admin, nil); err != nil {
			return err
		}
		return notifyAll(t, c, []int64{req.NewOwnerID}, ActionRole, req.ActorID, &owner, nil)
	})
}

// Dissolve ends a group (the owner only). Members stay members, so the
// history stays readable and the conversation stays in their lists until
// they leave, but nobody can send (CheckSend is 40301) and every other
// change is 40901. No member gets a mailbox event here (NotifyMembers: the
// caller reaches them). Dissolving again is an unchanged success.
func (s *Service) Dissolve(ctx context.Context, req DissolveRequest) (Change, error) {
	if err := checkActor(req.ActorID); err != nil {
		return Change{}, err
	}
	if err := checkGroupID(req.GroupID); err != nil {
		return Change{}, err
	}
	return s.change(ctx, req.GroupID, req.ActorID, ActionDissolved, 0, func(ctx context.Context, t *store.GroupTx, c *Change) error {
		if _, err := s.actorRank(ctx, t, req.ActorID, RoleOwner); err != nil {
			return err
		}
		if t.Group().Status == store.GroupDissolved {
			return nil
		}
		t.Update(func(g *store.Group) { g.Status = store.GroupDissolved })
		c.NotifyMembers = true
		return nil
	})
}

// Update sets the group's name, avatar or announcement (owner and
// admins). Setting the values it already has is an unchanged success.
func (s *Service) Update(ctx context.Context, req UpdateRequest) (Change, error) {
	if err := checkActor(req.ActorID); err != nil {
		return Change{}, err
	}
	if err := checkGroupID(req.GroupID); err != nil {
		return Change{}, err
	}
	if req.Name == nil && req.Avatar == nil && req.Announcement == nil {
		return Change{}, errcode.Invalid("name", "nothing to update (name, avatar, announcement)")
	}
	if req.Name != nil {
		if err := checkText("name", *req.Name, MaxNameLen, true); err != nil {
			return Change{}, err
		}
	}
	if req.Avatar != nil {
		if err := checkText("avatar", *req.Avatar, MaxAvatarLen, false); err != nil {
			return Change{}, err
		}
	}
	if req.Announcement != nil {
		if err := checkText("announcement", *req.Announcement, MaxAnnouncementLen, false); err != nil {
			return Change{}, err
		}
	}
	return s.change(ctx, req.GroupID, req.ActorID, ActionUpdated, 0, func(ctx context.Context, t *store.GroupTx, c *Change) error {
		if _, err := s.actorRank(ctx, t, req.ActorID, RoleAdmin); err != nil {
			return err
		}
		if err := active(t); err != nil {
			return err
		}
		before := t.Group()
		t.Update(func(g *store.Group) {
			if req.Name != nil {
				g.Name = *req.Name
			}
			if req.Avatar != nil {
				g.Avatar = *req.Avatar
			}
			if req.Announcement != nil {
				g.Announcement = *req.Announcement
			}
		})
		c.NotifyMembers = t.Group() != before
		return nil
	})
}

// Get returns a group's info, to its members and the system (others 40301).
func (s *Service) Get(ctx context.Context, req GetRequest) (Info, error) {
	if err := checkActor(req.ActorID); err != nil {
		return Info{}, err
	}
	if err := checkGroupID(req.GroupID); err != nil {
		return Info{}, err
	}
	g, err := s.readable(ctx, req.GroupID, req.ActorID)
	if err != nil {
		return Info{}, err
	}
	return infoOf(g), nil
}

// ByConversation returns the group of a conversation without a permission
// check, for the send path and deliver resolving a conversation_id (40401
// when it is no group's).
func (s *Service) ByConversation(ctx context.Context, conversationID int64) (Info, error) {
	g, err := s.store.GroupByConversation(ctx, conversationID)
	if errors.Is(err, store.ErrNotFound) {
		return Info{}, errGroupNotFound
	}
	if err != nil {
		return Info{}, fmt.Errorf("group: read group of conversation %d: %w", conversationID, err)
	}
	return infoOf(g), nil
}

// Members returns one page of a group's members by user id, to its members
// and the system (others 40301).
func (s *Service) Members(ctx context.Context, req MembersRequest) (MembersPage, error) {
	if err := checkActor(req.ActorID); err != nil {
		return MembersPage{}, err
	}
	if err := checkGroupID(req.GroupID); err != nil {
		return MembersPage{}, err
	}
	if req.Limit < 0 || req.Limit > MaxPageSize {
		return MembersPage{}, errcode.Invalid("limit", fmt.Sprintf("must be 0–%d", MaxPageSize))
	}
	if req.AfterUserID < 0 {
		return MembersPage{}, errcode.Invalid("after_user_id", "must not be negative")
	}
	g, err := s.readable(ctx, req.GroupID, req.ActorID)
	if err != nil {
		return MembersPage{}, err
	}
	return s.page(ctx, g, req.AfterUserID, req.Limit)
}

// MembersByConversation returns one page of the members of a group
// conversation without a permission check, for deliver's member cache
// (logic.v1.Internal): compare MembersPage.MemberVersion across the pages
// (or with MemberVersion) to know the list did not change while paging.
func (s *Service) MembersByConversation(ctx context.Context, conversationID, afterUserID int64, limit int) (MembersPage, error) {
	if limit < 0 || limit > MaxPageSize {
		return MembersPage{}, errcode.Invalid("limit", fmt.Sprintf("must be 0–%d", MaxPageSize))
	}
	g, err := s.store.GroupByConversation(ctx, conversationID)
	if errors.Is(err, store.ErrNotFound) {
		return MembersPage{}, errGroupNotFound
	}
	if err != nil {
		return MembersPage{}, fmt.Errorf("group: read group of conversation %d: %w", conversationID, err)
	}
	return s.page(ctx, g, afterUserID, limit)
}

// MemberVersion returns the member_version of the group of a conversation:
// a cache of its members is current while this is unchanged.
func (s *Service) MemberVersion(ctx context.Context, conversationID int64) (int64, error) {
	v, err := s.store.MemberVersion(ctx, conversationID)
	if errors.Is(err, store.ErrNotFound) {
		return 0, errGroupNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("group: read member version of conversation %d: %w", conversationID, err)
	}
	return v, nil
}

func (s *Service) page(ctx context.Context, g store.Group, after int64, limit int) (MembersPage, error) {
	if limit == 0 {
		limit = DefaultPageSize
	}
	rows, err := s.store.GroupMembers(ctx, g.ConversationID, after, limit+1)
	if err != nil {
		return MembersPage{}, fmt.Errorf("group: read members of group %d: %w", g.ID, err)
	}
	p := MembersPage{MemberVersion: g.MemberVersion}
	if len(rows) > limit {
		rows = rows[:limit]
		p.NextUserID = rows[limit-1].UserID
	}
	p.Members = make([]Member, len(rows))
	for i, r := range rows {
		p.Members[i] = memberOf(r)
	}
	return p, nil
}

// CheckSend says whether userID may send into the group conversation
// conversationID at now: a member (40301 otherwise, also when the
// conversation is no group's, so ids reveal nothing — decision 25), the
// group active (40301), mute-all off unless owner or admin (40301), and
// not muted until after now (40301).
func (s *Service) CheckSend(ctx context.Context, conversationID, userID int64, now time.Time) error {
	g, err := s.store.GroupByConversation(ctx, conversationID)
	if errors.Is(err, store.ErrNotFound) {
		return errNotMember
	}
	if err != nil {
		return fmt.Errorf("group: check send: read group of conversation %d: %w", conversationID, err)
	}
	return s.checkSend(ctx, g, userID, now)
}

// checkSend is CheckSend on a group row already read.
func (s *Service) checkSend(ctx context.Context, g store.Group, userID int64, now time.Time) error {
	m, err := s.store.GetGroupMember(ctx, g.ConversationID, userID)
	if errors.Is(err, store.ErrNotFound) {
		return errNotMember
	}
	if err != nil {
		return fmt.Errorf("group: check send: read member %d of conversation %d: %w", userID, g.ConversationID, err)
	}
	switch {
	case g.Status != store.GroupActive:
		return forbidden("the group is dissolved")
	case g.MuteAll && m.Role < store.RoleAdmin:
		return forbidden("the group is muted")
	case m.MutedAt(now):
		return forbidden("muted until " + m.MuteUntil.Time.UTC().Format(time.RFC3339))
	}
	return nil
}

// IsMember reports whether userID is a member of the group conversation
// (members of a dissolved group still are: they may read its history).
func (s *Service) IsMember(ctx context.Context, conversationID, userID int64) (bool, error) {
	_, err := s.store.GetGroupMember(ctx, conversationID, userID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("group: read member %d of conversation %d: %w", userID, conversationID, err)
	}
	return true, nil
}

// change runs fn on the locked group and turns the outcome into a Change.
// events bounds the events fn may write.
func (s *Service) change(ctx context.Context, groupID, actorID int64, action string, events int,
	fn func(ctx context.Context, t *store.GroupTx, c *Change) error) (Change, error) {
	ids, err := s.newIDs(ctx, events)
	if err != nil {
		return Change{}, err
	}
	var c Change
	res, err := s.store.ChangeGroup(ctx, store.GroupRef{GroupID: groupID}, ids, func(ctx context.Context, t *store.GroupTx) error {
		c = Change{Action: action, ActorID: actorID} // fn may run again after a deadlock
		return fn(ctx, t, &c)
	})
	var ce *errcode.Error
	switch {
	case errors.As(err, &ce):
		return Change{}, err
	case errors.Is(err, store.ErrNotFound):
		return Change{}, errGroupNotFound
	case err != nil:
		return Change{}, fmt.Errorf("group %d: %s: %w", groupID, action, err)
	}
	c.Group = infoOf(res.Group)
	c.Changed = res.Changed
	c.Events = eventsOf(res.Events)
	if len(c.Removed) > 0 || len(c.Added) > 0 {
		c.NotifyMembers = true
	}
	return c, nil
}

// actorRank returns the actor's rank and checks it is at least need:
// 40301 for a non-member or a lower role.
func (s *Service) actorRank(ctx context.Context, t *store.GroupTx, actorID int64, need Role) (int, error) {
	if actorID == System {
		return rankSystem, nil
	}
	m, ok, err := t.Member(ctx, actorID)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, errNotMember
	}
	if m.Role < int(need) {
		return 0, forbidden(fmt.Sprintf("needs the %s role", need))
	}
	return m.Role, nil
}

// canModerate checks an actor of rank may remove or mute target: never
// the owner, and only a lower role.
func canModerate(rank int, target store.GroupMember) error {
	if target.Role == store.RoleOwner {
		return forbidden("the owner cannot be removed or muted")
	}
	if target.Role >= rank {
		return forbidden(fmt.Sprintf("an %s can only be removed or muted by the owner", Role(target.Role)))
	}
	return nil
}

func active(t *store.GroupTx) error {
	if t.Group().Status != store.GroupActive {
		return errDissolved
	}
	return nil
}

// readable reads a group for actorID: the system and members only.
func (s *Service) readable(ctx context.Context, groupID, actorID int64) (store.Group, error) {
	g, err := s.store.GetGroup(ctx, groupID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Group{}, errGroupNotFound
	}
	if err != nil {
		return store.Group{}, fmt.Errorf("group: read group %d: %w", groupID, err)
	}
	if actorID == System {
		return g, nil
	}
	if _, err := s.store.GetGroupMember(ctx, g.ConversationID, actorID); errors.Is(err, store.ErrNotFound) {
		return store.Group{}, errNotMember
	} else if err != nil {
		return store.Group{}, fmt.Errorf("group: read member %d of group %d: %w", actorID, groupID, err)
	}
	return g, nil
}

func (s *Service) checkMembersChange(req MembersChangeRequest) ([]int64, error) {
	if err := checkActor(req.ActorID); err != nil {
		return nil, err
	}
	if err := checkGroupID(req.GroupID); err != nil {
		return nil, err
	}
	return userIDs("user_ids", req.UserIDs, false)
}

func (s *Service) checkTarget(actorID, groupID, userID int64) error {
	if err := checkActor(actorID); err != nil {
		return err
	}
	if err := checkGroupID(groupID); err != nil {
		return err
	}
	if userID <= 0 {
		return errcode.Invalid("user_id", "must be a positive user id")
	}
	return nil
}

// usersExist is 40401 naming the first unknown user.
func (s *Service) usersExist(ctx context.Context, field string, ids []int64) error {
	have, err := s.store.ExistingUsers(ctx, ids)
	if err != nil {
		return fmt.Errorf("group: read users: %w", err)
	}
	for _, id := range ids {
		if !have[id] {
			return errcode.New(errcode.NotFound, fmt.Sprintf("not found: %s: user %d", field, id))
		}
	}
	return nil
}

// notifyAll queues one MEMBERSHIP event for each of users and records them
// as affected.
func notifyAll(t *store.GroupTx, c *Change, users []int64, action string, actorID int64, role *int, muteUntil *int64) error {
	g := t.Group()
	for _, uid := range users {
		e := membershipEvent(uid, g.ConversationID, EventPayload{
			Action: action, GroupID: jsonid.ID(g.ID), OperatorID: jsonid.ID(actorID), MemberVersion: g.MemberVersion,
			Role: role, MuteUntil: muteUntil,
		})
		if err := t.Notify(e); err != nil {
			return err
		}
		c.Affected = append(c.Affected, uid)
	}
	slices.Sort(c.Affected)
	return nil
}

func membershipEvent(uid, conversationID int64, p EventPayload) store.MailboxEvent {
	b, _ := protocol.Marshal(p) // ids and small numbers: cannot fail
	return store.MailboxEvent{UserID: uid, EventType: protocol.EventMembership, ConversationID: conversationID, Payload: b}
}

func eventsOf(events []store.MailboxEvent) []Event {
	if len(events) == 0 {
		return nil
	}
	out := make([]Event, len(events))
	for i, e := range events {
		out[i] = Event{UserID: e.UserID, Seq: e.Seq, Payload: e.Payload}
	}
	return out
}
