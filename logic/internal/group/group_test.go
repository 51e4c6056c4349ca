package group_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/protocol"
)

type env struct {
	ctx context.Context
	db  *sqlx.DB
	st  *store.Store
	svc *group.Service
}

// newEnv builds the service with a member limit of maxMembers, 0 meaning
// the configured default.
func newEnv(t *testing.T, maxMembers int) *env {
	t.Helper()
	if maxMembers == 0 {
		maxMembers = config.Default().Logic.GroupMaxMembers
	}
	_, db := testenv.MySQL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	ids, err := msgid.New(ctx, msgid.Settings{MachineID: 31})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(db)
	svc, err := group.New(st, ids, group.Config{MaxMembers: maxMembers})
	if err != nil {
		t.Fatal(err)
	}
	return &env{ctx: ctx, db: db, st: st, svc: svc}
}

// users returns n new users with t_users rows.
func (e *env) users(t *testing.T, n int) []int64 {
	t.Helper()
	out := make([]int64, n)
	for i := range out {
		out[i] = testenv.RandomUserID()
		if err := e.st.EnsureUser(e.ctx, out[i], time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func (e *env) user(t *testing.T) int64 { return e.users(t, 1)[0] }

func (e *env) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.GetContext(e.ctx, &n, q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// events returns the MEMBERSHIP events of a user in a conversation, by seq.
func (e *env) events(t *testing.T, uid, cid int64) []group.EventPayload {
	t.Helper()
	var raw [][]byte
	if err := e.db.SelectContext(e.ctx, &raw, "SELECT payload FROM t_mailbox_events WHERE user_id = ? AND conversation_id = ? AND event_type = ? ORDER BY seq",
		uid, cid, protocol.EventMembership); err != nil {
		t.Fatal(err)
	}
	out := make([]group.EventPayload, len(raw))
	for i, b := range raw {
		if err := json.Unmarshal(b, &out[i]); err != nil {
			t.Fatalf("payload %s: %v", b, err)
		}
	}
	return out
}

func (e *env) allEvents(t *testing.T, cid int64) int {
	return e.count(t, "SELECT COUNT(*) FROM t_mailbox_events WHERE conversation_id = ?", cid)
}

// stored reads the group row and checks member_count against the rows.
func (e *env) stored(t *testing.T, gid int64) store.Group {
	t.Helper()
	g, err := e.st.GetGroup(e.ctx, gid)
	if err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, "SELECT COUNT(*) FROM t_conversation_members WHERE conversation_id = ?", g.ConversationID); n != g.MemberCount {
		t.Fatalf("member_count %d, member rows %d", g.MemberCount, n)
	}
	return g
}

func (e *env) role(t *testing.T, cid, uid int64) (group.Role, bool) {
	t.Helper()
	m, err := e.st.GetGroupMember(e.ctx, cid, uid)
	if errors.Is(err, store.ErrNotFound) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return group.Role(m.Role), true
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// code is the response code of err ("0" for nil).
func code(err error) errcode.Code {
	c, _ := errcode.Of(err)
	return c
}

func wantCode(t *testing.T, err error, want errcode.Code, field string) {
	t.Helper()
	if got := code(err); got != want {
		t.Fatalf("code %s (%v), want %s", got, err, want)
	}
	if err != nil {
		var ce *errcode.Error
		if !errors.As(err, &ce) {
			t.Fatalf("%v is no *errcode.Error", err)
		}
		if field != "" && !strings.Contains(ce.Msg, field) {
			t.Fatalf("message %q does not name %q", ce.Msg, field)
		}
	}
}

// cast is a group with an owner, two admins, two members and an outsider.
type cast struct {
	g                      group.Info
	owner, admin, admin2   int64
	member, member2, other int64
}

func (e *env) cast(t *testing.T) cast {
	t.Helper()
	u := e.users(t, 6)
	c := cast{owner: u[0], admin: u[1], admin2: u[2], member: u[3], member2: u[4], other: u[5]}
	ch := must[group.Change](t)(e.svc.Create(e.ctx, group.CreateRequest{OwnerID: c.owner, MemberIDs: u[1:5], Name: "cast"}))
	for _, a := range []int64{c.admin, c.admin2} {
		must[group.Change](t)(e.svc.SetRole(e.ctx, group.SetRoleRequest{ActorID: c.owner, GroupID: ch.Group.GroupID, UserID: a, Role: group.RoleAdmin}))
	}
	c.g = must[group.Info](t)(e.svc.Get(e.ctx, group.GetRequest{ActorID: c.owner, GroupID: ch.Group.GroupID}))
	return c
}

func TestCreate(t *testing.T) {
	e := newEnv(t, 0)
	u := e.users(t, 4)
	owner := u[0]
	ch, err := e.svc.Create(e.ctx, group.CreateRequest{OwnerID: owner, MemberIDs: []int64{u[1], u[2], u[3], u[1], owner}, Name: "team", Avatar: "a/b.png", Announcement: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	g := ch.Group
	if g.MemberCount != 4 || g.MemberVersion != 1 || g.Status != group.StatusActive || g.OwnerID != owner || g.MaxMembers != config.Default().Logic.GroupMaxMembers ||
		g.Name != "team" || g.Avatar != "a/b.png" || g.Announcement != "hi" || g.GroupID == g.ConversationID {
		t.Fatalf("created %+v", g)
	}
	want := slices.Sorted(slices.Values(u))
	if !ch.Changed || !slices.Equal(ch.Added, want) || !slices.Equal(ch.Affected, want) || len(ch.Events) != 4 {
		t.Fatalf("change %+v", ch)
	}
	e.stored(t, g.GroupID)
	if typ, err := e.st.ConversationType(e.ctx, g.ConversationID); err != nil || typ != protocol.ConversationGroup {
		t.Fatalf("conversation type %d, %v", typ, err)
	}
	for _, uid := range u {
		r, ok := e.role(t, g.ConversationID, uid)
		if !ok || (uid == owner) != (r == group.RoleOwner) {
			t.Errorf("user %d role %v member %v", uid, r, ok)
		}
		ev := e.events(t, uid, g.ConversationID)
		if len(ev) != 1 || ev[0].Action != group.ActionAdded || int64(ev[0].GroupID) != g.GroupID || ev[0].MemberVersion != 1 || ev[0].Role == nil {
			t.Errorf("user %d events %+v", uid, ev)
		}
	}

	ghost := testenv.RandomUserID() // no t_users row
	long := strings.Repeat("é", group.MaxNameLen+1)
	tests := []struct {
		name  string
		req   group.CreateRequest
		code  errcode.Code
		field string
	}{
		{"no owner", group.CreateRequest{MemberIDs: u[1:], Name: "x"}, errcode.InvalidArgument, "owner_id"},
		{"negative member", group.CreateRequest{OwnerID: owner, MemberIDs: []int64{-3}, Name: "x"}, errcode.InvalidArgument, "member_ids"},
		{"empty name", group.CreateRequest{OwnerID: owner, Name: ""}, errcode.InvalidArgument, "name"},
		{"long name", group.CreateRequest{OwnerID: owner, Name: long}, errcode.InvalidArgument, "name"},
		{"bad utf-8", group.CreateRequest{OwnerID: owner, Name: "\xff"}, errcode.InvalidArgument, "name"},
		{"long avatar", group.CreateRequest{OwnerID: owner, Name: "x", Avatar: strings.Repeat("a", group.MaxAvatarLen+1)}, errcode.InvalidArgument, "avatar"},
		{"long announcement", group.CreateRequest{OwnerID: owner, Name: "x", Announcement: strings.Repeat("a", group.MaxAnnouncementLen+1)}, errcode.InvalidArgument, "announcement"},
		{"too many in one call", group.CreateRequest{OwnerID: owner, Name: "x", MemberIDs: seq(1, group.MaxUsersPerCall+1)}, errcode.InvalidArgument, "member_ids"},
		{"unknown member", group.CreateRequest{OwnerID: owner, Name: "x", MemberIDs: []int64{ghost}}, errcode.NotFound, "member_ids"},
		{"unknown owner", group.CreateRequest{OwnerID: ghost, Name: "x"}, errcode.NotFound, "member_ids"},
		{"owner alone", group.CreateRequest{OwnerID: owner, Name: "solo"}, errcode.OK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.svc.Create(e.ctx, tt.req)
			wantCode(t, err, tt.code, tt.field)
		})
	}
}

func seq(from int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = from + int64(i)
	}
	return out
}

// TestRoleMatrix runs every action as owner, admin, member, non-member and
// the system, each on a fresh group.
func TestRoleMatrix(t *testing.T) {
	e := newEnv(t, 0)
	type actor int
	const (
		owner actor = iota
		admin
		member
		outsider
		system
	)
	actorNames := []string{"owner", "admin", "member", "non-member", "system"}
	F, I, K := errcode.Forbidden, errcode.InvalidArgument, errcode.OK
	future := time.Now().Add(time.Hour)
	actions := []struct {
		name string
		do   func(c cast, actorID int64) (any, error)
		want [5]errcode.Code // owner, admin, member, non-member, system
	}{
		{"add a user", func(c cast, a int64) (any, error) {
			return e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: a, GroupID: c.g.GroupID, UserIDs: []int64{c.other}})
		}, [5]errcode.Code{K, K, F, F, K}},
		{"remove a member", func(c cast, a int64) (any, error) {
			return e.svc.RemoveMembers(e.ctx, group.MembersChangeRequest{ActorID: a, GroupID: c.g.GroupID, UserIDs: []int64{c.member2}})
		}, [5]errcode.Code{K, K, F, F, K}},
		{"remove an admin", func(c cast, a int64) (any, error) {
			return e.svc.RemoveMembers(e.ctx, group.MembersChangeRequest{ActorID: a, GroupID: c.g.GroupID, UserIDs: []int64{c.admin2}})
		}, [5]errcode.Code{K, F, F, F, K}},
		{"remove the owner", func(c cast, a int64) (any, error) {
			return e.svc.RemoveMembers(e.ctx, group.MembersChangeRequest{ActorID: a, GroupID: c.g.GroupID, UserIDs: []int64{c.owner}})
		}, [5]errcode.Code{F, F, F, F, F}},
		{"make a member admin", func(c cast, a int64) (any, error) {
			return e.svc.SetRole(e.ctx, group.SetRoleRequest{ActorID: a, GroupID: c.g.GroupID, UserID: c.member2, Role: group.RoleAdmin})
		}, [5]errcode.Code{K, F, F, F, K}},
		{"make an admin member", func(c cast, a int64) (any, error) {
			return e.svc.SetRole(e.ctx, group.SetRoleRequest{ActorID: a, GroupID: c.g.GroupID, UserID: c.admin2, Role: group.RoleMember})
		}, [5]errcode.Code{K, F, F, F, K}},
		{"demote the owner", func(c cast, a int64) (any, error) {
			return e.svc.SetRole(e.ctx, group.SetRoleRequest{ActorID: a, GroupID: c.g.GroupID, UserID: c.owner, Role: group.RoleMember})
		}, [5]errcode.Code{F, F, F, F, F}},
		{"set an owner role", func(c cast, a int64) (any, error) {
			return e.svc.SetRole(e.ctx, group.SetRoleRequest{ActorID: a, GroupID: c.g.GroupID, UserID: c.member2, Role: group.RoleOwner})
		}, [5]errcode.Code{I, I, I, I, I}},
		{"mute all", func(c cast, a int64) (any, error) {
			return e.svc.MuteAll(e.ctx, group.MuteAllRequest{ActorID: a, GroupID: c.g.GroupID, On: true})
		}, [5]errcode.Code{K, K, F, F, K}},
		{"mute a member", func(c cast, a int64) (any, error) {
			return e.svc.MuteMember(e.ctx, group.MuteMemberRequest{ActorID: a, GroupID: c.g.GroupID, UserID: c.member2, Until: future})
		}, [5]errcode.Code{K, K, F, F, K}},
		{"mute an admin", func(c cast, a int64) (any, error) {
			return e.svc.MuteMember(e.ctx, group.MuteMemberRequest{ActorID: a, GroupID: c.g.GroupID, UserID: c.admin2, Until: future})
		}, [5]errcode.Code{K, F, F, F, K}},
		{"mute the owner", func(c cast, a int64) (any, error) {
			return e.svc.MuteMember(e.ctx, group.MuteMemberRequest{ActorID: a, GroupID: c.g.GroupID, UserID: c.owner, Until: future})
		}, [5]errcode.Code{F, F, F, F, F}},
		{"transfer", func(c cast, a int64) (any, error) {
			return e.svc.Transfer(e.ctx, group.TransferRequest{ActorID: a, GroupID: c.g.GroupID, NewOwnerID: c.member2})
		}, [5]errcode.Code{K, F, F, F, K}},
		{"dissolve", func(c cast, a int64) (any, error) {
			return e.svc.Dissolve(e.ctx, group.DissolveRequest{ActorID: a, GroupID: c.g.GroupID})
		}, [5]errcode.Code{K, F, F, F, K}},
		{"rename", func(c cast, a int64) (any, error) {
			name := "renamed"
			return e.svc.Update(e.ctx, group.UpdateRequest{ActorID: a, GroupID: c.g.GroupID, Name: &name})
		}, [5]errcode.Code{K, K, F, F, K}},
		{"get", func(c cast, a int64) (any, error) {
			return e.svc.Get(e.ctx, group.GetRequest{ActorID: a, GroupID: c.g.GroupID})
		}, [5]errcode.Code{K, K, K, F, K}},
		{"members", func(c cast, a int64) (any, error) {
			return e.svc.Members(e.ctx, group.MembersRequest{ActorID: a, GroupID: c.g.GroupID})
		}, [5]errcode.Code{K, K, K, F, K}},
		{"leave", func(c cast, a int64) (any, error) {
			return e.svc.Leave(e.ctx, group.LeaveRequest{GroupID: c.g.GroupID, UserID: a})
		}, [5]errcode.Code{F, K, K, K, I}},
	}
	for _, act := range actions {
		for who := owner; who <= system; who++ {
			t.Run(act.name+"/"+actorNames[who], func(t *testing.T) {
				c := e.cast(t)
				actorID := [5]int64{c.owner, c.admin, c.member, c.other, group.System}[who]
				before := e.stored(t, c.g.GroupID)
				eventsBefore := e.allEvents(t, c.g.ConversationID)
				res, err := act.do(c, actorID)
				wantCode(t, err, act.want[who], "")
				after := e.stored(t, c.g.GroupID)
				if err != nil {
					if after != before || e.allEvents(t, c.g.ConversationID) != eventsBefore {
						t.Fatalf("a refused %s changed the group: %+v → %+v", act.name, before, after)
					}
					return
				}
				ch, ok := res.(group.Change)
				if !ok {
					return // a read
				}
				if ch.Group.MemberVersion != after.MemberVersion || ch.ActorID != actorID {
					t.Fatalf("change reports version %d actor %d, stored %d", ch.Group.MemberVersion, ch.ActorID, after.MemberVersion)
				}
				if wrote := e.allEvents(t, c.g.ConversationID) - eventsBefore; wrote != len(ch.Affected) || len(ch.Events) != len(ch.Affected) {
					t.Fatalf("wrote %d events, affected %v, events %d", wrote, ch.Affected, len(ch.Events))
				}
			})
		}
	}
}

// TestOperations checks each operation's effect on the rows, the version,
// the events and the Change.
func TestOperations(t *testing.T) {
	e := newEnv(t, 0)
	future := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	tests := []struct {
		name        string
		do          func(c cast) (group.Change, error)
		check       func(t *testing.T, c cast, ch group.Change)
		affected    func(c cast) []int64 // each gets exactly one event
		action      string
		bump        int64 // member_version increase
		notify      bool
		added, gone func(c cast) []int64
	}{
		{
			name: "add", action: group.ActionAdded, bump: 1, notify: true,
			do: func(c cast) (group.Change, error) {
				return e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: c.admin, GroupID: c.g.GroupID, UserIDs: []int64{c.other, c.member}})
			},
			affected: func(c cast) []int64 { return []int64{c.other} },
			added:    func(c cast) []int64 { return []int64{c.other} },
			check: func(t *testing.T, c cast, ch group.Change) {
				if r, ok := e.role(t, c.g.ConversationID, c.other); !ok || r != group.RoleMember {
					t.Fatalf("added user: role %v member %v", r, ok)
				}
				if ch.Group.MemberCount != c.g.MemberCount+1 {
					t.Fatalf("member_count %d", ch.Group.MemberCount)
				}
			},
		},
		{
			name: "remove", action: group.ActionRemoved, bump: 1, notify: true,
			do: func(c cast) (group.Change, error) {
				return e.svc.RemoveMembers(e.ctx, group.MembersChangeRequest{ActorID: c.owner, GroupID: c.g.GroupID, UserIDs: []int64{c.admin2, c.member2, c.other}})
			},
			affected: func(c cast) []int64 { return []int64{c.admin2, c.member2} },
			gone:     func(c cast) []int64 { return []int64{c.admin2, c.member2} },
			check: func(t *testing.T, c cast, ch group.Change) {
				for _, u := range []int64{c.admin2, c.member2} {
					if _, ok := e.role(t, c.g.ConversationID, u); ok {
						t.Fatalf("user %d still a member", u)
					}
				}
				if ch.Group.MemberCount != c.g.MemberCount-2 {
					t.Fatalf("member_count %d", ch.Group.MemberCount)
				}
			},
		},
		{
			name: "leave", action: group.ActionLeft, bump: 1, notify: true,
			do: func(c cast) (group.Change, error) {
				return e.svc.Leave(e.ctx, group.LeaveRequest{GroupID: c.g.GroupID, UserID: c.member})
			},
			affected: func(c cast) []int64 { return []int64{c.member} },
			gone:     func(c cast) []int64 { return []int64{c.member} },
			check: func(t *testing.T, c cast, ch group.Change) {
				if ok, err := e.svc.IsMember(e.ctx, c.g.ConversationID, c.member); err != nil || ok {
					t.Fatalf("IsMember after leave = %v, %v", ok, err)
				}
			},
		},
		{
			name: "set role", action: group.ActionRole, bump: 1, notify: true,
			do: func(c cast) (group.Change, error) {
				return e.svc.SetRole(e.ctx, group.SetRoleRequest{ActorID: c.owner, GroupID: c.g.GroupID, UserID: c.member, Role: group.RoleAdmin})
			},
			affected: func(c cast) []int64 { return []int64{c.member} },
			check: func(t *testing.T, c cast, ch group.Change) {
				if r, _ := e.role(t, c.g.ConversationID, c.member); r != group.RoleAdmin {
					t.Fatalf("role %v", r)
				}
				if ev := e.events(t, c.member, c.g.ConversationID); *ev[len(ev)-1].Role != int(group.RoleAdmin) {
					t.Fatalf("event %+v", ev[len(ev)-1])
				}
			},
		},
		{
			name: "mute all", action: group.ActionMuteAll, bump: 0, notify: true,
			do: func(c cast) (group.Change, error) {
				return e.svc.MuteAll(e.ctx, group.MuteAllRequest{ActorID: c.admin, GroupID: c.g.GroupID, On: true})
			},
			check: func(t *testing.T, c cast, ch group.Change) {
				if !ch.Group.MuteAll || !e.stored(t, c.g.GroupID).MuteAll {
					t.Fatal("mute_all not set")
				}
			},
		},
		{
			name: "mute a member", action: group.ActionMuted, bump: 1,
			do: func(c cast) (group.Change, error) {
				return e.svc.MuteMember(e.ctx, group.MuteMemberRequest{ActorID: c.admin, GroupID: c.g.GroupID, UserID: c.member, Until: future})
			},
			affected: func(c cast) []int64 { return []int64{c.member} },
			check: func(t *testing.T, c cast, ch group.Change) {
				m, err := e.st.GetGroupMember(e.ctx, c.g.ConversationID, c.member)
				if err != nil || !m.MuteUntil.Valid || !m.MuteUntil.Time.Equal(future) {
					t.Fatalf("mute_until %+v, %v", m.MuteUntil, err)
				}
				if ev := e.events(t, c.member, c.g.ConversationID); *ev[len(ev)-1].MuteUntil != future.UnixMilli() {
					t.Fatalf("event %+v", ev[len(ev)-1])
				}
			},
		},
		{
			name: "transfer", action: group.ActionRole, bump: 1, notify: true,
			do: func(c cast) (group.Change, error) {
				return e.svc.Transfer(e.ctx, group.TransferRequest{ActorID: c.owner, GroupID: c.g.GroupID, NewOwnerID: c.member})
			},
			affected: func(c cast) []int64 { return []int64{c.owner, c.member} },
			check: func(t *testing.T, c cast, ch group.Change) {
				if r, _ := e.role(t, c.g.ConversationID, c.member); r != group.RoleOwner {
					t.Fatalf("new owner role %v", r)
				}
				if r, _ := e.role(t, c.g.ConversationID, c.owner); r != group.RoleAdmin {
					t.Fatalf("old owner role %v", r)
				}
				if ch.Group.OwnerID != c.member || e.stored(t, c.g.GroupID).OwnerID != c.member {
					t.Fatal("owner_id not moved")
				}
				// The old owner may leave now; the new one may not.
				if _, err := e.svc.Leave(e.ctx, group.LeaveRequest{GroupID: c.g.GroupID, UserID: c.member}); code(err) != errcode.Forbidden {
					t.Fatalf("new owner leaving: %v", err)
				}
				if _, err := e.svc.Leave(e.ctx, group.LeaveRequest{GroupID: c.g.GroupID, UserID: c.owner}); err != nil {
					t.Fatalf("old owner leaving: %v", err)
				}
			},
		},
		{
			name: "update", action: group.ActionUpdated, bump: 0, notify: true,
			do: func(c cast) (group.Change, error) {
				name, ann := "new name", "new announcement"
				return e.svc.Update(e.ctx, group.UpdateRequest{ActorID: c.admin, GroupID: c.g.GroupID, Name: &name, Announcement: &ann})
			},
			check: func(t *testing.T, c cast, ch group.Change) {
				g := e.stored(t, c.g.GroupID)
				if g.Name != "new name" || g.Announcement != "new announcement" || g.Avatar != c.g.Avatar {
					t.Fatalf("stored %+v", g)
				}
			},
		},
		{
			name: "dissolve", action: group.ActionDissolved, bump: 1, notify: true,
			do: func(c cast) (group.Change, error) {
				return e.svc.Dissolve(e.ctx, group.DissolveRequest{ActorID: c.owner, GroupID: c.g.GroupID})
			},
			check: func(t *testing.T, c cast, ch group.Change) {
				if ch.Group.Status != group.StatusDissolved {
					t.Fatalf("status %v", ch.Group.Status)
				}
				// Members stay (history readable), nobody sends.
				if ok, _ := e.svc.IsMember(e.ctx, c.g.ConversationID, c.member); !ok {
					t.Fatal("members left with the dissolve")
				}
				for _, u := range []int64{c.owner, c.admin, c.member} {
					if err := e.svc.CheckSend(e.ctx, c.g.ConversationID, u, time.Now()); code(err) != errcode.Forbidden {
						t.Fatalf("user %d sends into a dissolved group: %v", u, err)
					}
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := e.cast(t)
			before := e.allEvents(t, c.g.ConversationID)
			ch, err := tt.do(c)
			if err != nil {
				t.Fatal(err)
			}
			var affected, added, gone []int64
			if tt.affected != nil {
				affected = slices.Sorted(slices.Values(tt.affected(c)))
			}
			if tt.added != nil {
				added = tt.added(c)
			}
			if tt.gone != nil {
				gone = slices.Sorted(slices.Values(tt.gone(c)))
			}
			if !ch.Changed || ch.Action != tt.action || ch.NotifyMembers != tt.notify ||
				!slices.Equal(ch.Affected, affected) || !slices.Equal(ch.Added, added) || !slices.Equal(ch.Removed, gone) {
				t.Fatalf("change %+v, want action %s notify %v affected %v added %v removed %v", ch, tt.action, tt.notify, affected, added, gone)
			}
			if ch.Group.MemberVersion != c.g.MemberVersion+tt.bump {
				t.Fatalf("member_version %d → %d, want +%d", c.g.MemberVersion, ch.Group.MemberVersion, tt.bump)
			}
			if v := must[int64](t)(e.svc.MemberVersion(e.ctx, c.g.ConversationID)); v != ch.Group.MemberVersion {
				t.Fatalf("MemberVersion %d, change says %d", v, ch.Group.MemberVersion)
			}
			if wrote := e.allEvents(t, c.g.ConversationID) - before; wrote != len(affected) {
				t.Fatalf("wrote %d events for %d affected users", wrote, len(affected))
			}
			for _, ev := range ch.Events {
				if !slices.Contains(affected, ev.UserID) || ev.Seq <= 0 {
					t.Fatalf("event %+v", ev)
				}
				got := e.events(t, ev.UserID, c.g.ConversationID)
				last := got[len(got)-1]
				if last.Action != tt.action || last.MemberVersion != ch.Group.MemberVersion || int64(last.GroupID) != c.g.GroupID || int64(last.OperatorID) != ch.ActorID {
					t.Fatalf("stored event %+v", last)
				}
			}
			var p group.EventPayload
			if err := json.Unmarshal(ch.Payload(), &p); err != nil || p.Action != tt.action || p.MemberVersion != ch.Group.MemberVersion {
				t.Fatalf("control payload %s: %v", ch.Payload(), err)
			}
			if tt.check != nil {
				tt.check(t, c, ch)
			}
		})
	}
}

// TestIdempotentRepeats: a repeated change writes nothing, no event, and
// keeps member_version.
func TestIdempotentRepeats(t *testing.T) {
	e := newEnv(t, 0)
	future := time.Now().Add(time.Hour)
	name := "same"
	tests := []struct {
		name string
		do   func(c cast) (group.Change, error)
	}{
		{"add", func(c cast) (group.Change, error) {
			return e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: c.owner, GroupID: c.g.GroupID, UserIDs: []int64{c.other}})
		}},
		{"add existing members only", func(c cast) (group.Change, error) {
			return e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: c.owner, GroupID: c.g.GroupID, UserIDs: []int64{c.member, c.owner}})
		}},
		{"remove", func(c cast) (group.Change, error) {
			return e.svc.RemoveMembers(e.ctx, group.MembersChangeRequest{ActorID: c.owner, GroupID: c.g.GroupID, UserIDs: []int64{c.member}})
		}},
		{"leave", func(c cast) (group.Change, error) {
			return e.svc.Leave(e.ctx, group.LeaveRequest{GroupID: c.g.GroupID, UserID: c.member})
		}},
		{"set role", func(c cast) (group.Change, error) {
			return e.svc.SetRole(e.ctx, group.SetRoleRequest{ActorID: c.owner, GroupID: c.g.GroupID, UserID: c.member, Role: group.RoleAdmin})
		}},
		{"mute all", func(c cast) (group.Change, error) {
			return e.svc.MuteAll(e.ctx, group.MuteAllRequest{ActorID: c.owner, GroupID: c.g.GroupID, On: true})
		}},
		{"mute a member", func(c cast) (group.Change, error) {
			return e.svc.MuteMember(e.ctx, group.MuteMemberRequest{ActorID: c.owner, GroupID: c.g.GroupID, UserID: c.member, Until: future})
		}},
		{"unmute", func(c cast) (group.Change, error) {
			return e.svc.MuteMember(e.ctx, group.MuteMemberRequest{ActorID: c.owner, GroupID: c.g.GroupID, UserID: c.member2})
		}},
		{"transfer", func(c cast) (group.Change, error) {
			return e.svc.Transfer(e.ctx, group.TransferRequest{ActorID: group.System, GroupID: c.g.GroupID, NewOwnerID: c.member})
		}},
		{"rename", func(c cast) (group.Change, error) {
			return e.svc.Update(e.ctx, group.UpdateRequest{ActorID: c.owner, GroupID: c.g.GroupID, Name: &name})
		}},
		{"dissolve", func(c cast) (group.Change, error) {
			return e.svc.Dissolve(e.ctx, group.DissolveRequest{ActorID: c.owner, GroupID: c.g.GroupID})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := e.cast(t)
			first, err := tt.do(c)
			if err != nil {
				t.Fatal(err)
			}
			g := e.stored(t, c.g.GroupID)
			events := e.allEvents(t, c.g.ConversationID)
			again, err := tt.do(c)
			if err != nil {
				t.Fatalf("repeat: %v", err)
			}
			if again.Changed || len(again.Affected) > 0 || len(again.Events) > 0 || len(again.Added) > 0 || len(again.Removed) > 0 || again.NotifyMembers {
				t.Fatalf("repeat changed: %+v", again)
			}
			if again.Group.MemberVersion != first.Group.MemberVersion {
				t.Fatalf("repeat reports version %d, first %d", again.Group.MemberVersion, first.Group.MemberVersion)
			}
			if after := e.stored(t, c.g.GroupID); after != g || e.allEvents(t, c.g.ConversationID) != events {
				t.Fatalf("repeat wrote: %+v → %+v", g, after)
			}
		})
	}
}

