package message_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sparkim/spark/logic/internal/clientwire"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/metrics"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/msgid"
)

// paused returns a service whose committer starts only when start is
// called, with its own metrics.
func (e *env) paused(t *testing.T, machine int, cfg message.Config) (svc *message.Service, gen *msgid.Generator, m *metrics.Metrics, start func(), queued func() int) {
	t.Helper()
	gen, err := msgid.New(context.Background(), msgid.Settings{MachineID: machine, Store: store.NewHighWater(e.hw)})
	if err != nil {
		t.Fatal(err)
	}
	e.lease(t, machine)
	m = metrics.New(nil)
	svc, start, queued, err = message.NewPaused(e.st, e.rdb, gen, testConfig(cfg), nil, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc, gen, m, start, queued
}

type sendResult struct {
	ack *message.Ack
	err error
}

type batchSend struct {
	from message.Sender
	body []byte
}

// sendBatch submits sends one at a time (each queued before the next, so
// the arrival order is the slice order), then starts the committer so they
// form one batch, and returns each send's result.
func sendBatch(t *testing.T, svc *message.Service, start func(), queued func() int, sends []batchSend) []sendResult {
	t.Helper()
	out := make([]sendResult, len(sends))
	var wg sync.WaitGroup
	for i, s := range sends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].ack, out[i].err = svc.Send(context.Background(), s.from, sendReq(s.body))
		}()
		deadline := time.Now().Add(5 * time.Second)
		for queued() < i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("send %d never queued", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	start()
	wg.Wait()
	return out
}

func batchCommits(m *metrics.Metrics, result string) int {
	return int(testutil.ToFloat64(m.SendCommits.WithLabelValues(result)))
}

// Sends of different senders and devices into one conversation in one
// batch get increasing ids in arrival order, client msg_ids kept or
// replaced by the same rules as one send at a time, in one transaction.
func TestSendBatchArrivalOrder(t *testing.T) {
	e := newEnv(t)
	u := e.users(t, 3)
	a, b, c := u[0], u[1], u[2]
	ctx := context.Background()
	warm, _ := e.service(t, 30, message.Config{})
	for _, p := range [][2]int64{{a, b}, {a, c}} {
		if _, err := warm.Send(ctx, message.Sender{UserID: p[0], DeviceID: "w"}, sendReq(body("to_user_id", p[1], "client_msg_id", "warm", "message_type", 1, "content", text("x")))); err != nil {
			t.Fatal(err)
		}
	}
	ab, _ := e.st.FindP2P(ctx, a, b)
	ac, _ := e.st.FindP2P(ctx, a, c)
	svc, gen, m, start, queued := e.paused(t, 31, message.Config{CommitWorkers: 1})
	early, _ := gen.Next(ctx)
	// kept1 opens the conversation's part of the batch, so it is above
	// the stored last id, and the generator's later ids are above it;
	// ahead, 2 s ahead of the clock, would be above them but is further
	// ahead than clock skew, and is replaced.
	kept1, _ := gen.Next(ctx)
	ahead := kept1 + (2000 << 22)
	send := func(from, to int64, dev, cid string, msgID int64) batchSend {
		kv := []any{"to_user_id", to, "client_msg_id", cid, "message_type", 1, "content", text(cid)}
		if msgID != 0 {
			kv = append(kv, "msg_id", fmt.Sprint(msgID))
		}
		return batchSend{message.Sender{UserID: from, DeviceID: dev}, body(kv...)}
	}
	tests := []struct {
		name string
		send batchSend
		conv int64
		// keep: the ack must carry this client msg_id; replace: it must not.
		keep, replace int64
	}{
		{"b phone, client id kept", send(b, a, "phone", "1", kept1), ab, kept1, 0},
		{"a phone", send(a, b, "phone", "2", 0), ab, 0, 0},
		{"a to c", send(a, c, "phone", "3", 0), ac, 0, 0},
		{"a laptop, client id below the running last", send(a, b, "laptop", "4", early), ab, 0, early},
		{"c to a", send(c, a, "phone", "5", 0), ac, 0, 0},
		{"a phone again", send(a, b, "phone", "6", 0), ab, 0, 0},
		{"b laptop, client id 2 s ahead", send(b, a, "laptop", "7", ahead), ab, 0, ahead},
	}
	sends := make([]batchSend, len(tests))
	for i, tt := range tests {
		sends[i] = tt.send
	}
	res := sendBatch(t, svc, start, queued, sends)
	last := map[int64]int64{}
	for i, tt := range tests {
		r := res[i]
		if r.err != nil {
			t.Fatalf("%s: %v", tt.name, r.err)
		}
		id := r.ack.MsgID
		if r.ack.ConversationID != tt.conv {
			t.Fatalf("%s: conversation %d, want %d", tt.name, r.ack.ConversationID, tt.conv)
		}
		if id <= last[tt.conv] {
			t.Fatalf("%s: id %d not above the previous arrival's %d", tt.name, id, last[tt.conv])
		}
		if tt.keep != 0 && id != tt.keep {
			t.Fatalf("%s: id %d, want the client's %d", tt.name, id, tt.keep)
		}
		if tt.replace != 0 && id == tt.replace {
			t.Fatalf("%s: client id %d kept below the running last", tt.name, id)
		}
		last[tt.conv] = id
		if n := e.jobs(t, tt.conv, id); n != 1 {
			t.Fatalf("%s: %d jobs", tt.name, n)
		}
	}
	if got := batchCommits(m, "ok"); got != 1 {
		t.Fatalf("%d transactions, want the batch in one", got)
	}
	for _, conv := range []int64{ab, ac} {
		var lastID int64
		if err := e.st.DB().Get(&lastID, "SELECT last_msg_id FROM t_conversations WHERE id = ?", conv); err != nil || lastID != last[conv] {
			t.Fatalf("conversation %d: last_msg_id %d (%v), want %d", conv, lastID, err, last[conv])
		}
	}
}

