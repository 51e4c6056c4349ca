package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/retry"
)

// ConversationGroup is t_conversations.type of a group conversation.
const ConversationGroup = 2

// Member roles in a group (t_conversation_members.role).
const (
	RoleMember = 0
	RoleAdmin  = 1
	RoleOwner  = 2
)

// Group statuses (t_groups.status).
const (
	GroupActive    = 1
	GroupDissolved = 2
)

// ErrGroupFull is returned when adding members would take a group past its
// max_members. The check runs under the group's row lock, so concurrent
// adds never overshoot.
var ErrGroupFull = errors.New("store: group is full")

// Group is a t_groups row.
type Group struct {
	ID             int64     `db:"id"`
	ConversationID int64     `db:"conversation_id"`
	Name           string    `db:"name"`
	Avatar         string    `db:"avatar"`
	Announcement   string    `db:"announcement"`
	OwnerID        int64     `db:"owner_id"`
	MuteAll        bool      `db:"mute_all"`
	Status         int       `db:"status"`
	MemberCount    int       `db:"member_count"`
	MemberVersion  int64     `db:"member_version"`
	MaxMembers     int       `db:"max_members"`
	CreatedAt      time.Time `db:"created_at"`
	UpdatedAt      time.Time `db:"updated_at"`
}

const groupColumns = "id, conversation_id, name, avatar, announcement, owner_id, mute_all, status, member_count, member_version, max_members, created_at, updated_at"

// GroupMember is the part of a t_conversation_members row group
// moderation uses.
type GroupMember struct {
	ConversationID int64        `db:"conversation_id"`
	UserID         int64        `db:"user_id"`
	Role           int          `db:"role"`
	MuteUntil      sql.NullTime `db:"mute_until"`
	JoinedAt       time.Time    `db:"joined_at"`
}

const groupMemberColumns = "conversation_id, user_id, role, mute_until, joined_at"

// MutedAt reports whether the member may not send at now.
func (m GroupMember) MutedAt(now time.Time) bool {
	return m.MuteUntil.Valid && m.MuteUntil.Time.After(now)
}

// NewGroup is what CreateGroup writes: the group row's fields (ID and
// ConversationID issued by the caller, MemberCount and MemberVersion
// ignored) and the members with their roles (exactly one owner, OwnerID).
type NewGroup struct {
	Group   Group
	Members []GroupMember
}

// CreateGroup writes a group in one transaction: its conversation (type
// 2), its t_groups row (member_version 1), its member rows and events (one
// mailbox event per initial member; eventIDs gives their row ids). It
// returns the group and the events with their ids and seqs. Deadlocks are
// retried.
func (s *Store) CreateGroup(ctx context.Context, ng NewGroup, events []MailboxEvent, eventIDs []int64) (GroupChange, error) {
	owners := 0
	for _, m := range ng.Members {
		if m.Role == RoleOwner {
			owners++
			if m.UserID != ng.Group.OwnerID {
				return GroupChange{}, fmt.Errorf("store: create group: owner role for %d, owner is %d", m.UserID, ng.Group.OwnerID)
			}
		}
	}
	if owners != 1 {
		return GroupChange{}, fmt.Errorf("store: create group: %d owners", owners)
	}
	if len(ng.Members) > ng.Group.MaxMembers {
		return GroupChange{}, ErrGroupFull
	}
	if len(events) != len(eventIDs) {
		return GroupChange{}, fmt.Errorf("store: create group: %d events but %d ids", len(events), len(eventIDs))
	}
	var c GroupChange
	err := retry.Do(ctx, txRetry, func(ctx context.Context) (err error) {
		c, err = s.createGroupOnce(ctx, ng, events, eventIDs)
		return err
	})
	switch {
	case err == nil:
		return c, nil
	case err == ctx.Err():
		return GroupChange{}, err // ended while waiting to retry
	}
	return GroupChange{}, fmt.Errorf("store: create group: %w", err)
}

