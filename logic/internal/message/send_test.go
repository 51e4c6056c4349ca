package message_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/logic/internal/clientwire"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/metrics"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/rediskey"
)

const partitions = 16

type env struct {
	st      *store.Store
	hw      *sqlx.DB // the MsgId high-water marks' pool
	rdb     *redis.Client
	metrics *metrics.Metrics // shared by the env's services
}

func newEnv(t testing.TB) *env {
	t.Helper()
	dsn, db := testenv.MySQL(t)
	// The MariaDB is shared (max_connections 151): the concurrency tests
	// queue on the pool rather than take every connection. The MsgId
	// high-water mark has its own pool, as in the server: a send holds a
	// connection while it waits for an id.
	db.SetMaxOpenConns(24)
	hw, err := store.Open(dsn, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hw.Close() })
	return &env{st: store.New(db), hw: hw, rdb: testenv.Redis(t), metrics: metrics.New(nil)}
}

// testConfig is the send path's config from config.Default() with the
// test's partitions, and the fields set in over in place of their
// defaults.
func testConfig(over message.Config) message.Config {
	c := message.ConfigFrom(config.Default())
	c.Partitions = partitions
	keepOrSet(&c.MsgIDWindow, over.MsgIDWindow)
	keepOrSet(&c.EnqueueRetries, over.EnqueueRetries)
	keepOrSet(&c.RecallWindow, over.RecallWindow)
	keepOrSet(&c.EditWindow, over.EditWindow)
	keepOrSet(&c.ReactionKinds, over.ReactionKinds)
	keepOrSet(&c.ReactionsPerUser, over.ReactionsPerUser)
	keepOrSet(&c.CommitWorkers, over.CommitWorkers)
	keepOrSet(&c.CommitBatch, over.CommitBatch)
	keepOrSet(&c.MaxFrameSize, over.MaxFrameSize)
	c.Conversations = over.Conversations
	c.BeforeSend = over.BeforeSend
	return c
}

// keepOrSet sets *dst to v unless v is zero, which keeps the default.
func keepOrSet[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}

func (e *env) service(t *testing.T, machine int, cfg message.Config) (*message.Service, *msgid.Generator) {
	t.Helper()
	g, err := msgid.New(context.Background(), msgid.Settings{MachineID: machine, Store: store.NewHighWater(e.hw)})
	if err != nil {
		t.Fatal(err)
	}
	e.lease(t, machine)
	svc, err := message.New(e.st, e.rdb, g, testConfig(cfg), nil, e.metrics)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc, g
}

// lease holds machine's MsgId lease for the test, as a running logic
// does: client msg_ids of machine ids without one are replaced.
func (e *env) lease(t testing.TB, machine int) {
	t.Helper()
	key := rediskey.MachineLease(machine)
	if err := e.rdb.Set(context.Background(), key, "test", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.rdb.Del(context.Background(), key) })
}

