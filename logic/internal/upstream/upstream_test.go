package upstream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/logic/internal/upstream"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/msgid"
)

func newService(t *testing.T, visibility time.Duration, maxBody int) (*upstream.Service, *store.Store) {
	t.Helper()
	_, db := testenv.MySQL(t)
	st := store.New(db)
	gen, err := msgid.New(context.Background(), msgid.Settings{MachineID: 41})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default().Logic
	cfg.Upstream.Services = []string{"orders", "chat"}
	cfg.Upstream.MaxBody = maxBody
	cfg.Upstream.Visibility = visibility
	// The test's writes commit at once: a short settle lets pulls see
	// them without waiting logic's 10 s.
	cfg.Webhook.Settle, cfg.Webhook.PollInterval = 20*time.Millisecond, 10*time.Millisecond
	return upstream.New(st, gen, cfg.Upstream, cfg.Webhook), st
}

// TestQueueRefusesBadFramesAndStoresNothing: each bad frame gets its code
// naming what is wrong, and no pull ever sees it.
func TestQueueRefusesBadFramesAndStoresNothing(t *testing.T) {
	svc, _ := newService(t, time.Minute, 16<<10)
	ctx := context.Background()
	tests := []struct {
		name string
		f    upstream.Frame
		code errcode.Code
		msg  string
	}{
		{"no service", upstream.Frame{Body: "x"}, errcode.InvalidArgument, "service: required"},
		{"unknown service", upstream.Frame{Service: "billing", Body: "x"}, errcode.NotFound, `service "billing"`},
		{"body over max_body", upstream.Frame{Service: "orders", Body: strings.Repeat("x", 16<<10+1)}, errcode.TooLarge, "logic.upstream.max_body"},
		{"body within max_body, over the row once escaped", upstream.Frame{Service: "orders", Body: strings.Repeat("\x01", 16<<10)}, errcode.TooLarge, "once JSON-escaped"},
		{"upstream_id too long", upstream.Frame{Service: "orders", UpstreamID: strings.Repeat("i", 65)}, errcode.InvalidArgument, "upstream_id"},
		{"upstream_id not UTF-8", upstream.Frame{Service: "orders", UpstreamID: "\xff"}, errcode.InvalidArgument, "upstream_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f.UserID, tt.f.DeviceID = 7, "d1"
			_, err := svc.Queue(ctx, tt.f)
			code, msg := errcode.Of(err)
			if code != tt.code || !strings.Contains(msg, tt.msg) {
				t.Fatalf("got %v (%s %q), want %s naming %q", err, code, msg, tt.code, tt.msg)
			}
		})
	}
	for _, s := range []string{"orders", "chat"} {
		if items, err := svc.Pull(ctx, s, 10, 100*time.Millisecond); err != nil || len(items) != 0 {
			t.Fatalf("%s after refused frames: %v, %v", s, items, err)
		}
	}
}