func (s *Store) createGroupOnce(ctx context.Context, ng NewGroup, events []MailboxEvent, eventIDs []int64) (GroupChange, error) {
	now := ms(time.Now())
	g := ng.Group
	g.MemberCount = len(ng.Members)
	g.MemberVersion = 1
	if g.Status == 0 {
		g.Status = GroupActive
	}
	g.CreatedAt, g.UpdatedAt = now, now
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return GroupChange{}, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "INSERT INTO t_conversations (id, type, last_msg_id, last_msg_at, created_at) VALUES (?, ?, 0, ?, ?)",
		g.ConversationID, ConversationGroup, now, now); err != nil {
		return GroupChange{}, err
	}
	if _, err := tx.NamedExecContext(ctx, `INSERT INTO t_groups (`+groupColumns+`) VALUES
(:id, :conversation_id, :name, :avatar, :announcement, :owner_id, :mute_all, :status, :member_count, :member_version, :max_members, :created_at, :updated_at)`, g); err != nil {
		return GroupChange{}, err
	}
	if err := insertMembers(ctx, tx, g.ConversationID, ng.Members, now); err != nil {
		return GroupChange{}, err
	}
	var seqs []int64
	if len(events) > 0 {
		if seqs, err = AppendMailboxTx(ctx, tx, events, eventIDs); err != nil {
			return GroupChange{}, err
		}
	}
	uids := make([]int64, len(ng.Members))
	for i, m := range ng.Members {
		uids[i] = m.UserID
	}
	// Last before the commit: the event's id is then at most one insert
	// older than the commit (the dispatcher's settle rule).
	if err := s.writeWebhookEvents(ctx, tx, now, pendingEvent{typ: EventGroupCreated, conversationID: g.ConversationID, data: groupEvent{
		GroupID: jsonid.ID(g.ID), ConversationID: jsonid.ID(g.ConversationID), OwnerID: jsonid.ID(g.OwnerID), Name: g.Name, UserIDs: ids(uids),
	}}); err != nil {
		return GroupChange{}, err
	}
	if err := tx.Commit(); err != nil {
		return GroupChange{}, err
	}
	out := make([]MailboxEvent, len(events))
	for i, e := range events {
		e.ID, e.Seq = eventIDs[i], seqs[i]
		out[i] = e
	}
	return GroupChange{Group: g, Changed: true, Events: out}, nil
}

// insertChunk bounds the rows of one multi-row INSERT.
const insertChunk = 500

func insertMembers(ctx context.Context, tx *sqlx.Tx, conversationID int64, members []GroupMember, now time.Time) error {
	for len(members) > 0 {
		n := min(len(members), insertChunk)
		var sb strings.Builder
		sb.WriteString("INSERT INTO t_conversation_members (conversation_id, user_id, role, mute_until, joined_at) VALUES ")
		args := make([]any, 0, n*5)
		for i, m := range members[:n] {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString("(?, ?, ?, ?, ?)")
			var until any
			if m.MuteUntil.Valid {
				until = ms(m.MuteUntil.Time)
			}
			args = append(args, conversationID, m.UserID, m.Role, until, now)
		}
		if _, err := tx.ExecContext(ctx, sb.String(), args...); err != nil {
			return err
		}
		members = members[n:]
	}
	return nil
}

// GetGroup reads a group by its id; ErrNotFound without one.
func (s *Store) GetGroup(ctx context.Context, groupID int64) (Group, error) {
	var g Group
	err := s.db.GetContext(ctx, &g, "SELECT "+groupColumns+" FROM t_groups WHERE id = ?", groupID)
	if errors.Is(err, sql.ErrNoRows) {
		return Group{}, ErrNotFound
	}
	return g, err
}

// GroupByConversation reads the group of a conversation; ErrNotFound when
// the conversation is no group's.
func (s *Store) GroupByConversation(ctx context.Context, conversationID int64) (Group, error) {
	var g Group
	err := s.db.GetContext(ctx, &g, "SELECT "+groupColumns+" FROM t_groups WHERE conversation_id = ?", conversationID)
	if errors.Is(err, sql.ErrNoRows) {
		return Group{}, ErrNotFound
	}
	return g, err
}

// MemberVersion returns the member_version of the group of a conversation,
// so a member cache (deliver's) can tell whether its copy is current
// without reading the members; ErrNotFound when the conversation is no
// group's.
func (s *Store) MemberVersion(ctx context.Context, conversationID int64) (int64, error) {
	var v int64
	err := s.db.GetContext(ctx, &v, "SELECT member_version FROM t_groups WHERE conversation_id = ?", conversationID)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrNotFound
	}
	return v, err
}

// GetGroupMember reads one member of a group conversation; ErrNotFound
// when the user is not a member.
func (s *Store) GetGroupMember(ctx context.Context, conversationID, userID int64) (GroupMember, error) {
	var m GroupMember
	err := s.db.GetContext(ctx, &m, "SELECT "+groupMemberColumns+" FROM t_conversation_members WHERE conversation_id = ? AND user_id = ?",
		conversationID, userID)
	if errors.Is(err, sql.ErrNoRows) {
		return GroupMember{}, ErrNotFound
	}
	return m, err
}