// TestVersionAndEventsAcrossASequence: member_version goes up by one per
// membership change, and each user has exactly the events of the changes
// that concerned them.
func TestVersionAndEventsAcrossASequence(t *testing.T) {
	e := newEnv(t, 0)
	u := e.users(t, 5)
	owner, a, b, c, d := u[0], u[1], u[2], u[3], u[4]
	ch := must[group.Change](t)(e.svc.Create(e.ctx, group.CreateRequest{OwnerID: owner, MemberIDs: []int64{a}, Name: "seq"}))
	gid, cid := ch.Group.GroupID, ch.Group.ConversationID
	steps := []func() (group.Change, error){
		func() (group.Change, error) {
			return e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: owner, GroupID: gid, UserIDs: []int64{b, c}})
		},
		func() (group.Change, error) {
			return e.svc.SetRole(e.ctx, group.SetRoleRequest{ActorID: owner, GroupID: gid, UserID: a, Role: group.RoleAdmin})
		},
		func() (group.Change, error) {
			return e.svc.RemoveMembers(e.ctx, group.MembersChangeRequest{ActorID: a, GroupID: gid, UserIDs: []int64{b}})
		},
		func() (group.Change, error) {
			return e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: a, GroupID: gid, UserIDs: []int64{b, d}})
		},
		func() (group.Change, error) { return e.svc.Leave(e.ctx, group.LeaveRequest{GroupID: gid, UserID: c}) },
	}
	version := ch.Group.MemberVersion
	for i, step := range steps {
		ch := must[group.Change](t)(step())
		if ch.Group.MemberVersion != version+1 {
			t.Fatalf("step %d: version %d after %d", i, ch.Group.MemberVersion, version)
		}
		version = ch.Group.MemberVersion
	}
	wantActions := map[int64][]string{
		owner: {group.ActionAdded},
		a:     {group.ActionAdded, group.ActionRole},
		b:     {group.ActionAdded, group.ActionRemoved, group.ActionAdded},
		c:     {group.ActionAdded, group.ActionLeft},
		d:     {group.ActionAdded},
	}
	for uid, want := range wantActions {
		var got []string
		for _, ev := range e.events(t, uid, cid) {
			got = append(got, ev.Action)
		}
		if !slices.Equal(got, want) {
			t.Errorf("user %d events %v, want %v", uid, got, want)
		}
	}
	g := e.stored(t, gid)
	if g.MemberCount != 4 || g.MemberVersion != version {
		t.Fatalf("stored %+v", g)
	}
}

