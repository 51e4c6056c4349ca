package store_test

import (
	"context"
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

// relEnv is a store on a fresh database with an id generator for events.
type relEnv struct {
	st  *store.Store
	db  *sqlx.DB
	gen *msgid.Generator
}

func newRelEnv(t *testing.T) (context.Context, relEnv) {
	t.Helper()
	_, db := testenv.MySQL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	gen, err := msgid.New(ctx, msgid.Settings{MachineID: 21})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, relEnv{st: store.New(db), db: db, gen: gen}
}

func (e relEnv) ids(t *testing.T, ctx context.Context) []int64 {
	t.Helper()
	out := make([]int64, 2)
	for i := range out {
		id, err := e.gen.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = id
	}
	return out
}

// eventsTo returns a RelationEvents writing one friend event to each user.
func eventsTo(users ...int64) store.RelationEvents {
	return func(store.RelationOutcome) []store.MailboxEvent {
		out := make([]store.MailboxEvent, len(users))
		for i, u := range users {
			out[i] = store.MailboxEvent{UserID: u, EventType: protocol.EventFriend, Payload: []byte(`{"kind":"test"}`)}
		}
		return out
	}
}

func (e relEnv) mailboxCount(t *testing.T, ctx context.Context, user int64) int {
	t.Helper()
	var n int
	if err := e.db.GetContext(ctx, &n, "SELECT COUNT(*) FROM t_mailbox_events WHERE user_id = ?", user); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRelationsFriendSteps(t *testing.T) {
	ctx, e := newRelEnv(t)
	const a, b, c = 101, 102, 103
	type step struct {
		name    string
		run     func(ids []int64) (store.RelationChange, error)
		want    store.RelationOutcome
		wantErr error
		friends bool // a and b afterwards
		events  map[int64]int
	}
	steps := []step{
		{"a asks b", func(ids []int64) (store.RelationChange, error) {
			return e.st.RequestFriend(ctx, a, b, "hi", ids, eventsTo(b))
		}, store.RelationRequested, nil, false, map[int64]int{b: 1}},
		{"a asks b again: note only", func(ids []int64) (store.RelationChange, error) {
			return e.st.RequestFriend(ctx, a, b, "hello", ids, eventsTo(b))
		}, store.RelationUnchanged, nil, false, map[int64]int{b: 1}},
		{"b rejects", func(ids []int64) (store.RelationChange, error) {
			return e.st.RejectFriend(ctx, b, a, ids, eventsTo(b))
		}, store.RelationRejected, nil, false, map[int64]int{b: 2}},
		{"b rejects again", func(ids []int64) (store.RelationChange, error) {
			return e.st.RejectFriend(ctx, b, a, ids, eventsTo(b))
		}, store.RelationUnchanged, nil, false, map[int64]int{b: 2}},
		{"b cannot accept a rejected request", func(ids []int64) (store.RelationChange, error) {
			return e.st.AcceptFriend(ctx, b, a, ids, eventsTo(a, b))
		}, 0, store.ErrNotFound, false, map[int64]int{a: 0, b: 2}},
		{"a asks again after the rejection", func(ids []int64) (store.RelationChange, error) {
			return e.st.RequestFriend(ctx, a, b, "please", ids, eventsTo(b))
		}, store.RelationRequested, nil, false, map[int64]int{b: 3}},
		{"b accepts", func(ids []int64) (store.RelationChange, error) {
			return e.st.AcceptFriend(ctx, b, a, ids, eventsTo(a, b))
		}, store.RelationBefriended, nil, true, map[int64]int{a: 1, b: 4}},
		{"b accepts again", func(ids []int64) (store.RelationChange, error) {
			return e.st.AcceptFriend(ctx, b, a, ids, eventsTo(a, b))
		}, store.RelationUnchanged, nil, true, map[int64]int{a: 1, b: 4}},
		{"b cannot reject an accepted request", func(ids []int64) (store.RelationChange, error) {
			return e.st.RejectFriend(ctx, b, a, ids, eventsTo(b))
		}, 0, store.ErrNotFound, true, map[int64]int{b: 4}},
		{"friends asking is unchanged", func(ids []int64) (store.RelationChange, error) {
			return e.st.RequestFriend(ctx, b, a, "", ids, eventsTo(a))
		}, store.RelationUnchanged, nil, true, map[int64]int{a: 1}},
		{"a remarks b", func(ids []int64) (store.RelationChange, error) {
			return e.st.SetRemark(ctx, a, b, "bee", ids, eventsTo(a))
		}, store.RelationRemarked, nil, true, map[int64]int{a: 2}},
		{"same remark", func(ids []int64) (store.RelationChange, error) {
			return e.st.SetRemark(ctx, a, b, "bee", ids, eventsTo(a))
		}, store.RelationUnchanged, nil, true, map[int64]int{a: 2}},
		{"remark of a stranger", func(ids []int64) (store.RelationChange, error) {
			return e.st.SetRemark(ctx, a, c, "see", ids, eventsTo(a))
		}, 0, store.ErrNotFound, true, map[int64]int{a: 2}},
		{"b removes a", func(ids []int64) (store.RelationChange, error) {
			return e.st.RemoveFriend(ctx, b, a, ids, eventsTo(b, a))
		}, store.RelationRemoved, nil, false, map[int64]int{a: 3, b: 5}},
		{"remove again", func(ids []int64) (store.RelationChange, error) {
			return e.st.RemoveFriend(ctx, a, b, ids, eventsTo(b, a))
		}, store.RelationUnchanged, nil, false, map[int64]int{a: 3, b: 5}},
		{"accepting the old request after removal", func(ids []int64) (store.RelationChange, error) {
			return e.st.AcceptFriend(ctx, b, a, ids, eventsTo(a, b))
		}, 0, store.ErrNotFound, false, map[int64]int{a: 3, b: 5}},
		{"b asks a", func(ids []int64) (store.RelationChange, error) {
			return e.st.RequestFriend(ctx, b, a, "", ids, eventsTo(a))
		}, store.RelationRequested, nil, false, map[int64]int{a: 4}},
		{"a asking b back befriends", func(ids []int64) (store.RelationChange, error) {
			return e.st.RequestFriend(ctx, a, b, "", ids, eventsTo(a, b))
		}, store.RelationBefriended, nil, true, map[int64]int{a: 5, b: 6}},
		{"direct add of friends", func(ids []int64) (store.RelationChange, error) {
			return e.st.AddFriend(ctx, a, b, ids, eventsTo(a, b))
		}, store.RelationUnchanged, nil, true, map[int64]int{a: 5, b: 6}},
		{"direct add of a and c", func(ids []int64) (store.RelationChange, error) {
			return e.st.AddFriend(ctx, c, a, ids, eventsTo(a, c))
		}, store.RelationBefriended, nil, true, map[int64]int{a: 6, c: 1}},
	}
	for _, s := range steps {
		ch, err := s.run(e.ids(t, ctx))
		if s.wantErr != nil {
			if !errors.Is(err, s.wantErr) {
				t.Fatalf("%s: err = %v, want %v", s.name, err, s.wantErr)
			}
		} else if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		} else if ch.Outcome != s.want {
			t.Fatalf("%s: outcome %d, want %d", s.name, ch.Outcome, s.want)
		}
		if s.wantErr == nil && (len(ch.Events) > 0) != (s.want != store.RelationUnchanged) {
			t.Fatalf("%s: %d events for outcome %d", s.name, len(ch.Events), ch.Outcome)
		}
		for _, ev := range ch.Events {
			if ev.Seq <= 0 || ev.ID == 0 {
				t.Fatalf("%s: event without seq or id: %+v", s.name, ev)
			}
		}
		for _, pair := range [][2]int64{{a, b}, {b, a}} {
			got, err := e.st.AreFriends(ctx, pair[0], pair[1])
			if err != nil {
				t.Fatal(err)
			}
			if got != s.friends {
				t.Fatalf("%s: AreFriends(%d, %d) = %v, want %v", s.name, pair[0], pair[1], got, s.friends)
			}
		}
		for u, n := range s.events {
			if got := e.mailboxCount(t, ctx, u); got != n {
				t.Fatalf("%s: user %d has %d mailbox events, want %d", s.name, u, got, n)
			}
		}
	}
	friends, err := e.st.ListFriends(ctx, a, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(friends) != 2 || friends[0].FriendID != b || friends[1].FriendID != c || friends[0].Remark != "" {
		t.Fatalf("a's friends = %+v, want b (remark gone with the removal) and c", friends)
	}
}

func TestRelationsBlocks(t *testing.T) {
	ctx, e := newRelEnv(t)
	const a, b, c = 201, 202, 203
	tests := []struct {
		name    string
		run     func(ids []int64) (store.RelationChange, error)
		want    store.RelationOutcome
		blocked map[[2]int64]bool // IsBlockedEitherWay afterwards
	}{
		{"a blocks b", func(ids []int64) (store.RelationChange, error) { return e.st.Block(ctx, a, b, ids, eventsTo(a)) },
			store.RelationBlocked, map[[2]int64]bool{{a, b}: true, {b, a}: true, {a, c}: false}},
		{"a blocks b again", func(ids []int64) (store.RelationChange, error) { return e.st.Block(ctx, a, b, ids, eventsTo(a)) },
			store.RelationUnchanged, map[[2]int64]bool{{a, b}: true, {b, a}: true}},
		{"b blocks a too", func(ids []int64) (store.RelationChange, error) { return e.st.Block(ctx, b, a, ids, eventsTo(b)) },
			store.RelationBlocked, map[[2]int64]bool{{a, b}: true}},
		{"a unblocks b: b's block remains", func(ids []int64) (store.RelationChange, error) { return e.st.Unblock(ctx, a, b, ids, eventsTo(a)) },
			store.RelationUnblocked, map[[2]int64]bool{{a, b}: true, {b, a}: true}},
		{"b unblocks a", func(ids []int64) (store.RelationChange, error) { return e.st.Unblock(ctx, b, a, ids, eventsTo(b)) },
			store.RelationUnblocked, map[[2]int64]bool{{a, b}: false, {b, a}: false}},
		{"unblock again", func(ids []int64) (store.RelationChange, error) { return e.st.Unblock(ctx, b, a, ids, eventsTo(b)) },
			store.RelationUnchanged, map[[2]int64]bool{{a, b}: false}},
		{"c blocks a", func(ids []int64) (store.RelationChange, error) { return e.st.Block(ctx, c, a, ids, eventsTo(c)) },
			store.RelationBlocked, map[[2]int64]bool{{a, c}: true, {a, b}: false}},
	}
	for _, tt := range tests {
		ch, err := tt.run(e.ids(t, ctx))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if ch.Outcome != tt.want {
			t.Fatalf("%s: outcome %d, want %d", tt.name, ch.Outcome, tt.want)
		}
		for p, want := range tt.blocked {
			got, err := e.st.IsBlockedEitherWay(ctx, p[0], p[1])
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("%s: IsBlockedEitherWay(%d, %d) = %v, want %v", tt.name, p[0], p[1], got, want)
			}
		}
	}
	// Events: a blocked, a unblocked; b blocked, b unblocked; c blocked.
	for u, n := range map[int64]int{a: 2, b: 2, c: 1} {
		if got := e.mailboxCount(t, ctx, u); got != n {
			t.Errorf("user %d: %d mailbox events, want %d", u, got, n)
		}
	}
}

func TestRelationsListsPage(t *testing.T) {
	ctx, e := newRelEnv(t)
	const owner = 300
	for i := int64(1); i <= 7; i++ {
		for _, run := range []func(ids []int64) (store.RelationChange, error){
			func(ids []int64) (store.RelationChange, error) { return e.st.AddFriend(ctx, owner, owner+i, ids, nil) },
			func(ids []int64) (store.RelationChange, error) { return e.st.Block(ctx, owner, owner+10*i, ids, nil) },
			func(ids []int64) (store.RelationChange, error) {
				return e.st.RequestFriend(ctx, owner+100*i, owner, "n", ids, nil)
			},
		} {
			if _, err := run(e.ids(t, ctx)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One of the requests is rejected and leaves the incoming list.
	if _, err := e.st.RejectFriend(ctx, owner, owner+300, e.ids(t, ctx), nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		list func(after int64, limit int) ([]int64, error)
		want []int64
	}{
		{"friends", func(after int64, limit int) ([]int64, error) {
			rows, err := e.st.ListFriends(ctx, owner, after, limit)
			var ids []int64
			for _, r := range rows {
				ids = append(ids, r.FriendID)
			}
			return ids, err
		}, []int64{301, 302, 303, 304, 305, 306, 307}},
		{"blocks", func(after int64, limit int) ([]int64, error) {
			rows, err := e.st.ListBlocks(ctx, owner, after, limit)
			var ids []int64
			for _, r := range rows {
				ids = append(ids, r.BlockedUserID)
			}
			return ids, err
		}, []int64{310, 320, 330, 340, 350, 360, 370}},
		{"incoming pending requests", func(after int64, limit int) ([]int64, error) {
			rows, err := e.st.ListIncomingRequests(ctx, owner, after, limit)
			var ids []int64
			for _, r := range rows {
				ids = append(ids, r.FromUserID)
			}
			return ids, err
		}, []int64{400, 500, 700, 800, 900, 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int64
			after := int64(0)
			for pages := 0; pages < 10; pages++ {
				ids, err := tt.list(after, 3)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, ids...)
				if len(ids) < 3 {
					break
				}
				after = ids[len(ids)-1]
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestRelationsP2PFacts(t *testing.T) {
	ctx, e := newRelEnv(t)
	const a, b, ghost, disabled = 401, 402, 499, 403
	for _, u := range []int64{a, b, disabled} {
		if err := e.st.EnsureUser(ctx, u, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.db.ExecContext(ctx, "UPDATE t_users SET status = ? WHERE id = ?", store.UserDisabled, disabled); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.AddFriend(ctx, a, b, e.ids(t, ctx), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Block(ctx, ghost, a, e.ids(t, ctx), nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		from, to int64
		want     store.P2PFacts
	}{
		{"friends", a, b, store.P2PFacts{RecipientStatus: store.UserActive, Friends: true}},
		{"other way", b, a, store.P2PFacts{RecipientStatus: store.UserActive, Friends: true}},
		{"unknown recipient who blocked the sender", a, ghost, store.P2PFacts{Blocked: true}},
		{"to a blocker of the recipient", ghost, a, store.P2PFacts{RecipientStatus: store.UserActive, Blocked: true}},
		{"disabled stranger", b, disabled, store.P2PFacts{RecipientStatus: store.UserDisabled}},
	}
	for _, tt := range tests {
		got, err := e.st.P2PFacts(ctx, tt.from, tt.to)
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// TestRelationsMutualRequestRace: two users asking each other at the same
// moment end as friends whatever the interleaving, with one request and
// one acceptance (the loser's retry writes no second set of events).
// Identical requests from two devices at once are one request.
func TestRelationsMutualRequestRace(t *testing.T) {
	ctx, e := newRelEnv(t)
	const pairs = 20
	byOutcome := func(from, to int64) store.RelationEvents {
		return func(o store.RelationOutcome) []store.MailboxEvent {
			if o == store.RelationBefriended {
				return eventsTo(from, to)(o)
			}
			return eventsTo(to)(o)
		}
	}
	type call struct{ from, to int64 }
	for k, tt := range []struct {
		name     string
		calls    func(a, b int64) []call
		friends  bool
		outcomes map[store.RelationOutcome]int
		events   int // mailbox events of a and b together
	}{
		// One request event (to whoever was asked first) and one
		// accepted event each.
		{"ask each other", func(a, b int64) []call { return []call{{a, b}, {b, a}} }, true,
			map[store.RelationOutcome]int{store.RelationRequested: 1, store.RelationBefriended: 1}, 3},
		{"same request twice", func(a, b int64) []call { return []call{{a, b}, {a, b}} }, false,
			map[store.RelationOutcome]int{store.RelationRequested: 1, store.RelationUnchanged: 1}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base := int64(10_000 * (k + 1)) // users of their own
			type result struct {
				pair int64
				out  store.RelationOutcome
				err  error
			}
			results := make(chan result, 2*pairs)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := int64(0); i < pairs; i++ {
				a, b := base+2*i, base+2*i+1
				for _, c := range tt.calls(a, b) {
					ids := e.ids(t, ctx)
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						ch, err := e.st.RequestFriend(ctx, c.from, c.to, "", ids, byOutcome(c.from, c.to))
						results <- result{i, ch.Outcome, err}
					}()
				}
			}
			close(start)
			wg.Wait()
			close(results)
			outcomes := map[int64]map[store.RelationOutcome]int{}
			for r := range results {
				if r.err != nil {
					t.Fatal(r.err)
				}
				if outcomes[r.pair] == nil {
					outcomes[r.pair] = map[store.RelationOutcome]int{}
				}
				outcomes[r.pair][r.out]++
			}
			for i := int64(0); i < pairs; i++ {
				a, b := base+2*i, base+2*i+1
				ok, err := e.st.AreFriends(ctx, a, b)
				if err != nil {
					t.Fatal(err)
				}
				if ok != tt.friends {
					t.Errorf("pair %d: friends %v, want %v", i, ok, tt.friends)
				}
				if len(outcomes[i]) != len(tt.outcomes) {
					t.Errorf("pair %d: outcomes %v, want %v", i, outcomes[i], tt.outcomes)
				}
				for o, n := range tt.outcomes {
					if outcomes[i][o] != n {
						t.Errorf("pair %d: outcomes %v, want %v", i, outcomes[i], tt.outcomes)
					}
				}
				if got := e.mailboxCount(t, ctx, a) + e.mailboxCount(t, ctx, b); got != tt.events {
					t.Errorf("pair %d: %d mailbox events, want %d", i, got, tt.events)
				}
			}
		})
	}
}