// GroupMembers returns up to limit members of a conversation with user_id >
// afterUserID, by user_id: one page of a member list (the API's, or
// deliver's cache fill). It is keyed by conversation_id and walks the
// (conversation_id, user_id) unique key, so a page costs the same at any
// offset.
func (s *Store) GroupMembers(ctx context.Context, conversationID, afterUserID int64, limit int) ([]GroupMember, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []GroupMember
	err := s.db.SelectContext(ctx, &out, "SELECT "+groupMemberColumns+` FROM t_conversation_members
WHERE conversation_id = ? AND user_id > ? ORDER BY user_id LIMIT ?`, conversationID, afterUserID, limit)
	return out, err
}

// ExistingUsers returns which of ids have a t_users row, so a group never
// gets members nobody can log in as.
func (s *Store) ExistingUsers(ctx context.Context, ids []int64) (map[int64]bool, error) {
	out := make(map[int64]bool, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), insertChunk)
		q, args, err := sqlx.In("SELECT id FROM t_users WHERE id IN (?)", ids[:n])
		if err != nil {
			return nil, err
		}
		var got []int64
		if err := s.db.SelectContext(ctx, &got, q, args...); err != nil {
			return nil, err
		}
		for _, id := range got {
			out[id] = true
		}
		ids = ids[n:]
	}
	return out, nil
}

// GroupRef names a group by its id or, when GroupID is 0, by its
// conversation.
type GroupRef struct {
	GroupID        int64
	ConversationID int64
}

// GroupTx is one group's membership transaction: the group row is locked
// (SELECT … FOR UPDATE) for its whole life, so every change of one group
// — and the member limit check — is serialized. Its methods read and
// change the members; ChangeGroup writes the group row (member_count,
// member_version, fields) and the queued mailbox events at the end.
type GroupTx struct {
	tx       *sqlx.Tx
	before   Group
	g        Group
	now      time.Time
	events   []MailboxEvent
	eventIDs []int64
	// hooks are the webhook events of the changes made so far.
	hooks []pendingEvent
}

// groupEvent is the data of a group.* webhook event; each type sets the
// fields it concerns.
type groupEvent struct {
	GroupID        jsonid.ID   `json:"group_id"`
	ConversationID jsonid.ID   `json:"conversation_id"`
	OwnerID        jsonid.ID   `json:"owner_id,omitempty"`
	Name           string      `json:"name,omitempty"`
	UserIDs        []jsonid.ID `json:"user_ids,omitempty"`
	UserID         jsonid.ID   `json:"user_id,omitempty"`
	Role           *int        `json:"role,omitempty"`
	MuteUntil      *time.Time  `json:"mute_until,omitempty"`
	Muted          *bool       `json:"muted,omitempty"`
}

func ids(v []int64) []jsonid.ID {
	out := make([]jsonid.ID, len(v))
	for i, x := range v {
		out[i] = jsonid.ID(x)
	}
	return out
}

// hook queues a webhook event about this group, written at commit.
func (t *GroupTx) hook(typ string, e groupEvent) {
	e.GroupID, e.ConversationID = jsonid.ID(t.g.ID), jsonid.ID(t.g.ConversationID)
	t.hooks = append(t.hooks, pendingEvent{typ: typ, conversationID: t.g.ConversationID, data: e})
}

// Group returns the locked group as changed so far in this transaction;
// its MemberVersion is the one the transaction commits once a member row
// changed, so events queued after a change can carry it.
func (t *GroupTx) Group() Group { return t.g }

// bump marks a change of the member rows (or of who may send): the
// transaction commits member_version + 1, once however many rows changed.
func (t *GroupTx) bump() { t.g.MemberVersion = t.before.MemberVersion + 1 }

// Now is the transaction's clock (UTC, ms), the time written to rows.
func (t *GroupTx) Now() time.Time { return t.now }

// Members reads the memberships of uids (keyed by user id; users who are
// not members are absent). A locking read: on TiDB a plain read in a
// pessimistic transaction sees the snapshot of its BEGIN, so after waiting
// for the group's lock it would miss the members the previous holder
// added; FOR UPDATE reads the latest committed rows on every engine (and
// the group lock already serializes every writer of these rows).
func (t *GroupTx) Members(ctx context.Context, uids []int64) (map[int64]GroupMember, error) {
	out := make(map[int64]GroupMember, len(uids))
	for len(uids) > 0 {
		n := min(len(uids), insertChunk)
		q, args, err := sqlx.In("SELECT "+groupMemberColumns+" FROM t_conversation_members WHERE conversation_id = ? AND user_id IN (?) FOR UPDATE",
			t.g.ConversationID, uids[:n])
		if err != nil {
			return nil, err
		}
		var got []GroupMember
		if err := t.tx.SelectContext(ctx, &got, q, args...); err != nil {
			return nil, err
		}
		for _, m := range got {
			out[m.UserID] = m
		}
		uids = uids[n:]
	}
	return out, nil
}

