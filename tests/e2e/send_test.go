package e2e

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/tests/framework"
)

// The same client_msg_id sent five times in a row and five times at once
// (from five devices of the sender) is one row and five identical
// SEND_ACKs; the peer receives it once. Other content under the same
// client_msg_id is 40901.
func TestIdempotentSend(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2})
	ctx := ctxT(t, time.Minute)
	peer := c.Login(t, 1, 4002, "peer")

	t.Run("sequential", func(t *testing.T) {
		sender := c.Login(t, 0, 4001, "seq")
		var first protocol.SendAck
		for i := 0; i < 5; i++ {
			ack, err := sender.Send(ctx, sendTo(4002, "same-seq", text(t, "once")))
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = ack
			} else if ack != first {
				t.Fatalf("ack %d = %+v, want %+v", i, ack, first)
			}
		}
		if n := c.CountRows("SELECT COUNT(*) FROM t_messages WHERE sender_id = 4001 AND client_msg_id = 'same-seq'"); n != 1 {
			t.Fatalf("%d rows", n)
		}
		if m, err := nextMessage(peer, 10*time.Second); err != nil || m.MsgID != first.MsgID {
			t.Fatalf("peer: %+v %v", m, err)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		var senders []*client.Conn
		for i := 0; i < 5; i++ {
			senders = append(senders, c.Login(t, i%2, 4001, fmt.Sprintf("dev-%d", i)))
		}
		acks := make([]protocol.SendAck, 5)
		errs := make([]error, 5)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				acks[i], errs[i] = senders[i].Send(ctx, sendTo(4002, "same-conc", text(t, "once, concurrently")))
			}()
		}
		close(start)
		wg.Wait()
		for i := range acks {
			if errs[i] != nil {
				t.Fatalf("sender %d: %v", i, errs[i])
			}
			if acks[i] != acks[0] {
				t.Fatalf("ack %d = %+v, want %+v", i, acks[i], acks[0])
			}
		}
		if n := c.CountRows("SELECT COUNT(*) FROM t_messages WHERE sender_id = 4001 AND client_msg_id = 'same-conc'"); n != 1 {
			t.Fatalf("%d rows", n)
		}
		if m, err := nextMessage(peer, 10*time.Second); err != nil || m.MsgID != acks[0].MsgID {
			t.Fatalf("peer: %+v %v", m, err)
		}
		// A later message is the next thing the peer sees: no duplicate.
		later, err := senders[0].Send(ctx, sendTo(4002, "later", text(t, "later")))
		if err != nil {
			t.Fatal(err)
		}
		if m, err := nextMessage(peer, 10*time.Second); err != nil || m.MsgID != later.MsgID {
			t.Fatalf("peer got %+v (%v), want only the later message %s", m, err, later.MsgID)
		}
	})

	t.Run("conflict", func(t *testing.T) {
		sender := c.Login(t, 0, 4001, "conflict")
		if _, err := sender.Send(ctx, sendTo(4002, "same-seq", text(t, "different content"))); !hasCode(err, errcode.Conflict) {
			t.Fatalf("got %v, want 40901", err)
		}
		if n := c.CountRows("SELECT COUNT(*) FROM t_messages WHERE sender_id = 4001 AND client_msg_id = 'same-seq'"); n != 1 {
			t.Fatalf("%d rows after a conflict", n)
		}
	})
}

func hasCode(err error, code errcode.Code) bool {
	var ce *client.CodeError
	return errors.As(err, &ce) && ce.Code == code
}

// Both users of a fresh pair send their first message to each other at the
// same moment, 50 times over: always one conversation per pair.
func TestFirstMessageRace(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2})
	ctx := ctxT(t, 2*time.Minute)
	const pairs = 50
	type side struct {
		conn *client.Conn
		user int64
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*pairs)
	convs := make([][2]int64, pairs)
	for p := 0; p < pairs; p++ {
		a := side{c.Login(t, 0, int64(10000+2*p), "a"), int64(10000 + 2*p)}
		b := side{c.Login(t, 1, int64(10001+2*p), "b"), int64(10001 + 2*p)}
		start := make(chan struct{})
		for i, s := range []side{a, b} {
			peer := b.user
			if i == 1 {
				peer = a.user
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ack, err := s.conn.Send(ctx, sendTo(peer, "first", text(t, "hi!")))
				if err != nil {
					errs <- fmt.Errorf("pair %d side %d: %w", p, i, err)
					return
				}
				convs[p][i] = ack.ConversationID.Int64()
			}()
		}
		close(start)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for p, cv := range convs {
		if cv[0] != cv[1] || cv[0] == 0 {
			t.Fatalf("pair %d: conversations %d and %d", p, cv[0], cv[1])
		}
		small, big := 10000+2*p, 10001+2*p
		if n := c.CountRows("SELECT COUNT(*) FROM t_p2p_conversations WHERE user_small = ? AND user_big = ?", small, big); n != 1 {
			t.Fatalf("pair %d: %d p2p rows", p, n)
		}
		if n := c.CountRows("SELECT COUNT(*) FROM t_conversation_members WHERE conversation_id = ?", cv[0]); n != 2 {
			t.Fatalf("pair %d: %d members", p, n)
		}
		if n := c.CountRows("SELECT COUNT(*) FROM t_messages WHERE conversation_id = ?", cv[0]); n != 2 {
			t.Fatalf("pair %d: %d messages in the conversation", p, n)
		}
	}
	if n := c.CountRows("SELECT COUNT(*) FROM t_conversations"); n != pairs {
		t.Fatalf("%d conversations for %d pairs", n, pairs)
	}
}