func (e *env) users(t testing.TB, n int) []int64 {
	t.Helper()
	out := make([]int64, n)
	for i := range out {
		out[i] = testenv.RandomUserID()
		if err := e.st.EnsureUser(context.Background(), out[i], time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// jobs counts the deliver jobs queued for msgID.
func (e *env) jobs(t *testing.T, conv, msgID int64) int {
	t.Helper()
	msgs, err := e.rdb.XRange(context.Background(), rediskey.Deliver(rediskey.Partition(conv, partitions)), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range msgs {
		if j, err := queue.Decode(m); err == nil && j.MsgId == msgID {
			n++
			if len(j.Recipients) != 2 || j.ConversationId != conv {
				t.Errorf("job %+v", j)
			}
		}
	}
	return n
}

// ackIDs reads the conversation and message ids of an encoded SEND_ACK.
func ackIDs(t *testing.T, ack []byte) (conv, msgID int64) {
	t.Helper()
	var a struct {
		MsgID          json.Number `json:"msg_id"`
		ConversationID json.Number `json:"conversation_id"`
	}
	if err := json.Unmarshal(ack, &a); err != nil {
		t.Fatal(err)
	}
	conv, _ = a.ConversationID.Int64()
	msgID, _ = a.MsgID.Int64()
	return conv, msgID
}

func body(kv ...any) []byte {
	m := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	return b
}

func text(s string) map[string]any { return map[string]any{"t": 1, "text": s} }

func code(err error) errcode.Code {
	c, _ := errcode.Of(err)
	return c
}

func TestSendValidation(t *testing.T) {
	e := newEnv(t)
	svc, _ := e.service(t, 21, message.Config{})
	u := e.users(t, 3)
	a, b, c := u[0], u[1], u[2]
	ctx := context.Background()
	from := message.Sender{UserID: a, DeviceID: "d1"}
	// a conversation between b and c, which a is not part of
	if _, err := svc.Send(ctx, message.Sender{UserID: b, DeviceID: "d"}, sendReq(body("to_user_id", fmt.Sprint(c), "client_msg_id", "x", "message_type", 1, "content", text("hi")))); err != nil {
		t.Fatal(err)
	}
	bc, err := e.st.FindP2P(ctx, b, c)
	if err != nil {
		t.Fatal(err)
	}
	big := map[string]any{"t": 1, "text": strings.Repeat("x", 70_000)}
	tests := []struct {
		name string
		body []byte
		want errcode.Code
	}{
		{"no target", body("client_msg_id", "c1", "message_type", 1, "content", text("x")), errcode.InvalidArgument},
		{"two targets", body("to_user_id", b, "conversation_id", bc, "client_msg_id", "c1", "message_type", 1, "content", text("x")), errcode.InvalidArgument},
		{"unknown group", body("group_id", "5", "client_msg_id", "c1", "message_type", 1, "content", text("x")), errcode.NotFound},
		{"to self", body("to_user_id", a, "client_msg_id", "c1", "message_type", 1, "content", text("x")), errcode.InvalidArgument},
		{"negative user", body("to_user_id", -3, "client_msg_id", "c1", "message_type", 1, "content", text("x")), errcode.InvalidArgument},
		{"unknown recipient", body("to_user_id", testenv.RandomUserID(), "client_msg_id", "c1", "message_type", 1, "content", text("x")), errcode.Forbidden},
		{"missing client_msg_id", body("to_user_id", b, "message_type", 1, "content", text("x")), errcode.InvalidArgument},
		{"client_msg_id with space", body("to_user_id", b, "client_msg_id", "a b", "message_type", 1, "content", text("x")), errcode.InvalidArgument},
		{"type mismatch", body("to_user_id", b, "client_msg_id", "c1", "message_type", 2, "content", text("x")), errcode.InvalidArgument},
		{"content not an object", body("to_user_id", b, "client_msg_id", "c1", "message_type", 1, "content", "hi"), errcode.InvalidArgument},
		{"content too large", body("to_user_id", b, "client_msg_id", "c1", "message_type", 1, "content", big), errcode.TooLarge},
		{"not a member", body("conversation_id", fmt.Sprint(bc), "client_msg_id", "c1", "message_type", 1, "content", text("x")), errcode.Forbidden},
		{"no such conversation", body("conversation_id", "12345", "client_msg_id", "c1", "message_type", 1, "content", text("x")), errcode.NotFound},
		{"ok by user id", body("to_user_id", fmt.Sprint(b), "client_msg_id", "c1", "message_type", 1, "content", text("x")), errcode.OK},
		{"ok as number", body("to_user_id", b, "client_msg_id", "c2", "message_type", 1, "content", text("x")), errcode.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := svc.Send(ctx, from, sendReq(tt.body))
			if got := code(err); got != tt.want {
				t.Fatalf("code %s (%v), want %s", got, err, tt.want)
			}
		})
	}
	ab, err := e.st.FindP2P(ctx, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Send(ctx, from, sendReq(body("conversation_id", fmt.Sprint(ab), "client_msg_id", "c3", "message_type", 1, "content", text("x")))); err != nil {
		t.Fatalf("send by conversation id: %v", err)
	}
}

func TestSendIdempotency(t *testing.T) {
	e := newEnv(t)
	svc, _ := e.service(t, 23, message.Config{})
	u := e.users(t, 2)
	ctx := context.Background()
	from := message.Sender{UserID: u[0], DeviceID: "phone"}
	first := body("to_user_id", u[1], "client_msg_id", "k1", "message_type", 1, "content", text("hello"))
	// same content, different JSON spelling: canonical bytes are equal
	spaced := []byte(fmt.Sprintf(`{"to_user_id":"%d","client_msg_id":"k1","message_type":1,"content":{ "t" : 1, "text":"hello" }}`, u[1]))
	tests := []struct {
		name string
		body []byte
		want errcode.Code
	}{
		{"first send", first, errcode.OK},
		{"retry", first, errcode.OK},
		{"retry 3", first, errcode.OK},
		{"retry 4", first, errcode.OK},
		{"retry with other whitespace", spaced, errcode.OK},
		{"different content", body("to_user_id", u[1], "client_msg_id", "k1", "message_type", 1, "content", text("other")), errcode.Conflict},
		{"different type", body("to_user_id", u[1], "client_msg_id", "k1", "message_type", 5, "content", map[string]any{"t": 5, "text": "hello"}), errcode.Conflict},
	}
	var acks [][]byte
	for _, tt := range tests {
		ack, err := svc.Send(ctx, from, sendReq(tt.body))
		if got := code(err); got != tt.want {
			t.Fatalf("%s: code %s (%v), want %s", tt.name, got, err, tt.want)
		}
		if err == nil {
			b, _ := json.Marshal(clientwire.SendAck(ack))
			acks = append(acks, b)
		}
	}
	for i := range acks {
		if !bytes.Equal(acks[i], acks[0]) {
			t.Fatalf("ack %d = %s, want %s", i, acks[i], acks[0])
		}
	}
	conv, id := ackIDs(t, acks[0])
	var rows int
	if err := e.st.DB().Get(&rows, "SELECT COUNT(*) FROM t_messages WHERE conversation_id = ?", conv); err != nil || rows != 1 {
		t.Fatalf("%d rows (%v), want 1", rows, err)
	}
	if n := e.jobs(t, conv, id); n != len(acks) {
		t.Fatalf("%d jobs queued, want one per successful send (%d)", n, len(acks))
	}
}

func TestSendConcurrentIdentical(t *testing.T) {
	e := newEnv(t)
	u := e.users(t, 2)
	svcs := []*message.Service{}
	for _, m := range []int{24, 25} {
		s, _ := e.service(t, m, message.Config{})
		svcs = append(svcs, s)
	}
	ctx := context.Background()
	// the conversation exists, so all senders race on the message insert
	if _, err := svcs[0].Send(ctx, message.Sender{UserID: u[1], DeviceID: "d"}, sendReq(body("to_user_id", u[0], "client_msg_id", "warm", "message_type", 1, "content", text("x")))); err != nil {
		t.Fatal(err)
	}
	const n = 20
	acks := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ack, err := svcs[i%2].Send(ctx, message.Sender{UserID: u[0], DeviceID: "d"},
				sendReq(body("to_user_id", u[1], "client_msg_id", "same", "message_type", 1, "content", text("once"))))
			errs[i] = err
			if err == nil {
				b, _ := json.Marshal(clientwire.SendAck(ack))
				acks[i] = string(b)
			}
		}()
	}
	close(start)
	wg.Wait()
	for i := range errs {
		if errs[i] != nil {
			t.Fatalf("send %d: %v", i, errs[i])
		}
		if acks[i] != acks[0] {
			t.Fatalf("ack %d = %s, want %s", i, acks[i], acks[0])
		}
	}
	var rows int
	if err := e.st.DB().Get(&rows, "SELECT COUNT(*) FROM t_messages WHERE sender_id = ? AND client_msg_id = 'same'", u[0]); err != nil || rows != 1 {
		t.Fatalf("%d rows (%v), want 1", rows, err)
	}
}

// Two logic processes (different machine ids) send into one conversation
// at once; a reader polling id > cursor must see every message.
func TestSendOrderAcrossGenerators(t *testing.T) {
	e := newEnv(t)
	u := e.users(t, 2)
	ctx := context.Background()
	var svcs []*message.Service
	for _, m := range []int{1023, 1} { // the higher machine id issues higher ids in the same ms
		s, _ := e.service(t, m, message.Config{})
		svcs = append(svcs, s)
	}
	if _, err := svcs[0].Send(ctx, message.Sender{UserID: u[0], DeviceID: "d"}, sendReq(body("to_user_id", u[1], "client_msg_id", "first", "message_type", 1, "content", text("x")))); err != nil {
		t.Fatal(err)
	}
	conv, err := e.st.FindP2P(ctx, u[0], u[1])
	if err != nil {
		t.Fatal(err)
	}
	const perSender = 60
	stop := make(chan struct{})
	seen := map[int64]bool{}
	var cursor int64
	poll := func() {
		_, rows, err := e.st.ConversationPage(ctx, conv, cursor, 1000)
		if err != nil {
			t.Error(err)
			return
		}
		for _, r := range rows {
			if r.ID <= cursor {
				t.Errorf("id %d not above cursor %d", r.ID, cursor)
			}
			seen[r.ID] = true
			cursor = r.ID
		}
	}
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		for {
			select {
			case <-stop:
				return
			default:
				poll()
			}
		}
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[int64]bool{}
	for s := 0; s < 4; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sender := u[s%2]
			peer := u[1-s%2]
			for i := 0; i < perSender; i++ {
				b := body("to_user_id", peer, "client_msg_id", fmt.Sprintf("s%d-%d", s, i), "message_type", 1, "content", text("m"))
				if s >= 2 { // half the senders address the conversation directly
					b = body("conversation_id", fmt.Sprint(conv), "client_msg_id", fmt.Sprintf("s%d-%d", s, i), "message_type", 1, "content", text("m"))
				}
				ack, err := svcs[s%2].Send(ctx, message.Sender{UserID: sender, DeviceID: fmt.Sprint("dev", s)}, sendReq(b))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked[ack.MsgID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-pollDone
	poll()
	_, all, err := e.st.ConversationPage(ctx, conv, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4*perSender+1 {
		t.Fatalf("%d rows, want %d", len(all), 4*perSender+1)
	}
	for _, r := range all {
		if !seen[r.ID] {
			t.Fatalf("the polling reader skipped msg %d (committed below its cursor)", r.ID)
		}
	}
	for id := range acked {
		if !seen[id] {
			t.Fatalf("acked msg %d never seen", id)
		}
	}
	var last int64
	if err := e.st.DB().Get(&last, "SELECT last_msg_id FROM t_conversations WHERE id = ?", conv); err != nil || last != all[len(all)-1].ID {
		t.Fatalf("last_msg_id %d (%v), want %d", last, err, all[len(all)-1].ID)
	}
	machines := map[int]bool{}
	for _, r := range all {
		machines[msgid.MachineOf(r.ID)] = true
	}
	if len(machines) != 2 {
		t.Fatalf("ids came from machines %v, want both", machines)
	}
}

func TestSendClientMsgID(t *testing.T) {
	e := newEnv(t)
	svc, gen := e.service(t, 26, message.Config{})
	u := e.users(t, 2)
	ctx := context.Background()
	from := message.Sender{UserID: u[0], DeviceID: "d"}
	early, _ := gen.Next(ctx)
	fresh, _ := gen.Next(ctx)
	// a GENERATE_MSG_ID id is kept
	ack, err := svc.Send(ctx, from, sendReq(body("to_user_id", u[1], "client_msg_id", "a", "msg_id", fmt.Sprint(fresh), "message_type", 1, "content", text("x"))))
	if err != nil || ack.MsgID != fresh {
		t.Fatalf("ack %+v (%v), want msg id %d kept", ack, err, fresh)
	}
	old := int64(1) << 22 // issued at the epoch: outside the window
	future, _ := gen.Next(ctx)
	soon := future + int64(2*time.Second/time.Millisecond)<<22
	future += int64(time.Minute/time.Millisecond) << 22

	tests := []struct {
		name string
		id   int64
	}{
		{"below last_msg_id", early},
		{"outside the window", old},
		{"reused", fresh},
		{"ahead of the clock", future},
		{"2 s ahead of the clock", soon},
	}
	for i, tt := range tests {
		ack, err := svc.Send(ctx, from, sendReq(body("to_user_id", u[1], "client_msg_id", fmt.Sprint("b", i), "msg_id", fmt.Sprint(tt.id), "message_type", 1, "content", text("x"))))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if ack.MsgID == tt.id || ack.MsgID <= fresh {
			t.Fatalf("%s: got msg id %d, want a new one above %d", tt.name, ack.MsgID, fresh)
		}
	}

	// Only the lease differs: into new conversations (no last id to be
	// below), a fresh id of this leased machine id is kept, one of a
	// machine id without a lease is replaced.
	unleased, err := msgid.New(ctx, msgid.Settings{MachineID: 901})
	if err != nil {
		t.Fatal(err)
	}
	w := e.users(t, 2)
	mine, _ := gen.Next(ctx)
	foreign, _ := unleased.Next(ctx)
	for _, c := range []struct {
		name string
		to   int64
		id   int64
		keep bool
	}{{"leased machine id", w[0], mine, true}, {"machine id without a lease", w[1], foreign, false}} {
		ack, err := svc.Send(ctx, from, sendReq(body("to_user_id", c.to, "client_msg_id", "l", "msg_id", fmt.Sprint(c.id), "message_type", 1, "content", text("x"))))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if kept := ack.MsgID == c.id; kept != c.keep {
			t.Fatalf("%s: id %d kept %v, want %v", c.name, c.id, kept, c.keep)
		}
	}
}

// Concurrent sends into one conversation through two logic processes,
// some carrying a client msg_id 2 s ahead of the clock or one of a machine
// id without a lease: those ids are replaced (the SEND_ACK carries the
// one that counts), every sender's ids keep increasing, and no id was
// dragged ahead of the clock by them, so no later send has anything to
// wait for.
func TestSendClientMsgIDConcurrent(t *testing.T) {
	e := newEnv(t)
	u := e.users(t, 2)
	ctx := context.Background()
	var svcs []*message.Service
	var gens []*msgid.Generator
	for _, m := range []int{36, 37} {
		s, g := e.service(t, m, message.Config{})
		svcs, gens = append(svcs, s), append(gens, g)
	}
	unleased, err := msgid.New(ctx, msgid.Settings{MachineID: 902})
	if err != nil {
		t.Fatal(err)
	}
	const senders, each = 6, 16
	type sent struct {
		client, got int64
		mustReplace bool
	}
	results := make([][]sent, senders)
	var wg sync.WaitGroup
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from, to := u[g%2], u[1-g%2]
			for k := 0; k < each; k++ {
				var client int64
				mustReplace := false
				switch k % 4 {
				case 1: // fresh from this logic's generator: may be kept
					client, _ = gens[g%2].Next(ctx)
				case 2: // 2 s ahead of the clock
					id, _ := gens[g%2].Next(ctx)
					client, mustReplace = id+int64(2000)<<22, true
				case 3: // issued by a machine id this cluster has not leased
					client, _ = unleased.Next(ctx)
					mustReplace = true
				}
				kv := []any{"to_user_id", to, "client_msg_id", fmt.Sprintf("g%d-%d", g, k), "message_type", 1, "content", text("m")}
				if client != 0 {
					kv = append(kv, "msg_id", fmt.Sprint(client))
				}
				ack, err := svcs[g%2].Send(ctx, message.Sender{UserID: from, DeviceID: fmt.Sprint("dev", g)}, sendReq(body(kv...)))
				if err != nil {
					t.Error(err)
					return
				}
				results[g] = append(results[g], sent{client: client, got: ack.MsgID, mustReplace: mustReplace})
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	conv, err := e.st.FindP2P(ctx, u[0], u[1])
	if err != nil {
		t.Fatal(err)
	}
	replaced := 0
	for g, rs := range results {
		for k, r := range rs {
			if r.mustReplace {
				if r.got == r.client {
					t.Fatalf("sender %d send %d: client id %d kept", g, k, r.client)
				}
				replaced++
			}
			if k > 0 && r.got <= rs[k-1].got {
				t.Fatalf("sender %d: id %d after %d", g, r.got, rs[k-1].got)
			}
		}
	}
	_, all, err := e.st.ConversationPage(ctx, conv, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != senders*each {
		t.Fatalf("%d rows, want %d", len(all), senders*each)
	}
	newest := all[len(all)-1].ID
	var last int64
	if err := e.st.DB().Get(&last, "SELECT last_msg_id FROM t_conversations WHERE id = ?", conv); err != nil || last != newest {
		t.Fatalf("last_msg_id %d (%v), want %d", last, err, newest)
	}
	if ahead := time.Until(msgid.TimeOf(newest)); ahead > 500*time.Millisecond {
		t.Fatalf("the newest id is %v ahead of the clock: a replaced id dragged the conversation ahead", ahead)
	}
	t.Logf("%d sends, %d client ids replaced", senders*each, replaced)
}

// TestSendSpreadsOneLogicsConversationsOverThePartitions sends from one
// logic (one machine id) into 64 new conversations: their ids share their
// low bits, and their deliver jobs must still land on most partitions
// (decision 77), each on the stream its conversation maps to. With the
// id itself modulo the partition count they all landed on one.
func TestSendSpreadsOneLogicsConversationsOverThePartitions(t *testing.T) {
	e := newEnv(t)
	svc, _ := e.service(t, 29, message.Config{})
	u := e.users(t, 65)
	ctx := context.Background()
	from := message.Sender{UserID: u[0], DeviceID: "phone"}
	used := map[int]int{}
	for i, peer := range u[1:] {
		ack, err := svc.Send(ctx, from, sendReq(body("to_user_id", peer, "client_msg_id", fmt.Sprintf("spread-%d", i),
			"message_type", 1, "content", text("hi"))))
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		b, _ := json.Marshal(clientwire.SendAck(ack))
		conv, id := ackIDs(t, b)
		if n := e.jobs(t, conv, id); n != 1 {
			t.Fatalf("send %d: %d jobs on conversation %d's partition, want 1", i, n, conv)
		}
		used[rediskey.Partition(conv, partitions)]++
	}
	if len(used) < partitions/2 {
		t.Fatalf("64 conversations of one logic used %d of %d partitions (%v), want at least %d",
			len(used), partitions, used, partitions/2)
	}
}