func TestMemberLimit(t *testing.T) {
	e := newEnv(t, 5)
	u := e.users(t, 8)
	if _, err := e.svc.Create(e.ctx, group.CreateRequest{OwnerID: u[0], MemberIDs: u[1:6], Name: "six"}); code(err) != errcode.InvalidArgument {
		t.Fatalf("create over the limit: %v", err)
	}
	ch := must[group.Change](t)(e.svc.Create(e.ctx, group.CreateRequest{OwnerID: u[0], MemberIDs: u[1:3], Name: "three"}))
	gid := ch.Group.GroupID
	if ch.Group.MaxMembers != 5 {
		t.Fatalf("max_members %d", ch.Group.MaxMembers)
	}
	_, err := e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: u[0], GroupID: gid, UserIDs: u[3:6]})
	wantCode(t, err, errcode.Conflict, "full")
	if g := e.stored(t, gid); g.MemberCount != 3 || g.MemberVersion != 1 || e.allEvents(t, g.ConversationID) != 3 {
		t.Fatalf("a refused add changed the group: %+v", g)
	}
	// Up to the limit exactly; members already in do not count twice.
	must[group.Change](t)(e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: u[0], GroupID: gid, UserIDs: []int64{u[1], u[3], u[4]}}))
	if _, err := e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: u[0], GroupID: gid, UserIDs: []int64{u[5]}}); code(err) != errcode.Conflict {
		t.Fatalf("add to a full group: %v", err)
	}
	must[group.Change](t)(e.svc.Leave(e.ctx, group.LeaveRequest{GroupID: gid, UserID: u[4]}))
	must[group.Change](t)(e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: u[0], GroupID: gid, UserIDs: []int64{u[5]}}))
	if g := e.stored(t, gid); g.MemberCount != 5 {
		t.Fatalf("member_count %d", g.MemberCount)
	}
}

