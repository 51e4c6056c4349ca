package inbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/logic/internal/clientwire"
	"github.com/sparkim/spark/logic/internal/conversation"
	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/logic/internal/inbox"
	"github.com/sparkim/spark/logic/internal/mailbox"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/rediskey"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

const partitions = 4

type env struct {
	t     *testing.T
	st    *store.Store
	rdb   *redis.Client
	gen   *msgid.Generator
	send  *message.Service
	group *group.Service
	mb    *mailbox.Service
	inbox *inbox.Service
	n     int
}

// readReq, refReq and settingsReq decode READ_MESSAGE, RECALL_MESSAGE /
// DELETE_MESSAGE and CONVERSATION_SETTINGS bodies into the message
// service's requests as the gateway does.
func readReq(b []byte) message.ReadMark { return clientwire.ReadMark(wire[protocol.ReadRequest](b)) }

func refReq(b []byte) message.MessageRef { return clientwire.MessageRef(wire[protocol.MessageRef](b)) }

func settingsReq(b []byte) message.SettingsChange {
	return clientwire.SettingsChange(wire[protocol.SettingsRequest](b))
}

// asker is the authenticated device asking, as the gateway's session
// names it.
type asker struct {
	UserID   int64
	DeviceID string
}

// syncMessages answers a SYNC_MESSAGES body as the gateway does: the
// client form of History's page under the default client frame bound.
func (e *env) syncMessages(ctx context.Context, u asker, req protocol.SyncMessagesRequest) (*protocol.SyncMessagesReply, bool, error) {
	page, err := e.inbox.History(ctx, clientwire.HistoryQuery(u.UserID, req, clientwire.PageBound(config.Default().Logic.MaxFrameSize)))
	if err != nil {
		return nil, false, err
	}
	return clientwire.SyncMessagesReply(page), page.More, nil
}

// syncInbox answers a SYNC_INBOX body as the gateway does, under the
// default client frame bound; syncInboxIn under frames of maxFrame bytes.
func (e *env) syncInbox(ctx context.Context, u asker, req protocol.SyncInboxRequest) (*protocol.SyncInboxReply, bool, error) {
	return e.syncInboxIn(ctx, config.Default().Logic.MaxFrameSize, u, req)
}

func (e *env) syncInboxIn(ctx context.Context, maxFrame int, u asker, req protocol.SyncInboxRequest) (*protocol.SyncInboxReply, bool, error) {
	page, err := e.inbox.SyncInbox(ctx, clientwire.InboxQuery(u.UserID, u.DeviceID, req, clientwire.ListBound(maxFrame)))
	if err != nil {
		return nil, false, err
	}
	return clientwire.SyncInboxReply(page), page.More, nil
}

func newEnv(t *testing.T, cfg message.Config) *env {
	t.Helper()
	_, db := testenv.MySQL(t)
	st := store.New(db)
	rdb := testenv.Redis(t)
	gen, err := msgid.New(context.Background(), msgid.Settings{MachineID: 41})
	if err != nil {
		t.Fatal(err)
	}
	defaults := config.Default()
	full := message.ConfigFrom(defaults)
	full.EnqueueRetries, full.Partitions = 2, partitions
	if cfg.RecallWindow != 0 {
		full.RecallWindow = cfg.RecallWindow
	}
	groups, err := group.New(st, gen, group.Config{MaxMembers: defaults.Logic.GroupMaxMembers})
	if err != nil {
		t.Fatal(err)
	}
	full.Conversations = conversation.NewResolver(st, gen.Next, nil, groups)
	mb := mailbox.New(st, gen)
	send, err := message.New(st, rdb, gen, full, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := inbox.New(st, rdb, mb, nil)
	return &env{t: t, st: st, rdb: rdb, gen: gen, send: send, group: groups, mb: mb, inbox: in}
}

func (e *env) users(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = testenv.RandomUserID()
		if err := e.st.EnsureUser(context.Background(), out[i], time.Now()); err != nil {
			e.t.Fatal(err)
		}
	}
	return out
}

func body(kv ...any) []byte {
	m := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	return b
}

func code(err error) errcode.Code {
	c, _ := errcode.Of(err)
	return c
}

func id(v int64) string { return strconv.FormatInt(v, 10) }

// msg sends a text from → to and applies it to both users' lists the way
// deliver does; it returns the conversation and the message id.
func (e *env) msg(from, to int64, text string) (int64, int64) {
	e.t.Helper()
	e.n++
	ack, err := e.send.Send(context.Background(), message.Sender{UserID: from, DeviceID: "dev"},
		sendReq(body("to_user_id", id(to), "client_msg_id", fmt.Sprintf("c%d", e.n), "message_type", 1, "content", map[string]any{"t": 1, "text": text})))
	if err != nil {
		e.t.Fatalf("send: %v", err)
	}
	e.deliver(ack.MsgID)
	return ack.ConversationID, ack.MsgID
}