// A batch that the database refuses (a duplicate client_msg_id or MsgId)
// is committed one send at a time, with the answers of the single-send
// path: one row and the original ack for identical sends, 40901 for the
// same client_msg_id with other content, a new id for a reused msg_id; the
// other sends of the batch succeed.
func TestSendBatchDuplicateFallsBack(t *testing.T) {
	tests := []struct {
		name string
		// dup builds the two clashing sends; want are their codes.
		dup       func(a, b, c int64, id int64) [2]batchSend
		want      [2]errcode.Code
		sameAck   bool
		rowsOfDup int // rows with client_msg_id "dup" sent by a
	}{
		{
			name: "identical sends from two devices",
			dup: func(a, b, _ int64, _ int64) [2]batchSend {
				return [2]batchSend{
					{message.Sender{UserID: a, DeviceID: "phone"}, body("to_user_id", b, "client_msg_id", "dup", "message_type", 1, "content", text("same"))},
					{message.Sender{UserID: a, DeviceID: "laptop"}, body("to_user_id", b, "client_msg_id", "dup", "message_type", 1, "content", text("same"))},
				}
			},
			want: [2]errcode.Code{errcode.OK, errcode.OK}, sameAck: true, rowsOfDup: 1,
		},
		{
			name: "same client_msg_id, other content",
			dup: func(a, b, _ int64, _ int64) [2]batchSend {
				return [2]batchSend{
					{message.Sender{UserID: a, DeviceID: "phone"}, body("to_user_id", b, "client_msg_id", "dup", "message_type", 1, "content", text("one"))},
					{message.Sender{UserID: a, DeviceID: "laptop"}, body("to_user_id", b, "client_msg_id", "dup", "message_type", 1, "content", text("two"))},
				}
			},
			// the two commit concurrently: either may be first
			want: [2]errcode.Code{errcode.OK, errcode.Conflict}, rowsOfDup: 1,
		},
		{
			name: "one client msg_id into two conversations",
			dup: func(a, b, c int64, id int64) [2]batchSend {
				return [2]batchSend{
					{message.Sender{UserID: a, DeviceID: "phone"}, body("to_user_id", b, "client_msg_id", "dup", "msg_id", fmt.Sprint(id), "message_type", 1, "content", text("x"))},
					{message.Sender{UserID: a, DeviceID: "phone"}, body("to_user_id", c, "client_msg_id", "dup", "msg_id", fmt.Sprint(id), "message_type", 1, "content", text("x"))},
				}
			},
			want: [2]errcode.Code{errcode.OK, errcode.OK}, rowsOfDup: 2,
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			u := e.users(t, 3)
			a, b, c := u[0], u[1], u[2]
			ctx := context.Background()
			warm, _ := e.service(t, 40+i, message.Config{})
			for _, p := range [][2]int64{{a, b}, {a, c}} {
				if _, err := warm.Send(ctx, message.Sender{UserID: p[1], DeviceID: "w"}, sendReq(body("to_user_id", p[0], "client_msg_id", "warm", "message_type", 1, "content", text("x")))); err != nil {
					t.Fatal(err)
				}
			}
			svc, gen, m, start, queued := e.paused(t, 50+i, message.Config{CommitWorkers: 1})
			id, _ := gen.Next(ctx)
			d := tt.dup(a, b, c, id)
			// each clashing send comes first in its conversation, so a
			// client msg_id is still above the running last id
			sends := []batchSend{
				d[0],
				{message.Sender{UserID: b, DeviceID: "phone"}, body("to_user_id", a, "client_msg_id", "other1", "message_type", 1, "content", text("o"))},
				d[1],
				{message.Sender{UserID: c, DeviceID: "phone"}, body("to_user_id", a, "client_msg_id", "other2", "message_type", 1, "content", text("o"))},
			}
			res := sendBatch(t, svc, start, queued, sends)
			for _, k := range []int{1, 3} {
				if res[k].err != nil {
					t.Fatalf("innocent send %d: %v", k, res[k].err)
				}
			}
			got := []string{string(code(res[0].err)), string(code(res[2].err))}
			want := []string{string(tt.want[0]), string(tt.want[1])}
			sort.Strings(got)
			sort.Strings(want)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("clashing sends: codes %v (%v, %v), want %v", got, res[0].err, res[2].err, want)
			}
			if tt.sameAck {
				x, _ := json.Marshal(clientwire.SendAck(res[0].ack))
				y, _ := json.Marshal(clientwire.SendAck(res[2].ack))
				if string(x) != string(y) {
					t.Fatalf("acks %s and %s differ", x, y)
				}
			} else if res[0].err == nil && res[2].err == nil && res[0].ack.MsgID == res[2].ack.MsgID {
				t.Fatalf("both sends got msg id %d", res[0].ack.MsgID)
			}
			var rows int
			if err := e.st.DB().Get(&rows, "SELECT COUNT(*) FROM t_messages WHERE sender_id = ? AND client_msg_id = 'dup'", a); err != nil || rows != tt.rowsOfDup {
				t.Fatalf("%d rows (%v), want %d", rows, err, tt.rowsOfDup)
			}
			if got := batchCommits(m, "fallback"); got != 1 {
				t.Fatalf("%d fallbacks, want 1", got)
			}
		})
	}
}