// TestConcurrentAdds: many adds at once, overlapping users among them,
// never pass the limit, add each user once and write one event per added
// user.
func TestConcurrentAdds(t *testing.T) {
	const limit, workers, each = 24, 12, 4
	e := newEnv(t, limit)
	owner := e.user(t)
	ch := must[group.Change](t)(e.svc.Create(e.ctx, group.CreateRequest{OwnerID: owner, Name: "race"}))
	gid, cid := ch.Group.GroupID, ch.Group.ConversationID
	pool := e.users(t, workers*2) // worker i adds pool[i], pool[i+1], ... (overlapping)
	var wg sync.WaitGroup
	var mu sync.Mutex
	added := map[int64]int{}
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ids []int64
			for k := range each {
				ids = append(ids, pool[(i*2+k)%len(pool)])
			}
			ch, err := e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: owner, GroupID: gid, UserIDs: ids})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if code(err) != errcode.Conflict {
					t.Error(err)
				}
				return
			}
			for _, u := range ch.Added {
				added[u]++
			}
		}()
	}
	wg.Wait()
	g := e.stored(t, gid)
	if g.MemberCount > limit || g.MemberCount != 1+len(added) {
		t.Fatalf("member_count %d, limit %d, added %d", g.MemberCount, limit, len(added))
	}
	for u, n := range added {
		if n != 1 {
			t.Errorf("user %d added %d times", u, n)
		}
		if ev := e.events(t, u, cid); len(ev) != 1 {
			t.Errorf("user %d has %d events", u, len(ev))
		}
	}
	for _, u := range pool {
		if _, ok := added[u]; !ok {
			if _, member := e.role(t, cid, u); member {
				t.Errorf("user %d is a member nobody reported adding", u)
			}
		}
	}
}

