package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/tests/framework"
)

// The hostile-client suite (issue 11): clients that misbehave on purpose,
// one gate with one logic stream, so every attacker shares the stream with
// a well-behaved bystander. In every case the bystander keeps getting
// answers without 50301, its latency stays within a loose bound of a quiet
// run, and it gets every message it is sent.

// maxFrame is the clients' frame limit in this suite (the default).
const maxFrame = frame.DefaultMaxFrameSize

// strictLogin dials the gate as an SDK that closes on any frame over
// max_frame_size and never retries a send, so a 50301 or an oversized
// frame surfaces as an error instead of being absorbed.
func strictLogin(t *testing.T, c *framework.Cluster, uid int64, device string) *client.Conn {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	conn, err := client.Dial(ctx, c.Gates[0].TCPAddr, client.Options{MaxFrameSize: maxFrame, SendAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.Auth(ctx, c.Token(uid, device), device, "test", "1.0.0"); err != nil {
		t.Fatalf("auth %d/%s: %v", uid, device, err)
	}
	return conn
}

// bystander is a well-behaved client on the attacked stream: it asks logic
// for a msg_id and sends its partner a message, over and over, recording
// each round trip and any failure.
type bystander struct {
	conn, partner *client.Conn
	mu            sync.Mutex
	samples       []time.Duration
	errs          []error
	sent          []int64
}

func (b *bystander) run(ctx context.Context, peer int64) {
	for i := 0; ctx.Err() == nil; i++ {
		start := time.Now()
		_, err := b.conn.GenerateMsgID(ctx)
		var ack protocol.SendAck
		if err == nil {
			ack, err = b.conn.Send(ctx, sendTo(peer, fmt.Sprintf("bystander-%d", i), mustText("steady")))
		}
		d := time.Since(start)
		b.mu.Lock()
		switch {
		case err != nil && ctx.Err() == nil:
			b.errs = append(b.errs, err)
		case err == nil:
			b.samples = append(b.samples, d)
			b.sent = append(b.sent, ack.MsgID.Int64())
		}
		b.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// mark returns the number of samples so far; p99Since is the 99th
// percentile of the samples after a mark.
func (b *bystander) mark() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.samples)
}

func (b *bystander) p99Since(from int) (time.Duration, int) {
	b.mu.Lock()
	s := slices.Clone(b.samples[from:])
	b.mu.Unlock()
	if len(s) == 0 {
		return 0, 0
	}
	slices.Sort(s)
	return s[(len(s)*99)/100], len(s)
}

// failures returns the errors recorded so far.
func (b *bystander) failures() []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.errs)
}