// readerPage is one SYNC_MESSAGES answer the reader got, kept to explain a
// skip.
type readerPage struct {
	after, next int64
	ids         []int64
	at          time.Time
}

// Two logic processes (different machine ids) commit into one conversation
// at once while a device of the recipient pages SYNC_MESSAGES as a client
// does; once every send is acknowledged and the reader reached the newest
// id, it must have been given every message: ids increase in commit order
// and the watermark read never passes one that is still committing. Runs
// with one commit worker per logic (batches strictly one after another)
// and with the default four.
func TestOrderAcrossLogicInstances(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  []string
	}{
		{"one commit worker", []string{"IM_LOGIC_COMMIT_WORKERS=1"}},
		{"default group commit", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orderAcrossLogicInstances(t, tt.env)
		})
	}
}

func orderAcrossLogicInstances(t *testing.T, logicEnv []string) {
	c := framework.NewCluster(t, framework.Options{Gates: 2, Logics: 2, LogicEnv: logicEnv})
	ctx := ctxT(t, 2*time.Minute)
	// Many devices per user spread the connections over both logic
	// processes' streams.
	var senders []*client.Conn
	for i := 0; i < 8; i++ {
		senders = append(senders, c.Login(t, i%2, int64(5001+i%2), fmt.Sprintf("d%d", i)))
	}
	reader := c.Login(t, 1, 5002, "reader")
	first, err := senders[0].Send(ctx, sendTo(5002, "open", text(t, "open")))
	if err != nil {
		t.Fatal(err)
	}
	conv := first.ConversationID.Int64()

	stop := make(chan struct{})
	seen := map[int64]bool{}
	var pages []readerPage
	var polled atomic.Int64 // the reader's cursor
	pollerDone := make(chan error, 1)
	go func() { // the reader pages SYNC_MESSAGES from its cursor
		cursor := int64(0)
		for {
			select {
			case <-stop:
				pollerDone <- nil
				return
			default:
			}
			p, err := reader.SyncMessagesPage(ctx, conv, cursor, 200)
			if err != nil {
				pollerDone <- fmt.Errorf("reader at cursor %d: %w", cursor, err)
				return
			}
			pg := readerPage{after: cursor, next: p.NextMsgID.Int64(), at: time.Now()}
			for _, m := range p.Messages {
				id := m.MsgID.Int64()
				if id <= cursor {
					pollerDone <- fmt.Errorf("reader got msg %d at or below its cursor %d", id, cursor)
					return
				}
				seen[id] = true
				pg.ids = append(pg.ids, id)
			}
			pages = append(pages, pg)
			if pg.next > cursor {
				cursor = pg.next
			}
			polled.Store(cursor)
		}
	}()

	const each = 60
	var wg sync.WaitGroup
	errs := make(chan error, len(senders))
	for i, s := range senders {
		to := int64(5002)
		if i%2 == 1 {
			to = 5001
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < each; k++ {
				if _, err := s.Send(ctx, sendTo(to, fmt.Sprintf("o-%d-%d", i, k), text(t, "x"))); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every send is acked, so committed: let the reader reach the newest id
	// before judging what it skipped (a reader that is merely slow has
	// skipped nothing).
	var newest int64
	if err := c.DB().QueryRow("SELECT MAX(id) FROM t_messages WHERE conversation_id = ?", conv).Scan(&newest); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); polled.Load() < newest; {
		if time.Now().After(deadline) {
			t.Fatalf("reader stuck at %d, newest %d", polled.Load(), newest)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	select {
	case err := <-pollerDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the reader did not stop within 30 s")
	}

	rows, err := c.DB().Query("SELECT id FROM t_messages WHERE conversation_id = ? ORDER BY id", conv)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	machines := map[int]int{}
	var all []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		all = append(all, id)
		machines[msgid.MachineOf(id)]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for i, id := range all {
		if seen[id] {
			continue
		}
		// Diagnostics: the page that carried the cursor past the id, and
		// the id's neighbours with their machines.
		var passed readerPage
		for _, p := range pages {
			if p.after < id && p.next > id {
				passed = p
				break
			}
		}
		prev, next := int64(0), int64(0)
		if i > 0 {
			prev = all[i-1]
		}
		if i+1 < len(all) {
			next = all[i+1]
		}
		t.Errorf("msg %d (machine %d) was never given to the reader: the page after %d to %d at %s skipped it (it returned %d ids, first %v); neighbours %d (machine %d, seen %v) and %d (machine %d, seen %v)",
			id, msgid.MachineOf(id), passed.after, passed.next, passed.at.Format("15:04:05.000000"), len(passed.ids), firstIDs(passed.ids, 5),
			prev, msgid.MachineOf(prev), seen[prev], next, msgid.MachineOf(next), seen[next])
	}
	if len(all) != 1+len(senders)*each {
		t.Fatalf("%d messages, want %d", len(all), 1+len(senders)*each)
	}
	if len(machines) < 2 {
		t.Fatalf("all messages came from one logic process (machine ids %v): the test did not exercise two", machines)
	}
}

func firstIDs(ids []int64, n int) []int64 {
	if len(ids) < n {
		return ids
	}
	return ids[:n]
}
