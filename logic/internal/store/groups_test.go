package store_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/protocol"
)

type groupEnv struct {
	db  *sqlx.DB
	st  *store.Store
	ids *msgid.Generator
}

func newGroupEnv(t *testing.T) (context.Context, groupEnv) {
	t.Helper()
	_, db := testenv.MySQL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	g, err := msgid.New(ctx, msgid.Settings{MachineID: 21})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, groupEnv{db: db, st: store.New(db), ids: g}
}

func (e groupEnv) newIDs(t *testing.T, ctx context.Context, n int) []int64 {
	t.Helper()
	out := make([]int64, n)
	for i := range out {
		id, err := e.ids.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = id
	}
	return out
}

func membership(uid, cid int64) store.MailboxEvent {
	return store.MailboxEvent{UserID: uid, EventType: protocol.EventMembership, ConversationID: cid, Payload: []byte(`{"action":"test"}`)}
}

// createGroup makes a group of owner + members with the given limit and
// returns it.
func (e groupEnv) createGroup(t *testing.T, ctx context.Context, owner int64, members []int64, maxMembers int) store.Group {
	t.Helper()
	ids := e.newIDs(t, ctx, 2)
	ng := store.NewGroup{Group: store.Group{ID: ids[0], ConversationID: ids[1], Name: "g", OwnerID: owner, MaxMembers: maxMembers}}
	ng.Members = append(ng.Members, store.GroupMember{UserID: owner, Role: store.RoleOwner})
	var events []store.MailboxEvent
	events = append(events, membership(owner, ids[1]))
	for _, m := range members {
		ng.Members = append(ng.Members, store.GroupMember{UserID: m, Role: store.RoleMember})
		events = append(events, membership(m, ids[1]))
	}
	c, err := e.st.CreateGroup(ctx, ng, events, e.newIDs(t, ctx, len(events)))
	if err != nil {
		t.Fatal(err)
	}
	return c.Group
}