// TestPullAckAndRedelivery: items come in order per service, a retried
// upstream_id is queued once, handed-out items are hidden until the
// visibility timeout and then handed out again, acked ones never again,
// and an ack past the newest item is refused.
func TestPullAckAndRedelivery(t *testing.T) {
	svc, _ := newService(t, 300*time.Millisecond, 64)
	ctx := context.Background()
	queue := func(service, body, uid string) upstream.Queued {
		t.Helper()
		q, err := svc.Queue(ctx, upstream.Frame{UserID: 7, DeviceID: "d1", Service: service, Body: body, UpstreamID: uid})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	a := queue("orders", "a", "u-a")
	queue("chat", "other service", "")
	b := queue("orders", "b", "")
	again := queue("orders", "a, resent", "u-a")
	if !again.Duplicate || again.ID != a.ID || a.Duplicate {
		t.Fatalf("resend with the same upstream_id: %+v, first %+v", again, a)
	}
	bodies := func(items []upstream.Item) string {
		var out []string
		for _, it := range items {
			out = append(out, it.Body)
		}
		return strings.Join(out, ",")
	}
	// pull pulls as a consumer does until the items of want have come,
	// each once: a pull hands out what is settled, and an id is settled
	// only once every statement running on the MySQL server when it was
	// taken has ended (webhook.ReadBound), so another test's statement on
	// the shared server may hold the second item back for a moment.
	pull := func(want string) []upstream.Item {
		t.Helper()
		var items []upstream.Item
		seen := map[int64]bool{}
		for deadline := time.Now().Add(10 * time.Second); bodies(items) != want; {
			got, err := svc.Pull(ctx, "orders", 10, time.Second)
			if err != nil {
				t.Fatalf("pull: %v", err)
			}
			for _, it := range got {
				if !seen[int64(it.ID)] {
					seen[int64(it.ID)] = true
					items = append(items, it)
				}
			}
			if !strings.HasPrefix(want, bodies(items)) || time.Now().After(deadline) {
				t.Fatalf("pull: %q; want %q", bodies(items), want)
			}
		}
		return items
	}
	items := pull("a,b")
	if int64(items[0].ID) != a.ID || int64(items[1].ID) != b.ID || items[0].UpstreamID != "u-a" || items[0].UserID != 7 || items[0].DeviceID != "d1" {
		t.Fatalf("items %+v", items)
	}
	// Handed out: hidden from the next pull until the visibility timeout.
	if hidden, err := svc.Pull(ctx, "orders", 10, 0); err != nil || len(hidden) != 0 {
		t.Fatalf("pull while handed out: %v, %v", hidden, err)
	}
	if _, err := svc.Ack(ctx, "orders", b.ID+1); codeOf(err) != errcode.InvalidArgument {
		t.Fatalf("ack past the handed-out items: %v", err)
	}
	// Not acked in time: handed out again, a first.
	time.Sleep(350 * time.Millisecond)
	pull("a,b")
	if cur, err := svc.Ack(ctx, "orders", a.ID); err != nil || cur != a.ID {
		t.Fatalf("ack a: %d, %v", cur, err)
	}
	c := queue("orders", "c", "")
	time.Sleep(350 * time.Millisecond)
	pull("b,c")
	// A slow puller's ack of an earlier batch still counts after a later
	// pull handed out less.
	time.Sleep(350 * time.Millisecond)
	if items, err := svc.Pull(ctx, "orders", 1, time.Second); err != nil || bodies(items) != "b" {
		t.Fatalf("pull of one: %q, %v", bodies(items), err)
	}
	if cur, err := svc.Ack(ctx, "orders", c.ID); err != nil || cur != c.ID {
		t.Fatalf("ack c after a smaller pull: %d, %v", cur, err)
	}
	// Acking again what is acknowledged changes nothing.
	if cur, err := svc.Ack(ctx, "orders", a.ID); err != nil || cur != c.ID {
		t.Fatalf("ack a again: %d, %v", cur, err)
	}
	// Acked up to the last: the next pull starts after it at once.
	d := queue("orders", "d", "")
	if got := pull("d"); int64(got[0].ID) != d.ID {
		t.Fatalf("after the ack: %+v", got)
	}
	// The other service's queue is its own.
	items, err := svc.Pull(ctx, "chat", 10, time.Second)
	if err != nil || bodies(items) != "other service" {
		t.Fatalf("chat: %q, %v", bodies(items), err)
	}
	if _, err := svc.Ack(ctx, "billing", 1); codeOf(err) != errcode.NotFound {
		t.Fatalf("ack of an unknown service: %v", err)
	}
	if _, err := svc.Pull(ctx, "", 1, 0); codeOf(err) != errcode.InvalidArgument {
		t.Fatalf("pull without a service: %v", err)
	}
}

func codeOf(err error) errcode.Code {
	c, _ := errcode.Of(err)
	return c
}

// TestRunPruneDeletesOnlyItemsPastRetention: with webhooks off the
// upstream service prunes what the dispatcher would: an item older than
// retry_for plus a day goes, a fresh one stays.
func TestRunPruneDeletesOnlyItemsPastRetention(t *testing.T) {
	svc, st := newService(t, time.Minute, 64)
	ctx := context.Background()
	old := time.Now().Add(-config.Default().Logic.Webhook.RetryFor - 25*time.Hour)
	if _, _, err := st.QueueUpstream(ctx, store.UpstreamItem{ID: msgid.MaxAt(old), Type: "upstream.orders", Data: []byte(`{"body":"old"}`), At: old}); err != nil {
		t.Fatal(err)
	}
	fresh, err := svc.Queue(ctx, upstream.Frame{UserID: 7, DeviceID: "d1", Service: "orders", Body: "fresh"})
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); svc.RunPrune(pctx, zap.NewNop()) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n, err := st.NewestUpstream(ctx, "upstream.orders", msgid.MaxAt(old))
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the old item was not pruned")
		}
	}
	cancel()
	<-done
	if n, err := st.NewestUpstream(ctx, "upstream.orders", fresh.ID); err != nil || n != fresh.ID {
		t.Fatalf("the fresh item: newest %d, %v; want %d", n, err, fresh.ID)
	}
}