func TestCheckSend(t *testing.T) {
	e := newEnv(t, 0)
	now := time.Now()
	c := e.cast(t)
	cid, gid := c.g.ConversationID, c.g.GroupID
	must[group.Change](t)(e.svc.MuteMember(e.ctx, group.MuteMemberRequest{ActorID: c.owner, GroupID: gid, UserID: c.member2, Until: now.Add(time.Minute)}))
	type probe struct {
		user int64
		at   time.Time
		want errcode.Code
	}
	F, K := errcode.Forbidden, errcode.OK
	stages := []struct {
		name   string
		before func(t *testing.T)
		probes []probe
	}{
		{"active", nil, []probe{
			{c.owner, now, K}, {c.admin, now, K}, {c.member, now, K},
			{c.member2, now, F}, {c.member2, now.Add(2 * time.Minute), K}, // the mute ends
			{c.other, now, F},
		}},
		{"mute all", func(t *testing.T) {
			must[group.Change](t)(e.svc.MuteAll(e.ctx, group.MuteAllRequest{ActorID: c.admin, GroupID: gid, On: true}))
		}, []probe{{c.owner, now, K}, {c.admin, now, K}, {c.member, now, F}, {c.other, now, F}}},
		{"mute all off", func(t *testing.T) {
			must[group.Change](t)(e.svc.MuteAll(e.ctx, group.MuteAllRequest{ActorID: c.owner, GroupID: gid, On: false}))
		}, []probe{{c.member, now, K}, {c.member2, now, F}}},
		{"unmuted", func(t *testing.T) {
			must[group.Change](t)(e.svc.MuteMember(e.ctx, group.MuteMemberRequest{ActorID: c.admin, GroupID: gid, UserID: c.member2}))
		}, []probe{{c.member2, now, K}}},
		{"removed", func(t *testing.T) {
			must[group.Change](t)(e.svc.RemoveMembers(e.ctx, group.MembersChangeRequest{ActorID: c.admin, GroupID: gid, UserIDs: []int64{c.member}}))
		}, []probe{{c.member, now, F}, {c.member2, now, K}}},
		{"dissolved", func(t *testing.T) {
			must[group.Change](t)(e.svc.Dissolve(e.ctx, group.DissolveRequest{ActorID: c.owner, GroupID: gid}))
		}, []probe{{c.owner, now, F}, {c.admin, now, F}, {c.member2, now, F}}},
	}
	for _, st := range stages {
		t.Run(st.name, func(t *testing.T) {
			if st.before != nil {
				st.before(t)
			}
			for _, p := range st.probes {
				if err := e.svc.CheckSend(e.ctx, cid, p.user, p.at); code(err) != p.want {
					t.Errorf("user %d at %v: %v, want %s", p.user, p.at.Sub(now), err, p.want)
				}
			}
		})
	}
	// A conversation that is no group's answers like a non-member.
	if err := e.svc.CheckSend(e.ctx, testenv.RandomUserID(), c.owner, now); code(err) != errcode.Forbidden {
		t.Fatalf("unknown conversation: %v", err)
	}
}