// The store's batch: a conversation that does not exist is left out, the
// others commit.
func TestInsertMessagesMissingConversation(t *testing.T) {
	e := newEnv(t)
	u := e.users(t, 2)
	ctx := context.Background()
	warm, gen := e.service(t, 60, message.Config{})
	if _, err := warm.Send(ctx, message.Sender{UserID: u[0], DeviceID: "w"}, sendReq(body("to_user_id", u[1], "client_msg_id", "warm", "message_type", 1, "content", text("x")))); err != nil {
		t.Fatal(err)
	}
	conv, _ := e.st.FindP2P(ctx, u[0], u[1])
	nm := func(conv int64, cid string) store.NewMessage {
		return store.NewMessage{ConversationID: conv, SenderID: u[0], SenderDevice: "d", ClientMsgID: cid, MessageType: 1, Content: []byte(`{"t":1}`)}
	}
	res, err := e.st.InsertMessages(ctx, []store.NewMessage{nm(conv, "1"), nm(12345, "2"), nm(conv, "3")},
		func(ctx context.Context, _ int, last int64, _ time.Time) (int64, error) {
			return gen.NextAfter(ctx, last)
		})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.Missing) != "[false true false]" {
		t.Fatalf("missing %v", res.Missing)
	}
	if !(res.Rows[0].ID < res.Rows[2].ID) {
		t.Fatalf("ids %d, %d not increasing", res.Rows[0].ID, res.Rows[2].ID)
	}
	var last int64
	if err := e.st.DB().Get(&last, "SELECT last_msg_id FROM t_conversations WHERE id = ?", conv); err != nil || last != res.Rows[2].ID {
		t.Fatalf("last_msg_id %d (%v), want %d", last, err, res.Rows[2].ID)
	}
}