// deliver applies a committed message to its recipients' lists (the
// deliver side of the contract).
func (e *env) deliver(msgID int64) {
	e.t.Helper()
	ctx := context.Background()
	m, err := e.st.GetMessage(ctx, msgID, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	members, err := e.st.MemberIDs(ctx, m.ConversationID)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, u := range members {
		if _, err := dialog.ApplyMessage(ctx, e.rdb, u, m.ConversationID, m.ID, m.CreatedAt.UnixMilli(), u != m.SenderID, inbox.PreviewOf(m)); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) sync(uid int64, cursor string, seq int64, limit int) (*protocol.SyncInboxReply, bool) {
	e.t.Helper()
	r, more, err := e.syncInbox(context.Background(), asker{UserID: uid, DeviceID: "dev"},
		wire[protocol.SyncInboxRequest](body("dialog_cursor", cursor, "mailbox_seq", id(seq), "limit", limit)))
	if err != nil {
		e.t.Fatalf("sync inbox: %v", err)
	}
	return r, more
}

// syncAll pages the whole list from cursor and returns the last state of
// every conversation seen and the final cursor.
func (e *env) syncAll(uid int64, cursor string, limit int) (map[int64]protocol.Conversation, string) {
	e.t.Helper()
	out := map[int64]protocol.Conversation{}
	for range 100 {
		r, more := e.sync(uid, cursor, 0, limit)
		for _, c := range r.Conversations {
			out[c.ConversationID.Int64()] = c
		}
		cursor = r.DialogCursor
		if !more {
			return out, cursor
		}
	}
	e.t.Fatal("sync did not finish")
	return nil, ""
}

func (e *env) messages(uid, cid, after int64, limit int) *protocol.SyncMessagesReply {
	e.t.Helper()
	r, _, err := e.syncMessages(context.Background(), asker{UserID: uid, DeviceID: "dev"},
		wire[protocol.SyncMessagesRequest](body("conversation_id", id(cid), "last_msg_id", id(after), "limit", limit)))
	if err != nil {
		e.t.Fatalf("sync messages: %v", err)
	}
	return r
}

func TestSyncInboxPaging(t *testing.T) {
	e := newEnv(t, message.Config{})
	u := e.users(6)
	me, peers := u[0], u[1:]
	var convs []int64
	for i, p := range peers {
		c, _ := e.msg(p, me, fmt.Sprintf("hello %d", i))
		convs = append(convs, c)
	}

	t.Run("limit 1 pages each conversation once, cursors exact", func(t *testing.T) {
		cursor, seen := "0", map[int64]bool{}
		for page := 1; ; page++ {
			r, more := e.sync(me, cursor, 0, 1)
			if len(r.Conversations) != 1 {
				t.Fatalf("page %d: %d conversations", page, len(r.Conversations))
			}
			c := r.Conversations[0]
			cid := c.ConversationID.Int64()
			if seen[cid] {
				t.Fatalf("page %d: conversation %d twice", page, cid)
			}
			seen[cid] = true
			score, err := e.rdb.ZScore(context.Background(), dialog.ListKey(me), id(cid)).Result()
			if err != nil {
				t.Fatal(err)
			}
			cur, err := dialog.ParseCursor(r.DialogCursor)
			if err != nil || cur.Version != int64(score) {
				t.Fatalf("page %d: cursor %q, version of the conversation %v (%v)", page, r.DialogCursor, score, err)
			}
			if c.Unread != 1 || c.Preview == nil || c.Preview.Text == "" || c.PeerID == 0 || c.ConversationType != 1 {
				t.Fatalf("page %d: %+v", page, c)
			}
			cursor = r.DialogCursor
			if page == len(peers) {
				if more {
					t.Fatal("last page says more")
				}
				break
			}
			if !more {
				t.Fatalf("page %d says last", page)
			}
		}
		// Nothing changed: a sync from the final cursor is empty and keeps it.
		r, more := e.sync(me, cursor, 0, 1)
		if len(r.Conversations) != 0 || more || r.DialogCursor != cursor {
			t.Fatalf("after the end: %+v more %v", r, more)
		}
	})

	t.Run("limit 2 with a change between pages", func(t *testing.T) {
		r1, more := e.sync(me, "0", 0, 2)
		if len(r1.Conversations) != 2 || !more {
			t.Fatalf("page 1: %d more %v", len(r1.Conversations), more)
		}
		first := r1.Conversations[0].ConversationID.Int64()
		// A new message in a conversation the sync already returned.
		peer := r1.Conversations[0].PeerID.Int64()
		_, newMsg := e.msg(peer, me, "while syncing")
		got := map[int64]protocol.Conversation{}
		cursor, pages := r1.DialogCursor, 1
		for more {
			var r *protocol.SyncInboxReply
			r, more = e.sync(me, cursor, 0, 2)
			pages++
			for _, c := range r.Conversations {
				got[c.ConversationID.Int64()] = c
			}
			cursor = r.DialogCursor
		}
		c, ok := got[first]
		if !ok || c.LastMsgID.Int64() != newMsg || c.Unread != 2 || c.Preview.Text != "while syncing" {
			t.Fatalf("the change made between pages is missing from later pages: %+v (pages %d)", c, pages)
		}
		if len(got) != len(peers)-1 || pages != 3 {
			t.Fatalf("later pages had %d conversations in %d pages", len(got), pages)
		}
	})
	_ = convs
}

func TestColdPathEqualsIncremental(t *testing.T) {
	e := newEnv(t, message.Config{})
	ctx := context.Background()
	u := e.users(4)
	me := u[0]
	// Build states cold once, then let messages apply incrementally on top.
	var mids []int64
	for _, p := range u[1:] {
		_, m := e.msg(p, me, "first")
		mids = append(mids, m)
	}
	_, _ = e.syncAll(me, "0", 100)
	c1, _ := e.msg(u[1], me, "second")
	e.msg(me, u[2], "my own")
	e.msg(u[3], me, strings.Repeat("long text ", 20))
	_, m := e.msg(u[3], me, "newest")
	c3, _ := e.st.FindP2P(ctx, me, u[3])
	if _, err := e.send.Read(ctx, message.Sender{UserID: me, DeviceID: "dev"}, readReq(body("conversation_id", id(c3), "msg_id", id(mids[2])))); err != nil {
		t.Fatal(err)
	}
	e.msg(u[1], me, "after read")
	_ = m
	_ = c1
	incr, cursor := e.syncAll(me, "0", 100)

	// Redis lost every dialog key of the user.
	keys := []string{dialog.ListKey(me), dialog.VersionKey(me), dialog.BuiltKey(me)}
	for cid := range incr {
		keys = append(keys, dialog.StateKey(me, cid))
	}
	if err := e.rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	cold, newCursor := e.syncAll(me, cursor, 100)
	if len(cold) != len(incr) {
		t.Fatalf("cold list has %d conversations, incremental %d", len(cold), len(incr))
	}
	for cid, want := range incr {
		got := cold[cid]
		wj, _ := json.Marshal(want)
		gj, _ := json.Marshal(got)
		if string(wj) != string(gj) {
			t.Errorf("conversation %d:\n cold %s\n incr %s", cid, gj, wj)
		}
	}
	if strings.SplitN(newCursor, ".", 2)[0] == strings.SplitN(cursor, ".", 2)[0] {
		t.Fatalf("the rebuilt list kept the old epoch: %s / %s", newCursor, cursor)
	}
	// History is in MySQL: a new message still gets a greater id.
	_, after := e.msg(u[1], me, "after flush")
	if after <= m {
		t.Fatalf("msg id %d not above %d", after, m)
	}
}

func TestReadNeverMovesBack(t *testing.T) {
	e := newEnv(t, message.Config{})
	ctx := context.Background()
	u := e.users(2)
	me, peer := u[0], u[1]
	var ids []int64
	var cid int64
	for i := range 5 {
		c, m := e.msg(peer, me, fmt.Sprint(i))
		cid, ids = c, append(ids, m)
	}
	from := message.Sender{UserID: me, DeviceID: "dev"}
	tests := []struct {
		name     string
		body     []byte
		want     errcode.Code
		wantRead int64
		unread   int64
	}{
		{"read the third", body("conversation_id", id(cid), "msg_id", id(ids[2])), errcode.OK, ids[2], 2},
		{"an older id does not move back", body("conversation_id", id(cid), "msg_id", id(ids[0])), errcode.OK, ids[2], 2},
		{"last_msg_id alias", body("conversation_id", id(cid), "last_msg_id", id(ids[3])), errcode.OK, ids[3], 1},
		{"beyond the newest is clamped", body("conversation_id", id(cid), "msg_id", id(ids[4]+1_000_000)), errcode.OK, ids[4], 0},
		{"no conversation", body("msg_id", id(ids[0])), errcode.InvalidArgument, 0, 0},
		{"no ids", body("conversation_id", id(cid), "msg_id", "0", "last_msg_id", -1), errcode.InvalidArgument, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := e.send.Read(ctx, from, readReq(tt.body))
			if code(err) != tt.want {
				t.Fatalf("code %s (%v)", code(err), err)
			}
			if err != nil {
				return
			}
			if r.MsgID != tt.wantRead {
				t.Fatalf("effective read %d, want %d", r.MsgID, tt.wantRead)
			}
			got, _ := e.syncAll(me, "0", 100)
			if got[cid].Unread != tt.unread {
				t.Fatalf("unread %d, want %d", got[cid].Unread, tt.unread)
			}
		})
	}
	other := e.users(1)[0]
	if _, err := e.send.Read(ctx, message.Sender{UserID: other, DeviceID: "x"}, readReq(body("conversation_id", id(cid), "msg_id", id(ids[0])))); code(err) != errcode.Forbidden {
		t.Fatalf("non-member read: %v", err)
	}
	if n := signals(t, e.rdb, cid, protocol.CmdReadMessage); n != 3 {
		t.Fatalf("%d READ signals, want 3 (one per forward move)", n)
	}
}

// signals counts the SIGNAL jobs of a conversation with command cmd.
func signals(t *testing.T, rdb *redis.Client, cid int64, cmd uint16) int {
	t.Helper()
	msgs, err := rdb.XRange(context.Background(), rediskey.Deliver(rediskey.Partition(cid, partitions)), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range msgs {
		if j, err := queue.Decode(m); err == nil && j.ConversationId == cid && j.Kind == queuev1.JobKind_JOB_KIND_SIGNAL && j.Command == uint32(cmd) {
			n++
		}
	}
	return n
}

func TestRecall(t *testing.T) {
	e := newEnv(t, message.Config{})
	ctx := context.Background()
	u := e.users(3)
	me, peer, stranger := u[0], u[1], u[2]
	cid, m1 := e.msg(peer, me, "oops")
	_, m2 := e.msg(me, peer, "reply")
	e.syncAll(me, "0", 100) // states exist: the recall must invalidate them
	tinyCfg := message.ConfigFrom(config.Default())
	tinyCfg.RecallWindow, tinyCfg.EnqueueRetries, tinyCfg.Partitions = time.Millisecond, 1, partitions
	tiny, err := message.New(e.st, e.rdb, e.gen, tinyCfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)

	tests := []struct {
		name string
		svc  *message.Service
		user int64
		body []byte
		want errcode.Code
		msg  string
	}{
		{"non-sender", e.send, me, body("msg_id", id(m1)), errcode.Forbidden, "only the sender may recall"},
		{"stranger", e.send, stranger, body("msg_id", id(m1)), errcode.Forbidden, "only the sender may recall"},
		{"after the window", tiny, peer, body("msg_id", id(m1)), errcode.Forbidden, "recall window has passed"},
		{"unknown message", e.send, peer, body("msg_id", id(m1+12345)), errcode.NotFound, ""},
		{"wrong conversation", e.send, peer, body("msg_id", id(m1), "conversation_id", id(cid+1)), errcode.NotFound, ""},
		{"no msg_id", e.send, peer, body(), errcode.InvalidArgument, ""},
		{"sender within the window", e.send, peer, body("msg_id", id(m1), "conversation_id", id(cid)), errcode.OK, ""},
		{"again: same answer", e.send, peer, body("msg_id", id(m1)), errcode.OK, ""},
		{"again after the window: same answer", tiny, peer, body("msg_id", id(m1)), errcode.OK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := tt.svc.Recall(ctx, message.Sender{UserID: tt.user, DeviceID: "dev"}, refReq(tt.body))
			c, msg := errcode.Of(err)
			if c != tt.want || (tt.msg != "" && msg != tt.msg) {
				t.Fatalf("got %s %q, want %s %q", c, msg, tt.want, tt.msg)
			}
			if err == nil && (r.MsgID != m1 || r.ConversationID != cid) {
				t.Fatalf("answer %+v", r)
			}
		})
	}

	// Tombstone in history, for both users; the other message intact.
	for _, uid := range []int64{me, peer} {
		r := e.messages(uid, cid, 0, 50)
		if len(r.Messages) != 2 || r.NextMsgID.Int64() != m2 {
			t.Fatalf("user %d: %d messages, next %d", uid, len(r.Messages), r.NextMsgID)
		}
		if got := r.Messages[0]; got.Status != protocol.StatusRecalled || got.Content != nil || got.MsgID.Int64() != m1 {
			t.Fatalf("recalled message %+v", got)
		}
		if got := r.Messages[1]; got.Status != protocol.StatusNormal || got.Content == nil {
			t.Fatalf("normal message %+v", got)
		}
	}
	// One RECALL mailbox event per participant, written once.
	for _, uid := range []int64{me, peer} {
		r, _ := e.sync(uid, "0", 0, 100)
		if len(r.Events) != 1 {
			t.Fatalf("user %d: %d events", uid, len(r.Events))
		}
		ev := r.Events[0]
		var p protocol.MessageRef
		if err := json.Unmarshal(ev.Payload, &p); err != nil || ev.EventType != protocol.EventRecall || ev.MsgID.Int64() != m1 ||
			ev.ConversationID.Int64() != cid || p.MsgID.Int64() != m1 || p.ConversationID.Int64() != cid || ev.Seq != 1 || r.MailboxSeq != 1 {
			t.Fatalf("user %d: event %+v payload %s", uid, ev, ev.Payload)
		}
	}
	// The recalled message no longer counts as unread for me; my reply
	// is the preview of the peer's list.
	mine, _ := e.syncAll(me, "0", 100)
	if c := mine[cid]; c.Unread != 0 || c.Preview == nil || c.Preview.MsgID.Int64() != m2 {
		t.Fatalf("my conversation after recall %+v", c)
	}
	// Recalling the newest message: the preview says so.
	if _, err := e.send.Recall(ctx, message.Sender{UserID: me, DeviceID: "dev"}, refReq(body("msg_id", id(m2)))); err != nil {
		t.Fatal(err)
	}
	theirs, _ := e.syncAll(peer, "0", 100)
	if c := theirs[cid]; c.Preview == nil || !c.Preview.Recalled || c.Preview.Text != "" || c.Preview.MsgID.Int64() != m2 {
		t.Fatalf("preview after recalling the newest %+v", c.Preview)
	}
	// One push per recalled message: the two repeats changed nothing and
	// pushed nothing.
	if n := signals(t, e.rdb, cid, protocol.CmdRecallMessage); n != 2 {
		t.Fatalf("%d RECALL signals, want 2", n)
	}
}

func TestDeleteForMe(t *testing.T) {
	e := newEnv(t, message.Config{})
	ctx := context.Background()
	u := e.users(3)
	me, peer, stranger := u[0], u[1], u[2]
	cid, m1 := e.msg(peer, me, "one")
	_, m2 := e.msg(peer, me, "two")
	_, m3 := e.msg(peer, me, "three")
	from := message.Sender{UserID: me, DeviceID: "dev"}
	tests := []struct {
		name string
		user int64
		body []byte
		want errcode.Code
	}{
		{"not a member", stranger, body("msg_id", id(m2)), errcode.Forbidden},
		{"unknown", me, body("msg_id", id(m3+999)), errcode.NotFound},
		{"mine", me, body("msg_id", id(m2)), errcode.OK},
		{"twice", me, body("msg_id", id(m2), "conversation_id", id(cid)), errcode.OK},
		{"the newest", me, body("msg_id", id(m3)), errcode.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.send.Delete(ctx, message.Sender{UserID: tt.user, DeviceID: "dev"}, refReq(tt.body))
			if code(err) != tt.want {
				t.Fatalf("code %s (%v)", code(err), err)
			}
		})
	}
	r := e.messages(me, cid, 0, 50)
	if len(r.Messages) != 1 || r.Messages[0].MsgID.Int64() != m1 || r.NextMsgID.Int64() != m3 {
		t.Fatalf("mine after delete: %+v", r)
	}
	// Paging over a deleted message still advances the cursor.
	r = e.messages(me, cid, m1, 1)
	if len(r.Messages) != 0 || r.NextMsgID.Int64() != m2 {
		t.Fatalf("page over a deleted message: %+v", r)
	}
	if r := e.messages(peer, cid, 0, 50); len(r.Messages) != 3 {
		t.Fatalf("the peer sees %d messages", len(r.Messages))
	}
	list, _ := e.syncAll(me, "0", 100)
	if c := list[cid]; c.Unread != 1 || c.Preview == nil || c.Preview.MsgID.Int64() != m1 || c.LastMsgID.Int64() != m3 {
		t.Fatalf("my list after deleting two unread messages: %+v", c)
	}
	_ = from
	// One push per message deleted; the repeat changed nothing.
	if n := signals(t, e.rdb, cid, protocol.CmdDeleteMessage); n != 2 {
		t.Fatalf("%d DELETE signals, want 2", n)
	}
	// One DELETE mailbox event for every device of mine per message deleted
	// (the repeat wrote none), so another device that was offline and holds
	// them drops them on sync; the peer gets none.
	for _, device := range []string{"dev", "phone-that-was-offline"} {
		r, _, err := e.syncInbox(ctx, asker{UserID: me, DeviceID: device}, wire[protocol.SyncInboxRequest](body("dialog_cursor", "0", "mailbox_seq", "0")))
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, ev := range r.Events {
			var p protocol.MessageRef
			if err := json.Unmarshal(ev.Payload, &p); err != nil || ev.EventType != protocol.EventDelete || ev.ConversationID.Int64() != cid ||
				p.MsgID != ev.MsgID || p.ConversationID.Int64() != cid {
				t.Fatalf("device %s: event %+v payload %s", device, ev, ev.Payload)
			}
			got = append(got, ev.MsgID.Int64())
		}
		if !reflect.DeepEqual(got, []int64{m2, m3}) || r.MailboxSeq != 2 {
			t.Fatalf("device %s: DELETE events for %v (mailbox_seq %s), want %v", device, got, r.MailboxSeq, []int64{m2, m3})
		}
	}
	if r, _ := e.sync(peer, "0", 0, 100); len(r.Events) != 0 {
		t.Fatalf("the peer got %d events", len(r.Events))
	}
}