// Member reads one membership; ok is false when uid is not a member.
func (t *GroupTx) Member(ctx context.Context, uid int64) (m GroupMember, ok bool, err error) {
	got, err := t.Members(ctx, []int64{uid})
	if err != nil {
		return GroupMember{}, false, err
	}
	m, ok = got[uid]
	return m, ok, nil
}

// AddMembers inserts members who are not members yet (the caller filtered
// them with Members). ErrGroupFull when the group would pass max_members.
func (t *GroupTx) AddMembers(ctx context.Context, members []GroupMember) error {
	if len(members) == 0 {
		return nil
	}
	if t.g.MemberCount+len(members) > t.g.MaxMembers {
		return ErrGroupFull
	}
	if err := insertMembers(ctx, t.tx, t.g.ConversationID, members, t.now); err != nil {
		return err
	}
	t.g.MemberCount += len(members)
	t.bump()
	uids := make([]int64, len(members))
	for i, m := range members {
		uids[i] = m.UserID
	}
	t.hook(EventGroupMembersAdded, groupEvent{UserIDs: ids(uids)})
	return nil
}

// RemoveMembers deletes the member rows of uids (the caller passes members
// only) and returns how many it deleted.
func (t *GroupTx) RemoveMembers(ctx context.Context, uids []int64) (int, error) {
	all := uids
	removed := 0
	for len(uids) > 0 {
		n := min(len(uids), insertChunk)
		q, args, err := sqlx.In("DELETE FROM t_conversation_members WHERE conversation_id = ? AND user_id IN (?)", t.g.ConversationID, uids[:n])
		if err != nil {
			return removed, err
		}
		res, err := t.tx.ExecContext(ctx, q, args...)
		if err != nil {
			return removed, err
		}
		k, err := res.RowsAffected()
		if err != nil {
			return removed, err
		}
		removed += int(k)
		uids = uids[n:]
	}
	if removed > 0 {
		t.g.MemberCount -= removed
		t.bump()
		t.hook(EventGroupMembersRemoved, groupEvent{UserIDs: ids(all)})
	}
	return removed, nil
}

// SetRole sets a member's role.
func (t *GroupTx) SetRole(ctx context.Context, uid int64, role int) error {
	if _, err := t.tx.ExecContext(ctx, "UPDATE t_conversation_members SET role = ? WHERE conversation_id = ? AND user_id = ?",
		role, t.g.ConversationID, uid); err != nil {
		return err
	}
	t.bump()
	t.hook(EventGroupRoleChanged, groupEvent{UserID: jsonid.ID(uid), Role: &role})
	return nil
}

// SetMuteUntil sets (or, with an invalid until, clears) a member's mute.
func (t *GroupTx) SetMuteUntil(ctx context.Context, uid int64, until sql.NullTime) error {
	var v any
	if until.Valid {
		v = ms(until.Time)
	}
	if _, err := t.tx.ExecContext(ctx, "UPDATE t_conversation_members SET mute_until = ? WHERE conversation_id = ? AND user_id = ?",
		v, t.g.ConversationID, uid); err != nil {
		return err
	}
	t.bump()
	muted := until.Valid
	e := groupEvent{UserID: jsonid.ID(uid), Muted: &muted}
	if muted {
		mu := ms(until.Time)
		e.MuteUntil = &mu
	}
	t.hook(EventGroupMemberMuted, e)
	return nil
}

// Update changes the group row's own fields (name, avatar, announcement,
// owner_id, mute_all, status); they are written when the transaction ends.
// A status change bumps member_version too: who may send changed.
func (t *GroupTx) Update(fn func(g *Group)) {
	g := t.g
	fn(&g)
	// Only these fields are the caller's to change.
	t.g.Name, t.g.Avatar, t.g.Announcement = g.Name, g.Avatar, g.Announcement
	if g.MuteAll != t.g.MuteAll {
		muted := g.MuteAll
		t.hook(EventGroupMuteAll, groupEvent{Muted: &muted})
	}
	t.g.OwnerID, t.g.MuteAll = g.OwnerID, g.MuteAll
	if g.Status != t.g.Status {
		t.g.Status = g.Status
		t.bump()
		if g.Status == GroupDissolved {
			t.hook(EventGroupDissolved, groupEvent{})
		}
	}
}