// Many senders through two logic processes (different machine ids, group
// commit with 4 workers each) into 4 conversations while a reader polls
// id > cursor per conversation: the reader never skips a message (ids
// increase in commit order), and every message is there.
func TestSendBatchConcurrentOrder(t *testing.T) {
	tests := []struct {
		name             string
		goroutines, each int
		workers          int
		// batched: transactions must be fewer than messages.
		batched bool
	}{
		{"8 senders x 200, 4 workers", 8, 200, 4, false},
		{"48 senders x 25, 2 workers: batches form", 48, 25, 2, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			u := e.users(t, 8)
			ctx := context.Background()
			var svcs []*message.Service
			var ms []*metrics.Metrics
			for _, machine := range []int{1023 - i, 1 + i} { // the higher machine id issues higher ids in the same ms
				m := metrics.New(nil)
				g, err := msgid.New(ctx, msgid.Settings{MachineID: machine, Store: store.NewHighWater(e.hw)})
				if err != nil {
					t.Fatal(err)
				}
				s, err := message.New(e.st, e.rdb, g, testConfig(message.Config{CommitWorkers: tt.workers}), nil, m)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				svcs, ms = append(svcs, s), append(ms, m)
			}
			convs := make([]int64, 4)
			for c := range convs {
				if _, err := svcs[0].Send(ctx, message.Sender{UserID: u[2*c], DeviceID: "w"}, sendReq(body("to_user_id", u[2*c+1], "client_msg_id", "warm", "message_type", 1, "content", text("x")))); err != nil {
					t.Fatal(err)
				}
				var err error
				if convs[c], err = e.st.FindP2P(ctx, u[2*c], u[2*c+1]); err != nil {
					t.Fatal(err)
				}
			}
			warmCommits := batchCommits(ms[0], "ok")

			stop := make(chan struct{})
			seen := map[int64]bool{}
			cursor := make([]int64, len(convs))
			poll := func() {
				for c, conv := range convs {
					_, rows, err := e.st.ConversationPage(ctx, conv, cursor[c], 1000)
					if err != nil {
						t.Error(err)
						return
					}
					for _, r := range rows {
						seen[r.ID] = true
						cursor[c] = r.ID
					}
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
			for g := 0; g < tt.goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := g % len(convs)
					side := (g / len(convs)) % 2
					from, to := u[2*c+side], u[2*c+1-side]
					for k := 0; k < tt.each; k++ {
						_, err := svcs[g%2].Send(ctx, message.Sender{UserID: from, DeviceID: fmt.Sprint("dev", g)},
							sendReq(body("to_user_id", to, "client_msg_id", fmt.Sprintf("g%d-%d", g, k), "message_type", 1, "content", text("m"))))
						if err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(stop)
			<-pollDone
			poll()
			total := 0
			for _, conv := range convs {
				_, all, err := e.st.ConversationPage(ctx, conv, 0, 100000)
				if err != nil {
					t.Fatal(err)
				}
				total += len(all)
				for _, r := range all {
					if !seen[r.ID] {
						t.Fatalf("the polling reader skipped msg %d of conversation %d (committed below its cursor)", r.ID, conv)
					}
				}
				var last int64
				if err := e.st.DB().Get(&last, "SELECT last_msg_id FROM t_conversations WHERE id = ?", conv); err != nil || last != all[len(all)-1].ID {
					t.Fatalf("last_msg_id %d (%v), want %d", last, err, all[len(all)-1].ID)
				}
			}
			sent := tt.goroutines * tt.each
			if total != sent+len(convs) {
				t.Fatalf("%d rows, want %d", total, sent+len(convs))
			}
			commits := batchCommits(ms[0], "ok") - warmCommits + batchCommits(ms[1], "ok")
			fallbacks := batchCommits(ms[0], "fallback") + batchCommits(ms[1], "fallback")
			t.Logf("%d messages in %d transactions (%d fallbacks)", sent, commits, fallbacks)
			if tt.batched && commits >= sent {
				t.Fatalf("%d transactions for %d messages: no batch formed", commits, sent)
			}
		})
	}
}

// The service builds from the validated defaults alone and runs what
// production runs; a value the config refuses (commit_workers 0, once
// turned into 4 here) is refused, not replaced.
func TestNewFromDefaults(t *testing.T) {
	c, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	gen, err := msgid.New(context.Background(), msgid.Settings{MachineID: 36})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := message.New(nil, nil, gen, message.ConfigFrom(c), nil, nil)
	if err != nil {
		t.Fatalf("New from the loaded defaults: %v", err)
	}
	svc.Close()
	for _, tt := range []struct {
		name   string
		change func(*message.Config)
	}{
		{"zero Config", func(m *message.Config) { *m = message.Config{} }},
		{"commit_workers 0", func(m *message.Config) { m.CommitWorkers = 0 }},
		{"commit_batch 0", func(m *message.Config) { m.CommitBatch = 0 }},
		{"enqueue_retries 0", func(m *message.Config) { m.EnqueueRetries = 0 }},
		{"recall_window 0", func(m *message.Config) { m.RecallWindow = 0 }},
		{"max_frame_size 0", func(m *message.Config) { m.MaxFrameSize = 0 }},
	} {
		mc := message.ConfigFrom(c)
		tt.change(&mc)
		if _, err := message.New(nil, nil, gen, mc, nil, nil); err == nil {
			t.Errorf("%s accepted", tt.name)
		}
	}
}

// A lone send is not held back to form a batch: it commits in a batch of
// its own and is answered while no other send exists (a committer that
// waited for company, for a count or a timer's worth, would hold it). Sends
// that arrive while a batch commits form the next batch together: batches
// form by waiting for the previous commit.
func TestSendLoneNotDelayed(t *testing.T) {
	e := newEnv(t)
	u := e.users(t, 2)
	ctx := context.Background()
	svc, _, m, start, queued := e.paused(t, 33, message.Config{CommitWorkers: 1})
	var (
		mu    sync.Mutex
		sizes []int
		hold  chan struct{} // when set, the next batch waits for it to close
	)
	message.OnBatch(svc, func(n int) {
		mu.Lock()
		sizes = append(sizes, n)
		h := hold
		hold = nil
		mu.Unlock()
		if h != nil {
			<-h
		}
	})
	start()
	send := func(cid string) (*message.Ack, error) {
		return svc.Send(ctx, message.Sender{UserID: u[0], DeviceID: "d"}, sendReq(body("to_user_id", u[1], "client_msg_id", cid, "message_type", 1, "content", text(cid))))
	}
	batches := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), sizes...)
	}

	// Alone, twice: each is answered before the next exists.
	for _, cid := range []string{"lone1", "lone2"} {
		if _, err := send(cid); err != nil {
			t.Fatalf("%s: %v", cid, err)
		}
	}
	if got := fmt.Sprint(batches()); got != "[1 1]" {
		t.Fatalf("batches %s, want [1 1]: each lone send in its own batch", got)
	}

	// A batch in flight (held at its start); three sends arrive meanwhile
	// and go together in the next one.
	release := make(chan struct{})
	mu.Lock()
	hold = release
	mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = send(fmt.Sprint("busy", i))
		}()
		if i == 0 { // the held batch has taken it
			for len(batches()) < 3 {
				time.Sleep(time.Millisecond)
			}
		}
	}
	for queued() < 3 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if got := fmt.Sprint(batches()); got != "[1 1 1 3]" {
		t.Fatalf("batches %s, want [1 1 1 3]", got)
	}
	if got := batchCommits(m, "ok"); got != 4 {
		t.Fatalf("%d transactions, want 4", got)
	}
}

