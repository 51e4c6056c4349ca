package store_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/msgid"
)

// A relationship change records its webhook event in its own
// transaction once events are recorded, an unchanged repeat records
// nothing, and the events read back in id order with their JSON.
func TestWebhookEventsOfRelationChanges(t *testing.T) {
	ctx, e := newRelEnv(t)
	const a, b = 81001, 81002
	if _, err := e.st.AddFriend(ctx, a, b, e.ids(t, ctx), nil); err != nil {
		t.Fatal(err)
	}
	e.st.RecordWebhookEvents(e.gen.Next)
	steps := []struct {
		name string
		run  func() error
	}{
		{"block", func() error { _, err := e.st.Block(ctx, a, b, e.ids(t, ctx), nil); return err }},
		{"block again (unchanged)", func() error { _, err := e.st.Block(ctx, a, b, e.ids(t, ctx), nil); return err }},
		{"unblock", func() error { _, err := e.st.Unblock(ctx, a, b, e.ids(t, ctx), nil); return err }},
		{"remove friend", func() error { _, err := e.st.RemoveFriend(ctx, b, a, e.ids(t, ctx), nil); return err }},
	}
	for _, st := range steps {
		if err := st.run(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
	}
	evs, err := e.st.WebhookEventsAfter(ctx, 0, msgid.MaxAt(time.Now()), 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ typ, data string }{
		{store.EventBlockAdded, `{"user_id":"81001","target_user_id":"81002"}`},
		{store.EventBlockRemoved, `{"user_id":"81001","target_user_id":"81002"}`},
		{store.EventFriendRemoved, `{"user_id":"81002","target_user_id":"81001"}`},
	}
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(evs), len(want), evs)
	}
	for i, w := range want {
		if evs[i].Type != w.typ || string(evs[i].Data) != w.data || (i > 0 && evs[i].ID <= evs[i-1].ID) {
			t.Errorf("event %d = %s %s (id %d), want %s %s", i, evs[i].Type, evs[i].Data, evs[i].ID, w.typ, w.data)
		}
	}
	// Before RecordWebhookEvents the AddFriend recorded nothing: the
	// first event is the block.
	var n int
	if err := e.db.GetContext(ctx, &n, "SELECT COUNT(*) FROM t_webhook_events"); err != nil || n != 3 {
		t.Fatalf("%d rows (%v), want 3", n, err)
	}
}

// The cursor and the retry state change only while the endpoint is
// active and its cursor is still the one the dispatcher read, so an
// operator's replay or disable made meanwhile wins.
func TestWebhookEndpointCursorIsConditional(t *testing.T) {
	ctx, e := newRelEnv(t)
	ep, err := e.st.CreateWebhookEndpoint(ctx, "http://hooks.example/x", "", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 100, false)
	if err != nil {
		t.Fatal(err)
	}
	fail := store.WebhookFailure{Attempts: 1, FailingSince: time.Now(), NextAttempt: time.Now().Add(time.Minute), Error: "503", Status: store.EndpointActive}
	steps := []struct {
		name string
		run  func() (bool, error)
		want bool
	}{
		{"advance from the cursor read", func() (bool, error) { return e.st.AdvanceWebhookCursor(ctx, ep.ID, 100, 200) }, true},
		{"advance from a stale cursor", func() (bool, error) { return e.st.AdvanceWebhookCursor(ctx, ep.ID, 100, 300) }, false},
		{"failure at the cursor", func() (bool, error) { return e.st.RecordWebhookFailure(ctx, ep.ID, 200, fail) }, true},
		{"failure at a stale cursor", func() (bool, error) { return e.st.RecordWebhookFailure(ctx, ep.ID, 100, fail) }, false},
		{"replay to 50", func() (bool, error) { return true, e.st.ReplayWebhookEndpoint(ctx, ep.ID, 50) }, true},
		{"the dispatcher's advance from before the replay", func() (bool, error) { return e.st.AdvanceWebhookCursor(ctx, ep.ID, 200, 250) }, false},
		{"disable", func() (bool, error) { return true, e.st.SetWebhookStatus(ctx, ep.ID, store.EndpointDisabled) }, true},
		{"advance while disabled", func() (bool, error) { return e.st.AdvanceWebhookCursor(ctx, ep.ID, 50, 60) }, false},
	}
	for _, st := range steps {
		got, err := st.run()
		if err != nil || got != st.want {
			t.Fatalf("%s: %v (%v), want %v", st.name, got, err, st.want)
		}
	}
	ep, err = e.st.GetWebhookEndpoint(ctx, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ep.CursorID != 50 || ep.Status != store.EndpointDisabled || ep.Attempts != 0 || ep.NextAttemptAt.Valid {
		t.Fatalf("endpoint after the steps: %+v", ep)
	}
	if err := e.st.ReplayWebhookEndpoint(ctx, 999999, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("replay of a missing endpoint: %v", err)
	}
	if err := e.st.RotateWebhookSecret(ctx, ep.ID, "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	ep, _ = e.st.GetWebhookEndpoint(ctx, ep.ID)
	if ep.OldSecret != "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" || ep.Secret != "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" || ep.OldSecretUntil == (sql.NullTime{}) {
		t.Fatalf("after rotation: %+v", ep)
	}
}

// OldestStatementAge sees a statement running on this database on
// another connection for as long as it runs, and nothing once it ended.
func TestOldestStatementAgeSeesALongRunningStatement(t *testing.T) {
	_, db := testenv.MySQL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := store.New(db)
	age := func() time.Duration {
		t.Helper()
		a, err := st.OldestStatementAge(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := age(); a != 0 {
		t.Fatalf("age %v with nothing running, want 0", a)
	}
	done := make(chan error, 1)
	go func() {
		_, err := db.ExecContext(ctx, "SELECT SLEEP(2.5)")
		done <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	// TIME has whole seconds, rounded up: at least 2 s after 1.5 s.
	if a := age(); a < 2*time.Second || a > 10*time.Second {
		t.Errorf("age %v of a statement running for 1.5 s, want 2 s to 10 s", a)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a := age(); a != 0 {
		t.Errorf("age %v once the statement ended, want 0", a)
	}
}