func TestSettings(t *testing.T) {
	e := newEnv(t, message.Config{})
	ctx := context.Background()
	u := e.users(3)
	cid, _ := e.msg(u[1], u[0], "hi")
	yes, no := true, false
	tests := []struct {
		name          string
		user          int64
		body          []byte
		want          errcode.Code
		muted, pinned bool
	}{
		{"pin", u[0], body("conversation_id", id(cid), "pinned", yes), errcode.OK, false, true},
		{"mute, pin unchanged", u[0], body("conversation_id", id(cid), "muted", yes), errcode.OK, true, true},
		{"unpin", u[0], body("conversation_id", id(cid), "pinned", no), errcode.OK, true, false},
		{"unpin again: no change, no push", u[0], body("conversation_id", id(cid), "pinned", no, "muted", yes), errcode.OK, true, false},
		{"nothing", u[0], body("conversation_id", id(cid)), errcode.OK, true, false},
		{"not a member", u[2], body("conversation_id", id(cid), "muted", yes), errcode.Forbidden, false, false},
		{"no conversation", u[0], body("muted", yes), errcode.InvalidArgument, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := e.send.Settings(ctx, message.Sender{UserID: tt.user, DeviceID: "dev"}, settingsReq(tt.body))
			if code(err) != tt.want {
				t.Fatalf("code %s (%v)", code(err), err)
			}
			if err != nil {
				return
			}
			list, _ := e.syncAll(tt.user, "0", 100)
			if r.Muted != tt.muted || r.Pinned != tt.pinned || list[cid].Muted != tt.muted || list[cid].Pinned != tt.pinned {
				t.Fatalf("answer %+v list %+v", r, list[cid])
			}
		})
	}
	// One push per change: the repeat that changed nothing pushed nothing.
	if n := signals(t, e.rdb, cid, protocol.CmdConversationSettings); n != 3 {
		t.Fatalf("%d settings signals, want 3", n)
	}
}