// Notify queues a mailbox event for a user, written in this transaction.
// ChangeGroup fails when more events are queued than event ids were given.
func (t *GroupTx) Notify(e MailboxEvent) error {
	if len(t.events) >= len(t.eventIDs) {
		return fmt.Errorf("store: group tx: %d event ids for more events", len(t.eventIDs))
	}
	t.events = append(t.events, e)
	return nil
}

// GroupChange is the outcome of ChangeGroup.
type GroupChange struct {
	// Group is the row after the change.
	Group Group
	// Changed: something was written; false for an idempotent repeat.
	Changed bool
	// Events are the mailbox events written, with their Seq set.
	Events []MailboxEvent
}

// ChangeGroup runs fn in one transaction on the locked group row of ref
// and commits what it did: member rows, the group row (member_count,
// member_version + 1 when member rows or the status changed, updated_at)
// and the events fn queued (eventIDs are their row ids, issued before the
// transaction so nothing waits for the id clock under the lock). fn's
// error rolls everything back and is returned unwrapped, so callers can
// return typed errors from it. fn may run more than once (deadlocks are
// retried) and must have no effect outside tx. ErrNotFound without the
// group.
func (s *Store) ChangeGroup(ctx context.Context, ref GroupRef, eventIDs []int64, fn func(ctx context.Context, t *GroupTx) error) (GroupChange, error) {
	var c GroupChange
	var fnErr bool
	err := retry.Do(ctx, txRetry, func(ctx context.Context) (err error) {
		c, fnErr, err = s.changeGroupOnce(ctx, ref, eventIDs, fn)
		return err
	})
	switch {
	case err == nil:
		return c, nil
	case fnErr || errors.Is(err, ErrNotFound) || errors.Is(err, ErrGroupFull):
		return GroupChange{}, err
	case err == ctx.Err():
		return GroupChange{}, err // ended while waiting to retry
	}
	return GroupChange{}, fmt.Errorf("store: change group: %w", err)
}

func (s *Store) changeGroupOnce(ctx context.Context, ref GroupRef, eventIDs []int64, fn func(ctx context.Context, t *GroupTx) error) (GroupChange, bool, error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return GroupChange{}, false, err
	}
	defer func() { _ = tx.Rollback() }()
	var g Group
	if ref.GroupID != 0 {
		err = tx.GetContext(ctx, &g, "SELECT "+groupColumns+" FROM t_groups WHERE id = ? FOR UPDATE", ref.GroupID)
	} else {
		err = tx.GetContext(ctx, &g, "SELECT "+groupColumns+" FROM t_groups WHERE conversation_id = ? FOR UPDATE", ref.ConversationID)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return GroupChange{}, false, ErrNotFound
	}
	if err != nil {
		return GroupChange{}, false, err
	}
	t := &GroupTx{tx: tx, before: g, g: g, now: ms(time.Now()), eventIDs: eventIDs}
	if err := fn(ctx, t); err != nil {
		// A deadlock inside fn's statements is the store's to retry.
		return GroupChange{}, !IsRetryable(err), err
	}
	if t.g == t.before && len(t.events) == 0 {
		return GroupChange{Group: g}, false, nil // nothing to write; the rollback releases the lock
	}
	t.g.UpdatedAt = t.now
	if _, err := tx.NamedExecContext(ctx, `UPDATE t_groups SET name = :name, avatar = :avatar, announcement = :announcement,
owner_id = :owner_id, mute_all = :mute_all, status = :status, member_count = :member_count, member_version = :member_version,
updated_at = :updated_at WHERE id = :id`, t.g); err != nil {
		return GroupChange{}, false, err
	}
	var seqs []int64
	if len(t.events) > 0 {
		if seqs, err = AppendMailboxTx(ctx, tx, t.events, t.eventIDs[:len(t.events)]); err != nil {
			return GroupChange{}, false, err
		}
	}
	// Last before the commit (the dispatcher's settle rule).
	if err := s.writeWebhookEvents(ctx, tx, t.now, t.hooks...); err != nil {
		return GroupChange{}, false, err
	}
	if err := tx.Commit(); err != nil {
		return GroupChange{}, false, err
	}
	for i := range t.events {
		t.events[i].ID = t.eventIDs[i]
		t.events[i].Seq = seqs[i]
	}
	return GroupChange{Group: t.g, Changed: true, Events: t.events}, false, nil
}
