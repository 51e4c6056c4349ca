package push_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/push"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/metricname"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// scripted is a Provider that answers from a per-token script and counts
// what it was asked; it stands where an HTTP provider would, so the
// worker's decisions are seen without the wire (the wire of each
// provider is tested against its fake).
type scripted struct {
	mu      sync.Mutex
	answers map[string][]push.Answer
	sent    []push.Notification
}

func (s *scripted) Send(_ context.Context, n push.Notification) push.Answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, n)
	if a := s.answers[n.Token.Token]; len(a) > 0 {
		s.answers[n.Token.Token] = a[1:]
		return a[0]
	}
	return push.Answer{Result: push.Sent}
}

func (s *scripted) count(token string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, x := range s.sent {
		if x.Token.Token == token {
			n++
		}
	}
	return n
}

type workerEnv struct {
	ctx  context.Context
	db   *sqlx.DB
	st   *store.Store
	prov *scripted
	w    *push.Worker
	cid  int64
}

// newWorkerEnv makes a group conversation of users 1–4 (user 3 muted it)
// with FCM tokens: 1 has devices a and b, 2 has c, 3 has d, 4 has e.
func newWorkerEnv(t *testing.T, collapse time.Duration) workerEnv {
	t.Helper()
	_, db := testenv.MySQL(t)
	rdb := testenv.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	st := store.New(db)
	cid := testenv.RandomUserID()
	now := time.Now()
	db.MustExec(`INSERT INTO t_conversations (id, type, last_msg_id, last_msg_at, created_at) VALUES (?, 2, 0, ?, ?)`, cid, now, now)
	for u := int64(1); u <= 4; u++ {
		db.MustExec(`INSERT INTO t_conversation_members (conversation_id, user_id, muted, joined_at) VALUES (?, ?, ?, ?)`, cid, u, u == 3, now)
	}
	db.MustExec(`INSERT INTO t_users (id, nickname, created_at, updated_at) VALUES (9, 'Ann', ?, ?)`, now, now)
	tok := push.NewTokens(st)
	for _, r := range []struct {
		uid int64
		dev string
	}{{1, "a"}, {1, "b"}, {2, "c"}, {3, "d"}, {4, "e"}} {
		if err := tok.Register(ctx, push.Registration{UserID: r.uid, DeviceID: r.dev, Platform: "fcm", Token: "tok-" + r.dev}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tok.SetPreview(ctx, 2, "sender"); err != nil {
		t.Fatal(err)
	}
	if err := tok.SetPreview(ctx, 4, "none"); err != nil {
		t.Fatal(err)
	}
	// User 1's list is in Redis, with 2 unread here and 5 in another
	// conversation: badge 7. The others' lists are not built: their badge
	// is counted in MySQL (0 here).
	rdb.Set(ctx, dialog.BuiltKey(1), "e1", 0)
	rdb.ZAdd(ctx, dialog.ListKey(1), redisZ(1, cid), redisZ(2, cid+1))
	rdb.HSet(ctx, dialog.StateKey(1, cid), dialog.FieldUnread, 2)
	rdb.HSet(ctx, dialog.StateKey(1, cid+1), dialog.FieldUnread, 5)
	prov := &scripted{answers: map[string][]push.Answer{}}
	w, err := push.NewWorker(rdb, st, push.Providers{FCM: prov}, push.WorkerConfig{
		Name: "w1", Partitions: 1, CollapseInterval: collapse, TTL: time.Hour, ClaimIdle: 10 * time.Second,
		SendTimeout: time.Second, MaxAttempts: 3,
	}, zap.NewNop(), push.NewMetrics(nil))
	if err != nil {
		t.Fatal(err)
	}
	push.SetSleep(w, func(context.Context, time.Duration) error { return nil })
	return workerEnv{ctx: ctx, db: db, st: st, prov: prov, w: w, cid: cid}
}

func (e workerEnv) job(msgID int64, online map[int64][]string) *queuev1.PushJob {
	j := &queuev1.PushJob{MsgId: msgID, ConversationId: e.cid, ConversationType: 2, SenderId: 9, MessageType: 1,
		Preview: []byte(`{"msg_id":"1","message_type":1,"text":"lunch?","sender_id":"9"}`)}
	for u := int64(1); u <= 4; u++ {
		j.Users = append(j.Users, &queuev1.PushUser{UserId: u, OnlineDevices: online[u]})
	}
	return j
}

// An offline device of an unmuted member gets one notification per
// message with the preview its owner chose and the badge of total unread;
// a device that took the message online and a muted member get none; the
// same job run again (a crash before the ack) sends nothing more.
func TestWorkerNotifiesOfflineUnmutedDevicesOnce(t *testing.T) {
	e := newWorkerEnv(t, time.Minute)
	j := e.job(1001, map[int64][]string{1: {"b"}})
	for range 2 {
		done, err := e.w.Process(e.ctx, j)
		if err != nil || !done {
			t.Fatalf("process: %v %v", done, err)
		}
	}
	want := map[string]int{"tok-a": 1, "tok-b": 0, "tok-c": 1, "tok-d": 0, "tok-e": 1}
	for tok, n := range want {
		if got := e.prov.count(tok); got != n {
			t.Errorf("%s got %d notifications, want %d", tok, got, n)
		}
	}
	for _, n := range e.prov.sent {
		var title, body string
		switch n.Token.Token {
		case "tok-a":
			title, body = "Ann", "lunch?"
			if n.Badge != 7 {
				t.Errorf("badge %d, want 7", n.Badge)
			}
		case "tok-c":
			title, body = "Ann", "New message"
		case "tok-e":
			title, body = "", "New message"
		}
		if n.Title != title || n.Body != body || n.Key != fmt.Sprintf("1001:%d:%s", n.Token.UserID, n.Token.DeviceID) {
			t.Errorf("%s: %+v, want %q %q", n.Token.Token, n, title, body)
		}
	}
}

// A second message of the conversation within the collapse interval sends
// nothing; after it, one again.
func TestWorkerCollapsesAConversationWithinTheInterval(t *testing.T) {
	e := newWorkerEnv(t, 300*time.Millisecond)
	for _, id := range []int64{2001, 2002, 2003} {
		if _, err := e.w.Process(e.ctx, e.job(id, nil)); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.prov.count("tok-a"); got != 1 {
		t.Fatalf("3 messages in the interval: %d notifications, want 1", got)
	}
	time.Sleep(350 * time.Millisecond) // the interval is the behaviour under test
	if _, err := e.w.Process(e.ctx, e.job(2004, nil)); err != nil {
		t.Fatal(err)
	}
	if got := e.prov.count("tok-a"); got != 2 {
		t.Fatalf("after the interval: %d notifications, want 2", got)
	}
}

// A dead token is removed from MySQL; a 429 / 503 is retried up to
// max_attempts waiting the provider's Retry-After; an auth error is not
// retried.
func TestWorkerRemovesDeadTokensAndRetriesOnlyWhatMayPass(t *testing.T) {
	e := newWorkerEnv(t, time.Minute)
	var waits []time.Duration
	push.SetSleep(e.w, func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil })
	e.prov.answers["tok-a"] = []push.Answer{{Result: push.DeadToken, Reason: "UNREGISTERED"}}
	e.prov.answers["tok-b"] = []push.Answer{{Result: push.Retry, RetryAfter: 4 * time.Second}, {Result: push.Retry}, {Result: push.Sent}}
	e.prov.answers["tok-c"] = []push.Answer{{Result: push.AuthError}}
	e.prov.answers["tok-e"] = []push.Answer{{Result: push.Retry}, {Result: push.Retry}, {Result: push.Retry}, {Result: push.Sent}}
	if done, err := e.w.Process(e.ctx, e.job(3001, nil)); err != nil || !done {
		t.Fatalf("process: %v %v", done, err)
	}
	left, err := e.st.PushTokens(e.ctx, 1)
	if err != nil || len(left) != 1 || left[0].DeviceID != "b" {
		t.Fatalf("user 1 tokens after a dead answer for a: %+v %v", left, err)
	}
	for tok, n := range map[string]int{"tok-b": 3, "tok-c": 1, "tok-e": 3} {
		if got := e.prov.count(tok); got != n {
			t.Errorf("%s tried %d times, want %d", tok, got, n)
		}
	}
	if len(waits) < 1 || waits[0] < 4*time.Second {
		t.Fatalf("waits %v: the first should honour Retry-After 4s", waits)
	}
}

func redisZ(score float64, member int64) redis.Z { return redis.Z{Score: score, Member: member} }

// Every push metric follows the naming scheme.
func TestPushMetricsFollowTheScheme(t *testing.T) {
	reg := prometheus.NewRegistry()
	push.NewMetrics(reg)
	if err := metricname.CheckGathered("logic", reg); err != nil {
		t.Fatal(err)
	}
}

// A push a connection never acked comes as a job for that one device with
// no details: the worker reads the message from MySQL, notifies only that
// device (not the user's other offline ones), never the sender, and a
// recalled message nobody.
func TestWorkerNotifiesTheDeviceOfAnUnackedPushFromTheStoredMessage(t *testing.T) {
	e := newWorkerEnv(t, time.Minute)
	now := time.Now()
	e.db.MustExec(`INSERT INTO t_messages (id, conversation_id, sender_id, client_msg_id, message_type, content, status, created_at)
		VALUES (5001, ?, 9, 'c1', 1, '{"t":1,"text":"did you see this"}', 1, ?), (5002, ?, 9, 'c2', 1, '{"t":1,"text":"gone"}', 2, ?),
		(5003, ?, 1, 'c3', 1, '{"t":1,"text":"mine"}', 1, ?)`, e.cid, now, e.cid, now, e.cid, now)
	unacked := func(msgID, uid int64, dev string) *queuev1.PushJob {
		return &queuev1.PushJob{MsgId: msgID, ConversationId: e.cid, Users: []*queuev1.PushUser{{UserId: uid, OnlyDevices: []string{dev}}}}
	}
	for _, j := range []*queuev1.PushJob{unacked(5001, 1, "b"), unacked(5002, 1, "a"), unacked(5003, 1, "a"), unacked(5999, 1, "a")} {
		if done, err := e.w.Process(e.ctx, j); err != nil || !done {
			t.Fatalf("msg %d: %v %v", j.GetMsgId(), done, err)
		}
	}
	if len(e.prov.sent) != 1 {
		t.Fatalf("%d notifications, want 1: %+v", len(e.prov.sent), e.prov.sent)
	}
	n := e.prov.sent[0]
	if n.Token.Token != "tok-b" || n.MsgID != 5001 || n.Title != "Ann" || n.Body != "did you see this" {
		t.Fatalf("notification %+v", n)
	}
}