// A muted conversation reports unread 0 from the cold path and from
// deliver's incremental one; unmuting counts every message after the read
// position again, including those that arrived while muted.
func TestMutedConversationUnread(t *testing.T) {
	e := newEnv(t, message.Config{})
	ctx := context.Background()
	u := e.users(2)
	me, peer := u[0], u[1]
	cid, _ := e.msg(peer, me, "before the mute")
	mute := func(on bool) {
		t.Helper()
		if _, err := e.send.Settings(ctx, message.Sender{UserID: me, DeviceID: "dev"}, settingsReq(body("conversation_id", id(cid), "muted", on))); err != nil {
			t.Fatal(err)
		}
	}
	unread := func() int64 {
		t.Helper()
		list, _ := e.syncAll(me, "0", 100)
		return list[cid].Unread
	}
	if n := unread(); n != 1 {
		t.Fatalf("unread %d before the mute, want 1", n)
	}
	mute(true)
	if n := unread(); n != 0 { // cold: the settings change dropped the state
		t.Fatalf("muted: cold unread %d, want 0", n)
	}
	e.msg(peer, me, "while muted") // applied incrementally by e.msg
	if n := unread(); n != 0 {
		t.Fatalf("muted: unread %d after a new message, want 0", n)
	}
	mute(false)
	if n := unread(); n != 2 {
		t.Fatalf("unmuted: unread %d, want 2", n)
	}
	e.msg(peer, me, "after")
	if n := unread(); n != 3 {
		t.Fatalf("unmuted: unread %d after a new message, want 3", n)
	}
}