func TestDissolvedGroup(t *testing.T) {
	e := newEnv(t, 0)
	c := e.cast(t)
	gid, cid := c.g.GroupID, c.g.ConversationID
	must[group.Change](t)(e.svc.Dissolve(e.ctx, group.DissolveRequest{ActorID: c.owner, GroupID: gid}))
	name := "x"
	refused := []struct {
		name string
		do   func() error
	}{
		{"add", func() error {
			_, err := e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: c.owner, GroupID: gid, UserIDs: []int64{c.other}})
			return err
		}},
		{"remove", func() error {
			_, err := e.svc.RemoveMembers(e.ctx, group.MembersChangeRequest{ActorID: c.owner, GroupID: gid, UserIDs: []int64{c.member}})
			return err
		}},
		{"set role", func() error {
			_, err := e.svc.SetRole(e.ctx, group.SetRoleRequest{ActorID: c.owner, GroupID: gid, UserID: c.member, Role: group.RoleAdmin})
			return err
		}},
		{"mute all", func() error {
			_, err := e.svc.MuteAll(e.ctx, group.MuteAllRequest{ActorID: c.owner, GroupID: gid, On: true})
			return err
		}},
		{"mute", func() error {
			_, err := e.svc.MuteMember(e.ctx, group.MuteMemberRequest{ActorID: c.owner, GroupID: gid, UserID: c.member, Until: time.Now().Add(time.Hour)})
			return err
		}},
		{"transfer", func() error {
			_, err := e.svc.Transfer(e.ctx, group.TransferRequest{ActorID: c.owner, GroupID: gid, NewOwnerID: c.member})
			return err
		}},
		{"update", func() error {
			_, err := e.svc.Update(e.ctx, group.UpdateRequest{ActorID: c.owner, GroupID: gid, Name: &name})
			return err
		}},
	}
	for _, r := range refused {
		t.Run(r.name, func(t *testing.T) { wantCode(t, r.do(), errcode.Conflict, "dissolved") })
	}
	info := must[group.Info](t)(e.svc.Get(e.ctx, group.GetRequest{ActorID: c.member, GroupID: gid}))
	if info.Status != group.StatusDissolved || info.MemberCount != 5 {
		t.Fatalf("info %+v", info)
	}
	page := must[group.MembersPage](t)(e.svc.Members(e.ctx, group.MembersRequest{ActorID: c.member, GroupID: gid}))
	if len(page.Members) != 5 {
		t.Fatalf("members %d", len(page.Members))
	}
	// Anyone may leave a dissolved group, the owner too.
	for _, u := range []int64{c.owner, c.member} {
		ch := must[group.Change](t)(e.svc.Leave(e.ctx, group.LeaveRequest{GroupID: gid, UserID: u}))
		if !ch.Changed || !slices.Equal(ch.Removed, []int64{u}) {
			t.Fatalf("leave %+v", ch)
		}
		if ok := must[bool](t)(e.svc.IsMember(e.ctx, cid, u)); ok {
			t.Fatalf("user %d still a member", u)
		}
	}
}