// Retries inside a batch are answered from the batch's one idempotency
// lookup: the original ack (and a new job) for a retry, 40901 for a reused
// client_msg_id with other content; the batch's new sends commit in one
// transaction beside them, with no fallback.
func TestSendBatchReplays(t *testing.T) {
	e := newEnv(t)
	u := e.users(t, 2)
	a, b := u[0], u[1]
	ctx := context.Background()
	svc, _, _, start, _ := e.paused(t, 34, message.Config{CommitWorkers: 1})
	msg := func(cid, txt string) batchSend {
		return batchSend{message.Sender{UserID: a, DeviceID: "d"}, body("to_user_id", b, "client_msg_id", cid, "message_type", 1, "content", text(txt))}
	}
	start()
	first, err := svc.Send(ctx, msg("k1", "one").from, sendReq(msg("k1", "one").body))
	if err != nil {
		t.Fatal(err)
	}
	conv := first.ConversationID
	svc2, _, m2, start2, queued2 := e.paused(t, 35, message.Config{CommitWorkers: 1})
	res := sendBatch(t, svc2, start2, queued2, []batchSend{msg("k2", "two"), msg("k1", "one"), msg("k1", "changed"), msg("k3", "three")})
	codes := make([]errcode.Code, len(res))
	for i, r := range res {
		codes[i] = code(r.err)
	}
	if fmt.Sprint(codes) != fmt.Sprint([]errcode.Code{errcode.OK, errcode.OK, errcode.Conflict, errcode.OK}) {
		t.Fatalf("codes %v (%v)", codes, res)
	}
	x, _ := json.Marshal(clientwire.SendAck(first))
	y, _ := json.Marshal(clientwire.SendAck(res[1].ack))
	if string(x) != string(y) {
		t.Fatalf("replay ack %s, want the original %s", y, x)
	}
	if n := e.jobs(t, conv, first.MsgID); n != 2 {
		t.Fatalf("%d jobs for the replayed message, want 2 (the send and its retry)", n)
	}
	if !(res[0].ack.MsgID < res[3].ack.MsgID) {
		t.Fatalf("new ids %d, %d not in arrival order", res[0].ack.MsgID, res[3].ack.MsgID)
	}
	if ok, fb := batchCommits(m2, "ok"), batchCommits(m2, "fallback"); ok != 1 || fb != 0 {
		t.Fatalf("%d transactions, %d fallbacks; want 1, 0", ok, fb)
	}
	var rows int
	if err := e.st.DB().Get(&rows, "SELECT COUNT(*) FROM t_messages WHERE conversation_id = ?", conv); err != nil || rows != 3 {
		t.Fatalf("%d rows (%v), want 3", rows, err)
	}
}