func TestSyncInput(t *testing.T) {
	e := newEnv(t, message.Config{})
	ctx := context.Background()
	u := e.users(3)
	me, peer, stranger := u[0], u[1], u[2]
	cid, _ := e.msg(peer, me, "hi")
	// 205 messages, inserted directly (the send path is tested elsewhere).
	for i := range 205 {
		if _, err := e.st.InsertMessage(ctx, store.NewMessage{ConversationID: cid, SenderID: peer, ClientMsgID: fmt.Sprintf("bulk%d", i),
			MessageType: 1, Content: []byte(`{"t":1,"text":"x"}`)}, func(ctx context.Context, last int64, _ time.Time) (int64, error) {
			return e.gen.NextAfter(ctx, last)
		}); err != nil {
			t.Fatal(err)
		}
	}
	user := asker{UserID: me, DeviceID: "dev"}
	inboxTests := []struct {
		name string
		body string
		want errcode.Code
	}{
		{"fresh", `{"dialog_cursor":"0","mailbox_seq":"0","limit":10}`, errcode.OK},
		{"numeric zero cursor", `{"dialog_cursor":0,"mailbox_seq":0}`, errcode.OK},
		{"cursor without version", `{"dialog_cursor":"abc"}`, errcode.InvalidArgument},
		{"cursor with a bad version", `{"dialog_cursor":"e.x"}`, errcode.InvalidArgument},
		{"negative version", `{"dialog_cursor":"e.-1"}`, errcode.InvalidArgument},
		{"negative mailbox seq", `{"mailbox_seq":"-1"}`, errcode.InvalidArgument},
		{"negative limit", `{"limit":-1}`, errcode.InvalidArgument},
	}
	for _, tt := range inboxTests {
		t.Run("inbox "+tt.name, func(t *testing.T) {
			_, _, err := e.syncInbox(ctx, user, wire[protocol.SyncInboxRequest]([]byte(tt.body)))
			if code(err) != tt.want {
				t.Fatalf("code %s (%v)", code(err), err)
			}
		})
	}
	msgTests := []struct {
		name  string
		user  int64
		body  string
		want  errcode.Code
		count int
		more  bool
	}{
		{"limit over 200 is clamped", me, fmt.Sprintf(`{"conversation_id":"%d","last_msg_id":"0","limit":1000}`, cid), errcode.OK, 200, true},
		{"default limit", me, fmt.Sprintf(`{"conversation_id":%d}`, cid), errcode.OK, 50, true},
		{"last page", me, fmt.Sprintf(`{"conversation_id":"%d","limit":200,"last_msg_id":"1"}`, cid), errcode.OK, 200, true},
		{"not a member", stranger, fmt.Sprintf(`{"conversation_id":"%d"}`, cid), errcode.Forbidden, 0, false},
		{"unknown conversation", me, `{"conversation_id":"123"}`, errcode.Forbidden, 0, false},
		{"missing conversation_id", me, `{"last_msg_id":"0"}`, errcode.InvalidArgument, 0, false},
		{"negative cursor", me, fmt.Sprintf(`{"conversation_id":"%d","last_msg_id":"-1"}`, cid), errcode.InvalidArgument, 0, false},
		{"negative limit", me, fmt.Sprintf(`{"conversation_id":"%d","limit":-5}`, cid), errcode.InvalidArgument, 0, false},
	}
	for _, tt := range msgTests {
		t.Run("messages "+tt.name, func(t *testing.T) {
			r, more, err := e.syncMessages(ctx, asker{UserID: tt.user, DeviceID: "dev"}, wire[protocol.SyncMessagesRequest]([]byte(tt.body)))
			if code(err) != tt.want {
				t.Fatalf("code %s (%v)", code(err), err)
			}
			if err != nil {
				return
			}
			if len(r.Messages) != tt.count || more != tt.more {
				t.Fatalf("%d messages more %v", len(r.Messages), more)
			}
			for i := 1; i < len(r.Messages); i++ {
				if r.Messages[i].MsgID <= r.Messages[i-1].MsgID {
					t.Fatal("not ascending")
				}
			}
		})
	}
	// Paging to the end: 206 messages in pages of 200 → 200 + 6, last one
	// not "more".
	r, more, _ := e.syncMessages(ctx, user, wire[protocol.SyncMessagesRequest](body("conversation_id", id(cid), "limit", 200)))
	r2, more2, _ := e.syncMessages(ctx, user, wire[protocol.SyncMessagesRequest](body("conversation_id", id(cid), "limit", 200, "last_msg_id", r.NextMsgID.String())))
	if !more || more2 || len(r2.Messages) != 6 {
		t.Fatalf("pages: more %v, then %d more %v", more, len(r2.Messages), more2)
	}
	r3, more3, _ := e.syncMessages(ctx, user, wire[protocol.SyncMessagesRequest](body("conversation_id", id(cid), "last_msg_id", r2.NextMsgID.String())))
	if more3 || len(r3.Messages) != 0 || r3.NextMsgID != r2.NextMsgID {
		t.Fatalf("past the end: %+v", r3)
	}
}