func TestValidation(t *testing.T) {
	e := newEnv(t, 0)
	c := e.cast(t)
	gid := c.g.GroupID
	empty := ""
	tests := []struct {
		name  string
		do    func() error
		code  errcode.Code
		field string
	}{
		{"add: no group id", func() error {
			_, err := e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: c.owner, UserIDs: []int64{c.other}})
			return err
		}, errcode.InvalidArgument, "group_id"},
		{"add: negative actor", func() error {
			_, err := e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: -1, GroupID: gid, UserIDs: []int64{c.other}})
			return err
		}, errcode.InvalidArgument, "actor_id"},
		{"add: no users", func() error {
			_, err := e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: c.owner, GroupID: gid})
			return err
		}, errcode.InvalidArgument, "user_ids"},
		{"add: bad user id", func() error {
			_, err := e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: c.owner, GroupID: gid, UserIDs: []int64{0}})
			return err
		}, errcode.InvalidArgument, "user_ids"},
		{"add: unknown user", func() error {
			_, err := e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: c.owner, GroupID: gid, UserIDs: []int64{testenv.RandomUserID()}})
			return err
		}, errcode.NotFound, "user_ids"},
		{"add: unknown group", func() error {
			_, err := e.svc.AddMembers(e.ctx, group.MembersChangeRequest{ActorID: c.owner, GroupID: testenv.RandomUserID(), UserIDs: []int64{c.other}})
			return err
		}, errcode.NotFound, "group"},
		{"remove: too many", func() error {
			_, err := e.svc.RemoveMembers(e.ctx, group.MembersChangeRequest{ActorID: c.owner, GroupID: gid, UserIDs: seq(1, group.MaxUsersPerCall+1)})
			return err
		}, errcode.InvalidArgument, "user_ids"},
		{"leave: no user", func() error {
			_, err := e.svc.Leave(e.ctx, group.LeaveRequest{GroupID: gid})
			return err
		}, errcode.InvalidArgument, "user_id"},
		{"set role: not a member", func() error {
			_, err := e.svc.SetRole(e.ctx, group.SetRoleRequest{ActorID: c.owner, GroupID: gid, UserID: c.other, Role: group.RoleAdmin})
			return err
		}, errcode.NotFound, "user_id"},
		{"set role: bad role", func() error {
			_, err := e.svc.SetRole(e.ctx, group.SetRoleRequest{ActorID: c.owner, GroupID: gid, UserID: c.member, Role: 7})
			return err
		}, errcode.InvalidArgument, "role"},
		{"mute: past time", func() error {
			_, err := e.svc.MuteMember(e.ctx, group.MuteMemberRequest{ActorID: c.owner, GroupID: gid, UserID: c.member, Until: time.Now().Add(-time.Second)})
			return err
		}, errcode.InvalidArgument, "until"},
		{"mute: not a member", func() error {
			_, err := e.svc.MuteMember(e.ctx, group.MuteMemberRequest{ActorID: c.owner, GroupID: gid, UserID: c.other, Until: time.Now().Add(time.Hour)})
			return err
		}, errcode.NotFound, "user_id"},
		{"transfer: not a member", func() error {
			_, err := e.svc.Transfer(e.ctx, group.TransferRequest{ActorID: c.owner, GroupID: gid, NewOwnerID: c.other})
			return err
		}, errcode.NotFound, "new_owner_id"},
		{"transfer: no new owner", func() error {
			_, err := e.svc.Transfer(e.ctx, group.TransferRequest{ActorID: c.owner, GroupID: gid})
			return err
		}, errcode.InvalidArgument, "new_owner_id"},
		{"update: nothing", func() error {
			_, err := e.svc.Update(e.ctx, group.UpdateRequest{ActorID: c.owner, GroupID: gid})
			return err
		}, errcode.InvalidArgument, "name"},
		{"update: empty name", func() error {
			_, err := e.svc.Update(e.ctx, group.UpdateRequest{ActorID: c.owner, GroupID: gid, Name: &empty})
			return err
		}, errcode.InvalidArgument, "name"},
		{"update: empty announcement is fine", func() error {
			_, err := e.svc.Update(e.ctx, group.UpdateRequest{ActorID: c.owner, GroupID: gid, Announcement: &empty})
			return err
		}, errcode.OK, ""},
		{"get: unknown group", func() error {
			_, err := e.svc.Get(e.ctx, group.GetRequest{ActorID: group.System, GroupID: testenv.RandomUserID()})
			return err
		}, errcode.NotFound, "group"},
		{"members: limit too big", func() error {
			_, err := e.svc.Members(e.ctx, group.MembersRequest{ActorID: c.owner, GroupID: gid, Limit: group.MaxPageSize + 1})
			return err
		}, errcode.InvalidArgument, "limit"},
		{"by conversation: no group", func() error {
			_, err := e.svc.ByConversation(e.ctx, testenv.RandomUserID())
			return err
		}, errcode.NotFound, "group"},
		{"member version: no group", func() error {
			_, err := e.svc.MemberVersion(e.ctx, testenv.RandomUserID())
			return err
		}, errcode.NotFound, "group"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantCode(t, tt.do(), tt.code, tt.field) })
	}
	if g := e.stored(t, gid); g.MemberVersion != c.g.MemberVersion || g.MemberCount != c.g.MemberCount {
		t.Fatalf("refused requests changed the group: %+v", g)
	}
}