// The store's batch in its two round trips: a key that already has a row
// is reported Found with that row and not written again, the others
// commit; a batch whose INSERT is refused (a msg_id taken) is rolled back
// whole — its other row is not there, last_msg_id has not moved — and
// the pool's one connection commits the next batch.
func TestInsertMessagesFoundKeysAndRefusedBatch(t *testing.T) {
	e := newEnv(t)
	u := e.users(t, 2)
	ctx := context.Background()
	warm, gen := e.service(t, 61, message.Config{})
	ack, err := warm.Send(ctx, message.Sender{UserID: u[0], DeviceID: "w"}, sendReq(body("to_user_id", u[1], "client_msg_id", "warm", "message_type", 1, "content", text("x"))))
	if err != nil {
		t.Fatal(err)
	}
	conv := ack.ConversationID
	// One connection: a transaction left open would hold the next batch.
	e.st.DB().SetMaxOpenConns(1)
	nm := func(cid string) store.NewMessage {
		return store.NewMessage{ConversationID: conv, SenderID: u[0], SenderDevice: "w", ClientMsgID: cid, MessageType: 1, Content: []byte(`{"t":1}`)}
	}
	next := func(ctx context.Context, _ int, last int64, _ time.Time) (int64, error) {
		return gen.NextAfter(ctx, last)
	}
	lastID := func() int64 {
		var last int64
		if err := e.st.DB().Get(&last, "SELECT last_msg_id FROM t_conversations WHERE id = ?", conv); err != nil {
			t.Fatal(err)
		}
		return last
	}

	res, err := e.st.InsertMessages(ctx, []store.NewMessage{nm("warm"), nm("new1")}, next)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.Found) != "[true false]" || res.Rows[0].ID != ack.MsgID || res.Rows[1].ID <= ack.MsgID {
		t.Fatalf("found %v, rows %d, %d; want [true false], %d, above it", res.Found, res.Rows[0].ID, res.Rows[1].ID, ack.MsgID)
	}
	if got := lastID(); got != res.Rows[1].ID {
		t.Fatalf("last_msg_id %d, want %d", got, res.Rows[1].ID)
	}

	before := lastID()
	taken := res.Rows[1].ID
	_, err = e.st.InsertMessages(ctx, []store.NewMessage{nm("new2"), nm("new3")},
		func(ctx context.Context, i int, last int64, now time.Time) (int64, error) {
			if i == 1 {
				return taken, nil // the primary key of new1: the INSERT is refused
			}
			return gen.NextAfter(ctx, last)
		})
	if !errors.Is(err, store.ErrBatchRow) {
		t.Fatalf("err %v, want ErrBatchRow", err)
	}
	var rows int
	if err := e.st.DB().Get(&rows, "SELECT COUNT(*) FROM t_messages WHERE sender_id = ? AND client_msg_id IN ('new2','new3')", u[0]); err != nil || rows != 0 {
		t.Fatalf("%d rows of the refused batch (%v), want 0", rows, err)
	}
	if got := lastID(); got != before {
		t.Fatalf("last_msg_id %d after a refused batch, want %d", got, before)
	}

	res, err = e.st.InsertMessages(ctx, []store.NewMessage{nm("new4")}, next)
	if err != nil || res.Rows[0].ID <= before {
		t.Fatalf("next batch: %v, id %d; want committed above %d", err, res.Rows[0].ID, before)
	}
	if got := lastID(); got != res.Rows[0].ID {
		t.Fatalf("last_msg_id %d, want %d", got, res.Rows[0].ID)
	}
}