func (e groupEnv) count(t *testing.T, ctx context.Context, q string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.GetContext(ctx, &n, q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// checkCount asserts member_count is the number of member rows.
func (e groupEnv) checkCount(t *testing.T, ctx context.Context, g store.Group) store.Group {
	t.Helper()
	got, err := e.st.GetGroup(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rows := e.count(t, ctx, "SELECT COUNT(*) FROM t_conversation_members WHERE conversation_id = ?", g.ConversationID); rows != got.MemberCount {
		t.Fatalf("member_count = %d but %d member rows", got.MemberCount, rows)
	}
	return got
}

func TestCreateGroup(t *testing.T) {
	ctx, e := newGroupEnv(t)
	owner, a, b := testenv.RandomUserID(), testenv.RandomUserID(), testenv.RandomUserID()
	g := e.createGroup(t, ctx, owner, []int64{a, b}, 10)
	if g.MemberCount != 3 || g.MemberVersion != 1 || g.Status != store.GroupActive {
		t.Fatalf("created %+v", g)
	}
	got := e.checkCount(t, ctx, g)
	if got.Name != "g" || got.OwnerID != owner || got.MaxMembers != 10 || got.ConversationID != g.ConversationID {
		t.Fatalf("read %+v", got)
	}
	if typ, err := e.st.ConversationType(ctx, g.ConversationID); err != nil || typ != store.ConversationGroup {
		t.Fatalf("conversation type = %d, %v", typ, err)
	}
	if byConv, err := e.st.GroupByConversation(ctx, g.ConversationID); err != nil || byConv.ID != g.ID {
		t.Fatalf("GroupByConversation = %+v, %v", byConv, err)
	}
	m, err := e.st.GetGroupMember(ctx, g.ConversationID, owner)
	if err != nil || m.Role != store.RoleOwner {
		t.Fatalf("owner member = %+v, %v", m, err)
	}
	for _, u := range []int64{owner, a, b} {
		if n := e.count(t, ctx, "SELECT COUNT(*) FROM t_mailbox_events WHERE user_id = ? AND conversation_id = ? AND event_type = ?",
			u, g.ConversationID, protocol.EventMembership); n != 1 {
			t.Errorf("user %d has %d membership events, want 1", u, n)
		}
	}

	tests := []struct {
		name string
		ng   store.NewGroup
		want error
	}{
		{"no owner", store.NewGroup{Group: store.Group{OwnerID: 1, MaxMembers: 5}, Members: []store.GroupMember{{UserID: 1}}}, nil},
		{"owner role on another user", store.NewGroup{Group: store.Group{OwnerID: 1, MaxMembers: 5}, Members: []store.GroupMember{{UserID: 2, Role: store.RoleOwner}}}, nil},
		{"over the limit", store.NewGroup{Group: store.Group{OwnerID: 1, MaxMembers: 1},
			Members: []store.GroupMember{{UserID: 1, Role: store.RoleOwner}, {UserID: 2}}}, store.ErrGroupFull},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.st.CreateGroup(ctx, tt.ng, nil, nil)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestChangeGroup(t *testing.T) {
	ctx, e := newGroupEnv(t)
	owner := testenv.RandomUserID()
	g := e.createGroup(t, ctx, owner, nil, 4)
	a, b, c := testenv.RandomUserID(), testenv.RandomUserID(), testenv.RandomUserID()

	type step struct {
		name        string
		events      int
		fn          func(ctx context.Context, t *store.GroupTx) error
		wantErr     error
		wantChanged bool
		wantVersion int64
		wantCount   int
	}
	add := func(uids ...int64) func(ctx context.Context, tx *store.GroupTx) error {
		return func(ctx context.Context, tx *store.GroupTx) error {
			var ms []store.GroupMember
			for _, u := range uids {
				ms = append(ms, store.GroupMember{UserID: u})
			}
			if err := tx.AddMembers(ctx, ms); err != nil {
				return err
			}
			for _, u := range uids {
				if err := tx.Notify(membership(u, tx.Group().ConversationID)); err != nil {
					return err
				}
			}
			return nil
		}
	}
	errStop := errors.New("stop")
	steps := []step{
		{"add two", 2, add(a, b), nil, true, 2, 3},
		{"nothing changes: no write, same version", 0, func(context.Context, *store.GroupTx) error { return nil }, nil, false, 2, 3},
		{"past the limit", 2, add(c, testenv.RandomUserID()), store.ErrGroupFull, false, 2, 3},
		{"fn error rolls back its changes", 1, func(ctx context.Context, tx *store.GroupTx) error {
			if err := add(c)(ctx, tx); err != nil {
				return err
			}
			return errStop
		}, errStop, false, 2, 3},
		{"more events than ids", 0, add(c), nil, false, 2, 3}, // wantErr set below
		{"role and mute bump the version once", 1, func(ctx context.Context, tx *store.GroupTx) error {
			if err := tx.SetRole(ctx, a, store.RoleAdmin); err != nil {
				return err
			}
			if err := tx.SetMuteUntil(ctx, b, sql.NullTime{Time: time.Now().Add(time.Hour), Valid: true}); err != nil {
				return err
			}
			return tx.Notify(membership(a, tx.Group().ConversationID))
		}, nil, true, 3, 3},
		{"remove one (and one non-member)", 1, func(ctx context.Context, tx *store.GroupTx) error {
			n, err := tx.RemoveMembers(ctx, []int64{b, testenv.RandomUserID()})
			if err != nil || n != 1 {
				return errors.Join(err, errors.New("removed count"))
			}
			return tx.Notify(membership(b, tx.Group().ConversationID))
		}, nil, true, 4, 2},
		{"group fields alone keep the version", 0, func(_ context.Context, tx *store.GroupTx) error {
			tx.Update(func(g *store.Group) { g.Name, g.MuteAll = "renamed", true })
			return nil
		}, nil, true, 4, 2},
		{"dissolve bumps the version", 0, func(_ context.Context, tx *store.GroupTx) error {
			tx.Update(func(g *store.Group) { g.Status = store.GroupDissolved })
			return nil
		}, nil, true, 5, 2},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			before := e.count(t, ctx, "SELECT COUNT(*) FROM t_mailbox_events WHERE conversation_id = ?", g.ConversationID)
			res, err := e.st.ChangeGroup(ctx, store.GroupRef{GroupID: g.ID}, e.newIDs(t, ctx, st.events), st.fn)
			switch {
			case st.name == "more events than ids":
				if err == nil {
					t.Fatal("queued an event without an id")
				}
			case st.wantErr != nil:
				if !errors.Is(err, st.wantErr) {
					t.Fatalf("err = %v, want %v", err, st.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			default:
				if res.Changed != st.wantChanged || res.Group.MemberVersion != st.wantVersion || res.Group.MemberCount != st.wantCount {
					t.Fatalf("changed %v version %d count %d, want %v %d %d", res.Changed, res.Group.MemberVersion, res.Group.MemberCount,
						st.wantChanged, st.wantVersion, st.wantCount)
				}
				for _, ev := range res.Events {
					if ev.Seq <= 0 || ev.ID == 0 {
						t.Fatalf("event without seq or id: %+v", ev)
					}
				}
			}
			got := e.checkCount(t, ctx, g)
			if got.MemberVersion != st.wantVersion || got.MemberCount != st.wantCount {
				t.Fatalf("stored version %d count %d, want %d %d", got.MemberVersion, got.MemberCount, st.wantVersion, st.wantCount)
			}
			if v, err := e.st.MemberVersion(ctx, g.ConversationID); err != nil || v != st.wantVersion {
				t.Fatalf("MemberVersion = %d, %v", v, err)
			}
			after := e.count(t, ctx, "SELECT COUNT(*) FROM t_mailbox_events WHERE conversation_id = ?", g.ConversationID)
			if wrote := after - before; (err == nil && wrote != len(res.Events)) || (err != nil && wrote != 0) {
				t.Fatalf("wrote %d events, returned %d (err %v)", wrote, len(res.Events), err)
			}
		})
	}
	if _, err := e.st.ChangeGroup(ctx, store.GroupRef{GroupID: -1}, nil, func(context.Context, *store.GroupTx) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown group: %v", err)
	}
	if _, err := e.st.ChangeGroup(ctx, store.GroupRef{ConversationID: g.ConversationID}, nil, func(_ context.Context, tx *store.GroupTx) error {
		if tx.Group().ID != g.ID {
			return errors.New("wrong group")
		}
		return nil
	}); err != nil {
		t.Fatalf("by conversation: %v", err)
	}
}

func TestGroupMembersPaging(t *testing.T) {
	ctx, e := newGroupEnv(t)
	owner := testenv.RandomUserID()
	var members []int64
	for range 25 {
		members = append(members, testenv.RandomUserID())
	}
	g := e.createGroup(t, ctx, owner, members, 100)
	want := map[int64]bool{owner: true}
	for _, m := range members {
		want[m] = true
	}
	for _, limit := range []int{1, 7, 26, 100} {
		var after, last int64
		seen := 0
		for {
			page, err := e.st.GroupMembers(ctx, g.ConversationID, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(page))
			}
			for _, m := range page {
				if m.UserID <= last || !want[m.UserID] {
					t.Fatalf("limit %d: user %d out of order or unknown", limit, m.UserID)
				}
				last = m.UserID
				seen++
			}
			if len(page) < limit {
				break
			}
			after = page[len(page)-1].UserID
		}
		if seen != len(want) {
			t.Fatalf("limit %d: saw %d members, want %d", limit, seen, len(want))
		}
	}
	if _, err := e.st.MemberVersion(ctx, -1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("MemberVersion of no group: %v", err)
	}
}

// TestChangeGroupConcurrentAddsKeepTheLimit: many transactions adding at
// once never take a group past max_members, and member_count stays the
// number of rows.
func TestChangeGroupConcurrentAddsKeepTheLimit(t *testing.T) {
	ctx, e := newGroupEnv(t)
	const limit, workers, each = 30, 16, 4
	g := e.createGroup(t, ctx, testenv.RandomUserID(), nil, limit)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, full := 0, 0
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ms []store.GroupMember
			for range each {
				ms = append(ms, store.GroupMember{UserID: testenv.RandomUserID()})
			}
			_, err := e.st.ChangeGroup(ctx, store.GroupRef{GroupID: g.ID}, nil, func(ctx context.Context, tx *store.GroupTx) error {
				return tx.AddMembers(ctx, ms)
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, store.ErrGroupFull):
				full++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if want := (limit - 1) / each; ok != want || full != workers-want {
		t.Fatalf("%d adds succeeded and %d were full, want %d and %d", ok, full, want, workers-want)
	}
	got := e.checkCount(t, ctx, g)
	if got.MemberCount != 1+ok*each || got.MemberCount > limit || got.MemberVersion != int64(1+ok) {
		t.Fatalf("count %d version %d after %d adds", got.MemberCount, got.MemberVersion, ok)
	}
}