func TestHostileClients(t *testing.T) {
	c := framework.NewCluster(t, framework.Options{Gates: 1, GateEnv: []string{
		"IM_GATE_STREAMS_PER_LOGIC=1", // every attacker shares the bystander's stream
		"IM_GATE_AUTH_TIMEOUT=2s",
	}, LogicEnv: []string{
		// A device's send rate above the bystander's (under 40 a second)
		// and below the flooder's; a burst the slow reader's senders
		// (400 each) stay within.
		"IM_LOGIC_RATE_LIMIT_SEND_DEVICE_RATE=50", "IM_LOGIC_RATE_LIMIT_SEND_DEVICE_BURST=450",
	}})
	ctx := ctxT(t, 8*time.Minute)

	by := &bystander{conn: strictLogin(t, c, 9401, "bystander"), partner: strictLogin(t, c, 9402, "partner")}
	bctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); by.run(bctx, 9402) }()
	// The partner drains its pushes (PUSH_ACKed by the client) so its
	// queue never fills; the count is checked by sync at the end.
	go func() {
		for range by.partner.Pushes() {
		}
	}()
	time.Sleep(3 * time.Second)
	quiet, n := by.p99Since(0)
	if n < 10 {
		t.Fatalf("the bystander made only %d round trips in a quiet run", n)
	}
	t.Logf("bystander quiet p99 %v over %d round trips", quiet, n)
	// Loose, as the issue asks: within 2× of quiet, plus room for a
	// machine that is itself loaded.
	bound := 2*quiet + 500*time.Millisecond
	attack := func(name string, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			from, start := by.mark(), time.Now()
			f(t)
			// A quick attack still gets a second of bystander samples
			// from while its effects (queues, closes) settle.
			if d := time.Since(start); d < 1500*time.Millisecond {
				time.Sleep(1500*time.Millisecond - d)
			}
			p99, n := by.p99Since(from)
			t.Logf("bystander during %q: p99 %v over %d round trips (quiet %v, bound %v)", name, p99, n, quiet, bound)
			if n == 0 {
				t.Fatal("the bystander made no round trip during the attack")
			}
			if p99 > bound {
				t.Errorf("bystander p99 %v during the attack, over %v", p99, bound)
			}
			if errs := by.failures(); len(errs) > 0 {
				t.Fatalf("the bystander failed %d times, first: %v", len(errs), errs[0])
			}
		})
	}

	attack("maximum-size messages of < sync page by page within the frame limit", func(t *testing.T) {
		sender := strictLogin(t, c, 9411, "lt-sender")
		reader := strictLogin(t, c, 9412, "lt-reader")
		const n = 12
		cmid := func(i int) string { return fmt.Sprintf("lt-%03d", i) }
		wrap := func(k int) string {
			return `{"t":1,"text":"` + strings.Repeat("<>&", k/3) + strings.Repeat("<", k%3) + `"}`
		}
		k := 0
		for protocol.MessageFits(len(wrap(k+1)), len(cmid(0)), maxFrame) {
			k++
		}
		var want []int64
		for i := range n {
			ack, err := sender.Send(ctx, sendTo(9412, cmid(i), []byte(wrap(k))))
			if err != nil {
				t.Fatalf("message %d of the largest accepted size: %v", i, err)
			}
			want = append(want, ack.MsgID.Int64())
		}
		_, err := sender.Send(ctx, sendTo(9412, cmid(n), []byte(wrap(k+1))))
		var ce *client.CodeError
		if !errors.As(err, &ce) || ce.Code != errcode.TooLarge {
			t.Fatalf("one byte over: %v, want 41301", err)
		}
		// The pushes arrive whole: the strict reader would have closed on
		// an oversized frame.
		got, err := collect(reader, n, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range got {
			if m.MsgID.Int64() != want[i] || !strings.Contains(string(m.Content), "<>&") {
				t.Fatalf("push %d: %v, want %v with its <>& intact", i, m.MsgID, want[i])
			}
		}
		// Sync from the start, page by page, every answer a frame the
		// strict client accepts.
		var synced []int64
		after, pages := int64(0), 0
		for {
			p, err := reader.SyncMessagesPage(ctx, got[0].ConversationID.Int64(), after, 200)
			if err != nil {
				t.Fatalf("sync page %d: %v", pages, err)
			}
			pages++
			for _, m := range p.Messages {
				synced = append(synced, m.MsgID.Int64())
			}
			after = p.NextMsgID.Int64()
			if p.Last {
				break
			}
		}
		if !slices.Equal(synced, want) || pages < n {
			t.Fatalf("synced %v in %d pages, want %v in at least %d", synced, pages, want, n)
		}
		if err := reader.Err(); err != nil {
			t.Fatalf("the strict reader's connection broke: %v", err)
		}
	})

	attack("replies: forged, foreign and client-written reply_to, a reply over the size rule, a flood of forged ones", func(t *testing.T) {
		a := strictLogin(t, c, 9421, "re-a")
		_ = strictLogin(t, c, 9422, "re-b")
		_ = strictLogin(t, c, 9423, "re-c")
		orig, err := a.Send(ctx, sendTo(9422, "re-orig", mustText("original")))
		if err != nil {
			t.Fatal(err)
		}
		foreign, err := a.Send(ctx, sendTo(9423, "re-foreign", mustText("elsewhere")))
		if err != nil {
			t.Fatal(err)
		}
		reply := func(cmid string, to int64, content string) protocol.SendRequest {
			r := sendTo(9422, cmid, json.RawMessage(content))
			r.ReplyTo = jsonid.ID(to)
			return r
		}
		// The largest content that fits alone: its snapshot makes the
		// reply over the size rule.
		wrap := func(k int) string { return `{"t":1,"text":"` + strings.Repeat("a", k) + `"}` }
		k := 0
		for protocol.MessageFits(len(wrap(k+1024)), len("re-big"), maxFrame) {
			k += 1024
		}
		for protocol.MessageFits(len(wrap(k+1)), len("re-big"), maxFrame) {
			k++
		}
		for _, tc := range []struct {
			name string
			req  protocol.SendRequest
			code errcode.Code
		}{
			{"a forged id", reply("re-1", orig.MsgID.Int64()+7777, wrap(1)), errcode.NotFound},
			{"the largest int64", reply("re-2", 1<<63-1, wrap(1)), errcode.NotFound},
			{"another conversation's message", reply("re-3", foreign.MsgID.Int64(), wrap(1)), errcode.NotFound},
			{"a negative id", reply("re-4", -5, wrap(1)), errcode.InvalidArgument},
			{"a client-written snapshot", reply("re-5", orig.MsgID.Int64(), `{"t":1,"text":"x","reply_to":{"msg_id":"1"}}`), errcode.InvalidArgument},
			{"the largest content with a snapshot", reply("re-big", orig.MsgID.Int64(), wrap(k)), errcode.TooLarge},
		} {
			if _, err := a.Send(ctx, tc.req); !hasCode(err, tc.code) {
				t.Fatalf("reply to %s: %v, want %s", tc.name, err, tc.code)
			}
		}
		// A flood of forged references within the device's send rate:
		// each is one indexed lookup, refused, and stores nothing.
		for i := range 200 {
			if _, err := a.Send(ctx, reply(fmt.Sprintf("re-flood-%d", i), orig.MsgID.Int64()+int64(i)+1, wrap(1))); !hasCode(err, errcode.NotFound) && !hasCode(err, errcode.RateLimited) {
				t.Fatalf("forged reply %d: %v", i, err)
			}
		}
		msgs, _, err := a.SyncMessages(ctx, orig.ConversationID.Int64(), 0, 50)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("the conversation holds %d messages after the refused replies (%v), want the original only", len(msgs), err)
		}
	})

	attack("headers without bodies and silent connections are closed at the AUTH deadline", func(t *testing.T) {
		var conns []net.Conn
		for i := range 40 {
			nc, err := net.DialTimeout("tcp", c.Gates[0].TCPAddr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, nc)
			switch i % 2 {
			case 0: // a header announcing a body that never comes
				h := frame.Encode(frame.Header{Command: protocol.CmdAuth, RequestID: 1, SequenceID: 1}, make([]byte, 1000))
				if _, err := nc.Write(h[:frame.HeaderSize]); err != nil {
					t.Fatal(err)
				}
			case 1: // connected, silent
			}
		}
		deadline := time.Now().Add(20 * time.Second)
		for i, nc := range conns {
			_ = nc.SetReadDeadline(deadline)
			buf := make([]byte, 64)
			for {
				if _, err := nc.Read(buf); err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						t.Fatalf("connection %d still open 20 s later", i)
					}
					break
				}
			}
			_ = nc.Close()
		}
	})

	attack("a slow reader stops reading while 10,000 messages arrive, then catches up by sync", func(t *testing.T) {
		const total = 10000
		nc, err := net.DialTimeout("tcp", c.Gates[0].TCPAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		slow := newRawConn(nc)
		slow.auth(t, c, 9421, "slow")
		// From here the slow reader reads nothing.
		before, err := c.Gates[0].RSS()
		if err != nil {
			t.Fatal(err)
		}
		// 25 senders, each within its device's send burst, so all
		// 10,000 are accepted (one device flooding is the next attack).
		const senders, each = 25, total / 25
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			sent = map[int64][]int64{} // by sender
			ferr error
		)
		for w := range senders {
			uid := int64(9500 + w)
			conn := strictLogin(t, c, uid, "flooder")
			wg.Go(func() {
				for i := range each {
					ack, err := conn.Send(ctx, sendTo(9421, fmt.Sprintf("flood-%05d", i), mustText(fmt.Sprintf("flood %d", i))))
					mu.Lock()
					if err != nil && ferr == nil {
						ferr = fmt.Errorf("sender %d, send %d: %w", uid, i, err)
					}
					if err == nil {
						sent[uid] = append(sent[uid], ack.MsgID.Int64())
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			})
		}
		wg.Wait()
		if ferr != nil {
			t.Fatal(ferr)
		}
		after, err := c.Gates[0].RSS()
		if err != nil {
			t.Fatal(err)
		}
		growth := after - before
		t.Logf("gate RSS %d MiB before, %d MiB after %d messages to a reader that does not read (growth %d KiB)",
			before>>20, after>>20, total, growth>>10)
		// The outbound queue bounds what the gate holds for one
		// connection (gate.outbound_queue frames); the rest is dropped
		// and left to sync.
		if growth > 32<<20 {
			t.Fatalf("gate RSS grew by %d MiB for one slow reader, over the 32 MiB bound", growth>>20)
		}
		_ = nc.Close()

		// The slow reader comes back and catches up by sync: every
		// message once, each conversation in id order.
		back := strictLogin(t, c, 9421, "slow")
		page, err := back.SyncInbox(ctx, "0", "0", 50)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, cv := range page.Conversations {
			peer := cv.PeerID.Int64()
			want, ok := sent[peer]
			if !ok {
				continue
			}
			var synced []int64
			after := int64(0)
			for {
				p, err := back.SyncMessagesPage(ctx, cv.ConversationID.Int64(), after, 200)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range p.Messages {
					synced = append(synced, m.MsgID.Int64())
				}
				after = p.NextMsgID.Int64()
				if p.Last {
					break
				}
			}
			slices.Sort(want)
			if !slices.Equal(synced, want) {
				t.Fatalf("from sender %d the slow reader synced %d messages, want %d in id order", peer, len(synced), len(want))
			}
			got += len(synced)
		}
		if got != total {
			t.Fatalf("the slow reader caught up %d messages, want %d", got, total)
		}
	})

	attack("one device flooding sends gets 42901 for its own excess", func(t *testing.T) {
		flooder := strictLogin(t, c, 9431, "flooder")
		// 32 sends in flight at a time: faster than a device's send
		// rate, so once its burst is spent the rest is refused.
		var (
			mu          sync.Mutex
			limited, ok int
			ferr        error
			wg          sync.WaitGroup
		)
		for w := range 32 {
			wg.Go(func() {
				for i := w; i < 4000; i += 32 {
					_, err := flooder.Send(ctx, sendTo(9402, fmt.Sprintf("f-%d", i), mustText("x")))
					var ce *client.CodeError
					mu.Lock()
					switch {
					case err == nil:
						ok++
					case errors.As(err, &ce) && ce.Code == errcode.RateLimited:
						limited++
						if ce.RetryAfter <= 0 && ferr == nil {
							ferr = fmt.Errorf("42901 without a retry-after hint: %w", err)
						}
					case ferr == nil:
						ferr = fmt.Errorf("send %d: %w", i, err)
					}
					stop := limited > 0 || ferr != nil
					mu.Unlock()
					if stop {
						return
					}
				}
			})
		}
		wg.Wait()
		if ferr != nil {
			t.Fatal(ferr)
		}
		t.Logf("the flooding device got %d sends through before 42901", ok)
		if limited == 0 {
			t.Fatal("4,000 sends from one device were never limited")
		}
	})

	attack("AUTH brute force over many device ids blocks the address, not the user", func(t *testing.T) {
		const src, elsewhere, victim = "127.0.0.50", "127.0.0.51", 9441
		// The default threshold: 10 failures in 5 minutes.
		for i := range 10 {
			conn, err := authFrom(t, c, src, fmt.Sprintf("guess-%d", i), victim, fmt.Sprintf("device-%d", i))
			var ce *client.CodeError
			if !errors.As(err, &ce) || ce.Code != errcode.BadToken {
				t.Fatalf("guess %d: %v, want 40101", i, err)
			}
			<-conn.Done()
		}
		_, err := authFrom(t, c, src, c.Token(victim, "device-x"), victim, "device-x")
		rateLimited(t, err, "a valid token from the blocked address", 5*time.Minute)
		loginFrom(t, c, elsewhere, victim, "phone")
	})

	attack("pipelining thousands of requests gets the connection's own excess refused", func(t *testing.T) {
		nc, err := net.DialTimeout("tcp", c.Gates[0].TCPAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		greedy := newRawConn(nc)
		greedy.auth(t, c, 9451, "greedy")
		const burst = 3000
		var stream []byte
		for i := uint64(1); i <= burst; i++ {
			stream = frame.Append(stream, frame.Header{Command: protocol.CmdGenerateMsgID, RequestID: 100 + i, SequenceID: uint32(i)}, []byte(`{}`))
		}
		go func() { _, _ = nc.Write(stream) }()
		codes := map[errcode.Code]int{}
		for range burst {
			h, env, err := greedy.read(time.Minute)
			if err != nil {
				// Every request is answered, or the connection closes
				// (a client with twice gate.outbound_queue answers
				// unread); never a request left without either.
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("after %v answers the greedy connection is open but answers no more: %v", codes, err)
				}
				t.Logf("the greedy connection was closed after %v answers: %v", codes, err)
				break
			}
			if h.Command != protocol.CmdGenerateMsgID {
				t.Fatalf("unexpected answer %+v", h)
			}
			codes[env.Code]++
		}
		t.Logf("greedy connection's answers by code: %v", codes)
		for code := range codes {
			if code != errcode.OK && code != errcode.Busy && code != errcode.RateLimited {
				t.Fatalf("answer code %s to a pipelined request", code)
			}
		}
		if codes[errcode.Busy]+codes[errcode.RateLimited] == 0 {
			t.Fatalf("%d pipelined requests were all served: no limit applied", burst)
		}
	})

	stop()
	<-done
	// The bystander's partner has every message the bystander sent.
	by.mu.Lock()
	sent := slices.Clone(by.sent)
	by.mu.Unlock()
	msgs, _, err := by.partner.SyncMessages(ctxT(t, time.Minute), convOf(t, c, 9401, 9402), 0, 200)
	if err != nil {
		t.Fatal(err)
	}
	have := map[int64]bool{}
	for _, m := range msgs {
		have[m.MsgID.Int64()] = true
	}
	for _, id := range sent {
		if !have[id] {
			t.Fatalf("the bystander's message %d is missing from its partner's sync", id)
		}
	}
	t.Logf("the bystander made %d sends, all received", len(sent))
}

// mustText is text content for goroutines, which must not call t.Fatal;
// encoding a string cannot fail.
func mustText(s string) json.RawMessage {
	b, _ := client.TextContent(s)
	return b
}

// convOf returns the P2P conversation of two users from MySQL.
func convOf(t *testing.T, c *framework.Cluster, a, b int64) int64 {
	t.Helper()
	small, big := min(a, b), max(a, b)
	var id int64
	if err := c.DB().QueryRow(
		"SELECT c.id FROM t_conversations c JOIN t_conversation_members m1 ON m1.conversation_id = c.id AND m1.user_id = ? "+
			"JOIN t_conversation_members m2 ON m2.conversation_id = c.id AND m2.user_id = ? WHERE c.type = 1", small, big).Scan(&id); err != nil {
		t.Fatalf("conversation of %d and %d: %v", a, b, err)
	}
	return id
}