// TestRemoveIsAllOrNothing: one forbidden target refuses the whole call.
func TestRemoveIsAllOrNothing(t *testing.T) {
	e := newEnv(t, 0)
	c := e.cast(t)
	_, err := e.svc.RemoveMembers(e.ctx, group.MembersChangeRequest{ActorID: c.admin, GroupID: c.g.GroupID, UserIDs: []int64{c.member, c.admin2}})
	wantCode(t, err, errcode.Forbidden, "")
	if _, ok := e.role(t, c.g.ConversationID, c.member); !ok {
		t.Fatal("the allowed target was removed by a refused call")
	}
}

func TestMembersPaging(t *testing.T) {
	e := newEnv(t, 0)
	u := e.users(t, 12)
	ch := must[group.Change](t)(e.svc.Create(e.ctx, group.CreateRequest{OwnerID: u[0], MemberIDs: u[1:], Name: "paged"}))
	want := slices.Sorted(slices.Values(u))
	for _, limit := range []int{0, 1, 5, 12, 13} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			var got []int64
			var after int64
			for pages := 0; ; pages++ {
				if pages > len(u)+1 {
					t.Fatal("paging does not end")
				}
				p := must[group.MembersPage](t)(e.svc.Members(e.ctx, group.MembersRequest{ActorID: u[3], GroupID: ch.Group.GroupID, AfterUserID: after, Limit: limit}))
				if p.MemberVersion != ch.Group.MemberVersion {
					t.Fatalf("page version %d", p.MemberVersion)
				}
				for _, m := range p.Members {
					got = append(got, m.UserID)
					if (m.UserID == u[0]) != (m.Role == group.RoleOwner) {
						t.Fatalf("member %+v", m)
					}
				}
				if p.NextUserID == 0 {
					break
				}
				after = p.NextUserID
			}
			if !slices.Equal(got, want) {
				t.Fatalf("paged %v, want %v", got, want)
			}
		})
	}
	p := must[group.MembersPage](t)(e.svc.MembersByConversation(e.ctx, ch.Group.ConversationID, 0, 100))
	if len(p.Members) != len(u) || p.NextUserID != 0 {
		t.Fatalf("by conversation: %d members, next %d", len(p.Members), p.NextUserID)
	}
}