func TestMailboxConcurrentAppends(t *testing.T) {
	e := newEnv(t, message.Config{})
	ctx := context.Background()
	uid := e.users(1)[0]
	const writers, each = 6, 20
	total := writers * each
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				p, _ := json.Marshal(map[string]int{"w": w, "i": i})
				if _, err := e.mb.Append(ctx, []store.MailboxEvent{{UserID: uid, EventType: protocol.EventMissedMessage, MsgID: int64(i + 1), Payload: p}}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	// A reader polling seq > cursor must see every seq, in order, never
	// skipping one that commits later.
	var cursor int64
	finished := false
	for !finished {
		select {
		case <-done:
			finished = true
		default:
		}
		evs, _, err := e.mb.Since(ctx, uid, "dev", cursor, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Seq != cursor+1 {
				t.Fatalf("reader at %d got seq %d", cursor, ev.Seq)
			}
			cursor = ev.Seq
		}
	}
	for {
		evs, _, err := e.mb.Since(ctx, uid, "dev", cursor, 50)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if ev.Seq != cursor+1 {
				t.Fatalf("reader at %d got seq %d", cursor, ev.Seq)
			}
			cursor = ev.Seq
		}
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if cursor != int64(total) {
		t.Fatalf("read up to %d, want %d", cursor, total)
	}
}

func TestMailboxDevices(t *testing.T) {
	e := newEnv(t, message.Config{})
	ctx := context.Background()
	uid := e.users(1)[0]
	seqs, err := e.mb.Append(ctx, []store.MailboxEvent{
		{UserID: uid, DeviceID: "phone", EventType: protocol.EventKick, Payload: []byte(`{"reason":"x"}`)},
		{UserID: uid, EventType: protocol.EventFriend},
		{UserID: uid, DeviceID: "laptop", EventType: protocol.EventKick},
	})
	if err != nil || fmt.Sprint(seqs) != "[1 2 3]" {
		t.Fatalf("seqs %v %v", seqs, err)
	}
	evs, _, _ := e.mb.Since(ctx, uid, "phone", 0, 10)
	if len(evs) != 2 || evs[0].Seq != 1 || evs[1].Seq != 2 || string(evs[1].Payload) != "{}" {
		t.Fatalf("phone events %+v", evs)
	}
	bad := []store.MailboxEvent{
		{UserID: 0, EventType: 1},
		{UserID: uid, EventType: 9},
		{UserID: uid, EventType: 1, Payload: []byte(`[1]`)},
		{UserID: uid, EventType: 1, DeviceID: "bad device"},
	}
	for i, b := range bad {
		if _, err := e.mb.Append(ctx, []store.MailboxEvent{b}); err == nil {
			t.Errorf("bad event %d accepted", i)
		}
	}
}

// A group conversation: a member's list shows it with its group id and the
// unread of the others' messages, from the cold path and incrementally
// alike; members page its messages; a non-member can neither send nor
// sync; a member removed stops seeing it in SYNC_MESSAGES.
func TestGroupConversationInListAndSync(t *testing.T) {
	e := newEnv(t, message.Config{})
	ctx := context.Background()
	u := e.users(4)
	owner, a, b, stranger := u[0], u[1], u[2], u[3]
	ch, err := e.group.Create(ctx, group.CreateRequest{OwnerID: owner, MemberIDs: []int64{a, b}, Name: "team"})
	if err != nil {
		t.Fatal(err)
	}
	gid, cid := ch.Group.GroupID, ch.Group.ConversationID
	var ids []int64
	for i, from := range []int64{owner, a, a} {
		ack, err := e.send.Send(ctx, message.Sender{UserID: from, DeviceID: "dev"},
			sendReq(body("group_id", id(gid), "client_msg_id", fmt.Sprint("g", i), "message_type", 1, "content", map[string]any{"t": 1, "text": fmt.Sprint("m", i)})))
		if err != nil {
			t.Fatal(err)
		}
		if ack.ConversationID != cid {
			t.Fatalf("sent into conversation %d, the group's is %d", ack.ConversationID, cid)
		}
		ids = append(ids, ack.MsgID)
	}
	// b's list from MySQL (cold): three unread; a's: the owner's one.
	for uid, want := range map[int64]int64{b: 3, a: 1, owner: 2} {
		list, _ := e.syncAll(uid, "0", 100)
		c, ok := list[cid]
		if !ok || c.ConversationType != protocol.ConversationGroup || c.GroupID.Int64() != gid || c.Unread != want || c.LastMsgID.Int64() != ids[2] {
			t.Fatalf("user %d: list entry %+v (present %v), want group %d unread %d", uid, c, ok, gid, want)
		}
	}
	// One more, applied incrementally on top of the cold states.
	ack, err := e.send.Send(ctx, message.Sender{UserID: owner, DeviceID: "dev"},
		sendReq(body("conversation_id", id(cid), "client_msg_id", "g3", "message_type", 1, "content", map[string]any{"t": 1, "text": "m3"})))
	if err != nil {
		t.Fatal(err)
	}
	e.deliver(ack.MsgID)
	if list, _ := e.syncAll(b, "0", 100); list[cid].Unread != 4 {
		t.Fatalf("b's unread after an incremental message: %d, want 4", list[cid].Unread)
	}
	if r := e.messages(b, cid, 0, 50); len(r.Messages) != 4 || r.Messages[0].ConversationType != protocol.ConversationGroup {
		t.Fatalf("b pages %d messages of the group", len(r.Messages))
	}
	// Strangers can neither send nor sync.
	if _, err := e.send.Send(ctx, message.Sender{UserID: stranger, DeviceID: "dev"},
		sendReq(body("group_id", id(gid), "client_msg_id", "s", "message_type", 1, "content", map[string]any{"t": 1, "text": "x"}))); code(err) != errcode.Forbidden {
		t.Fatalf("a stranger's send: %v", err)
	}
	if _, _, err := e.syncMessages(ctx, asker{UserID: stranger, DeviceID: "dev"}, wire[protocol.SyncMessagesRequest](body("conversation_id", id(cid)))); code(err) != errcode.Forbidden {
		t.Fatalf("a stranger's sync: %v", err)
	}
	// A removed member can no longer sync it or send to it.
	if _, err := e.group.RemoveMembers(ctx, group.MembersChangeRequest{ActorID: owner, GroupID: gid, UserIDs: []int64{b}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.syncMessages(ctx, asker{UserID: b, DeviceID: "dev"}, wire[protocol.SyncMessagesRequest](body("conversation_id", id(cid)))); code(err) != errcode.Forbidden {
		t.Fatalf("a removed member's sync: %v", err)
	}
	if _, err := e.send.Send(ctx, message.Sender{UserID: b, DeviceID: "dev"},
		sendReq(body("group_id", id(gid), "client_msg_id", "late", "message_type", 1, "content", map[string]any{"t": 1, "text": "x"}))); code(err) != errcode.Forbidden {
		t.Fatalf("a removed member's send: %v", err)
	}
}

// A group recall writes no per-member rows in the request: the message is
// marked recalled, and one SIGNAL job asks deliver for the members' list
// invalidations and RECALL events. Recalling again queues it again (the
// first may have been lost after the commit).
func TestGroupRecallLeavesMemberWorkToDeliver(t *testing.T) {
	e := newEnv(t, message.Config{})
	ctx := context.Background()
	u := e.users(3)
	ch, err := e.group.Create(ctx, group.CreateRequest{OwnerID: u[0], MemberIDs: u[1:], Name: "team"})
	if err != nil {
		t.Fatal(err)
	}
	cid := ch.Group.ConversationID
	ack, err := e.send.Send(ctx, message.Sender{UserID: u[1], DeviceID: "dev"},
		sendReq(body("group_id", id(ch.Group.GroupID), "client_msg_id", "r", "message_type", 1, "content", map[string]any{"t": 1, "text": "oops"})))
	if err != nil {
		t.Fatal(err)
	}
	events := func() int {
		var n int
		if err := e.st.DB().Get(&n, "SELECT COUNT(*) FROM t_mailbox_events WHERE conversation_id = ? AND event_type = ?", cid, protocol.EventRecall); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Round 2 repeats a recall whose job was queued: nothing more is
	// queued. Before round 3 the marker is gone, as when the first
	// attempt committed but failed before queuing: the repeat queues it.
	wantJobs := []int{0, 1, 1, 2}
	for round := 1; round <= 3; round++ {
		if round == 3 {
			if err := e.rdb.Del(ctx, rediskey.RecallPushed(ack.MsgID)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.send.Recall(ctx, message.Sender{UserID: u[1], DeviceID: "dev"}, refReq(body("msg_id", id(ack.MsgID)))); err != nil {
			t.Fatal(err)
		}
		if n := events(); n != 0 {
			t.Fatalf("round %d: %d RECALL events written in the request", round, n)
		}
		jobs := 0
		msgs, err := e.rdb.XRange(ctx, rediskey.Deliver(rediskey.Partition(cid, partitions)), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			j, err := queue.Decode(m)
			if err != nil {
				t.Fatal(err)
			}
			if j.GetConversationId() == cid && j.GetKind() == queuev1.JobKind_JOB_KIND_SIGNAL && j.GetCommand() == uint32(protocol.CmdRecallMessage) {
				if j.GetMailboxEventType() != protocol.EventRecall || j.GetConversationType() != protocol.ConversationGroup || len(j.GetRecipients()) != 0 || j.GetMsgId() != ack.MsgID {
					t.Fatalf("recall job %+v", j)
				}
				jobs++
			}
		}
		if jobs != wantJobs[round] {
			t.Fatalf("round %d: %d recall jobs queued, want %d", round, jobs, wantJobs[round])
		}
	}
	if r := e.messages(u[2], cid, 0, 10); len(r.Messages) != 1 || r.Messages[0].Status != protocol.StatusRecalled {
		t.Fatalf("the recalled message in history: %+v", r.Messages)
	}
}

// Hiding a conversation takes it out of the list (hidden: true) until its
// next message, which brings it back with the unread of every message
// since the read position; the flag lives in MySQL, so a Redis flush keeps
// it.
func TestHiddenConversation(t *testing.T) {
	e := newEnv(t, message.Config{})
	ctx := context.Background()
	u := e.users(2)
	me, peer := u[0], u[1]
	cid, _ := e.msg(peer, me, "one")
	e.msg(peer, me, "two")
	settings := func(hidden bool) *message.Settings {
		t.Helper()
		r, err := e.send.Settings(ctx, message.Sender{UserID: me, DeviceID: "dev"}, settingsReq(body("conversation_id", id(cid), "hidden", hidden)))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	entry := func() protocol.Conversation {
		t.Helper()
		list, _ := e.syncAll(me, "0", 100)
		return list[cid]
	}
	if r := settings(true); !r.Hidden {
		t.Fatalf("answer %+v", r)
	}
	if c := entry(); !c.Hidden || c.Unread != 2 {
		t.Fatalf("after hiding: %+v", c)
	}
	// Redis loses the lists: the cold path still knows.
	if err := e.rdb.Del(ctx, dialog.StateKey(me, cid), dialog.ListKey(me), dialog.VersionKey(me), dialog.BuiltKey(me)).Err(); err != nil {
		t.Fatal(err)
	}
	if c := entry(); !c.Hidden || c.Unread != 2 {
		t.Fatalf("hidden after a Redis flush: %+v", c)
	}
	e.msg(peer, me, "three")
	if c := entry(); c.Hidden || c.Unread != 3 {
		t.Fatalf("after a new message: %+v, want shown with unread 3", c)
	}
	// Hidden again, then shown by the user.
	settings(true)
	if r := settings(false); r.Hidden {
		t.Fatalf("unhide answer %+v", r)
	}
	if c := entry(); c.Hidden {
		t.Fatalf("after unhiding: %+v", c)
	}
}
