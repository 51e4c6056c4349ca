package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// modelServer answers SYNC_INBOX and SYNC_MESSAGES the way logic does
// (docs/protocol.md §8): a change version per conversation, a mailbox with seqs,
// pages bounded by limit, the last page flagged, deleted-for-me messages
// skipped but scanned. It logs every request so tests can check what a
// runner asked for.
type modelServer struct {
	version int64
	convs   map[int64]*modelConv
	events  []MailboxEvent
	deleted map[int64]bool
	// failMessages makes SYNC_MESSAGES of a conversation fail with err.
	failMessages map[int64]error
	calls        []string
}

type modelConv struct {
	conv    Conversation
	version int64
	msgs    []protocol.Message
}

func newModel() *modelServer {
	return &modelServer{convs: map[int64]*modelConv{}, deleted: map[int64]bool{}, failMessages: map[int64]error{}}
}

func (s *modelServer) touch(cid int64) *modelConv {
	c := s.convs[cid]
	if c == nil {
		c = &modelConv{conv: Conversation{ConversationID: jsonid.ID(cid), ConversationType: protocol.ConversationP2P, PeerID: jsonid.ID(cid + 1000)}}
		s.convs[cid] = c
	}
	s.version++
	c.version = s.version
	return c
}

// send stores message id in cid from sender; unread counts it.
func (s *modelServer) send(cid, id int64, text string) {
	c := s.touch(cid)
	content, _ := TextContent(text)
	c.msgs = append(c.msgs, protocol.Message{MsgID: jsonid.ID(id), ConversationID: jsonid.ID(cid), ConversationType: 1,
		SenderID: jsonid.ID(cid + 1000), MessageType: 1, Content: content, CreatedAt: id, Status: protocol.StatusNormal})
	c.conv.LastMsgID, c.conv.LastMsgAt = jsonid.ID(id), id
	c.conv.Unread++
	c.conv.Preview = &Preview{MsgID: jsonid.ID(id), MessageType: 1, Text: text, SenderID: jsonid.ID(cid + 1000)}
}

func (s *modelServer) recall(cid, id int64) {
	c := s.touch(cid)
	for i := range c.msgs {
		if c.msgs[i].MsgID.Int64() == id {
			c.msgs[i].Status, c.msgs[i].Content = protocol.StatusRecalled, nil
		}
	}
	c.conv.Unread--
	s.event(EventRecall, cid, id)
}

func (s *modelServer) deleteForMe(cid, id int64) {
	s.touch(cid)
	s.deleted[id] = true
	s.event(EventDelete, cid, id)
}

func (s *modelServer) event(typ int, cid, id int64) {
	s.events = append(s.events, MailboxEvent{Seq: jsonid.ID(len(s.events) + 1), EventType: typ,
		ConversationID: jsonid.ID(cid), MsgID: jsonid.ID(id), Payload: json.RawMessage(`{}`)})
}

func (s *modelServer) SyncInboxPage(_ context.Context, dialogCursor, mailboxSeq string, limit int) (InboxPage, error) {
	s.calls = append(s.calls, fmt.Sprintf("inbox %s %s", dialogCursor, mailboxSeq))
	if limit <= 0 {
		limit = 100
	}
	from, err := strconv.ParseInt(strings.TrimPrefix(dialogCursor, "v"), 10, 64)
	if err != nil {
		return InboxPage{}, &CodeError{Command: protocol.CmdSyncInbox, Code: errcode.InvalidArgument}
	}
	seq, _ := strconv.ParseInt(mailboxSeq, 10, 64)
	var changes []*modelConv
	for _, c := range s.convs {
		if c.version > from {
			changes = append(changes, c)
		}
	}
	sort.Slice(changes, func(i, j int) bool { return changes[i].version < changes[j].version })
	more := len(changes) > limit
	if more {
		changes = changes[:limit]
	}
	p := InboxPage{}
	last := from
	for _, c := range changes {
		p.Conversations = append(p.Conversations, c.conv)
		last = c.version
	}
	p.DialogCursor = "v" + strconv.FormatInt(last, 10)
	p.MailboxSeq = jsonid.ID(seq)
	for _, e := range s.events {
		if e.Seq.Int64() > seq {
			if len(p.Events) == limit {
				more = true
				break
			}
			p.Events = append(p.Events, e)
			p.MailboxSeq = e.Seq
		}
	}
	p.Last = !more
	return p, nil
}

func (s *modelServer) SyncMessagesPage(_ context.Context, cid, last int64, limit int) (MessagesPage, error) {
	s.calls = append(s.calls, fmt.Sprintf("messages %d %d", cid, last))
	if err := s.failMessages[cid]; err != nil {
		return MessagesPage{}, err
	}
	c := s.convs[cid]
	if c == nil {
		return MessagesPage{}, &CodeError{Command: protocol.CmdSyncMessages, Code: errcode.Forbidden}
	}
	var rows []protocol.Message
	for _, m := range c.msgs {
		if m.MsgID.Int64() > last {
			rows = append(rows, m)
		}
	}
	more := len(rows) > limit
	if more {
		rows = rows[:limit]
	}
	p := MessagesPage{Last: !more}
	p.ConversationID, p.NextMsgID, p.Messages = jsonid.ID(cid), jsonid.ID(last), []protocol.Message{}
	for _, m := range rows {
		p.NextMsgID = m.MsgID
		if !s.deleted[m.MsgID.Int64()] {
			p.Messages = append(p.Messages, m)
		}
	}
	return p, nil
}

func (s *modelServer) Read(_ context.Context, cid, msgID int64) (ReadReply, error) {
	s.calls = append(s.calls, fmt.Sprintf("read %d %d", cid, msgID))
	c := s.convs[cid]
	if c == nil {
		return ReadReply{}, &CodeError{Command: protocol.CmdReadMessage, Code: errcode.Forbidden}
	}
	s.touch(cid)
	c.conv.Unread = 0
	return ReadReply{ConversationID: jsonid.ID(cid), MsgID: jsonid.ID(min(msgID, c.conv.LastMsgID.Int64()))}, nil
}

// syncStep is one Sync of a table case: the server changes first, then
// the runner syncs (from a runner reloaded from the file when reload).
type syncStep struct {
	server func(s *modelServer)
	reload bool
	// want: msg ids per conversation, event "type:msg" strings, the
	// changed conversations with their unread ("cid:unread"), the
	// SYNC_MESSAGES requests ("cid from"), removed conversations.
	wantMsgs     map[int64][]int64
	wantEvents   []string
	wantChanged  []string
	wantRequests []string
	wantRemoved  []int64
	wantErr      string
	// wantCursors are the per-conversation cursors after the step.
	wantCursors map[int64]int64
}

func TestSyncRunner(t *testing.T) {
	cases := []struct {
		name  string
		opts  SyncRunnerOptions
		steps []syncStep
	}{
		{
			name: "fresh device pages inbox and messages",
			opts: SyncRunnerOptions{InboxLimit: 1, MessagesLimit: 2},
			steps: []syncStep{{
				server: func(s *modelServer) {
					s.send(1, 10, "a")
					s.send(2, 20, "b")
					s.send(1, 11, "c")
					s.send(1, 12, "d")
				},
				wantMsgs:     map[int64][]int64{1: {10, 11, 12}, 2: {20}},
				wantChanged:  []string{"1:3", "2:1"},
				wantRequests: []string{"1 0", "1 11", "2 0"},
				wantCursors:  map[int64]int64{1: 12, 2: 20},
			}},
		},
		{
			name: "second login fetches only what is new",
			steps: []syncStep{
				{
					server:   func(s *modelServer) { s.send(1, 10, "a"); s.send(2, 20, "b") },
					wantMsgs: map[int64][]int64{1: {10}, 2: {20}}, wantChanged: []string{"1:1", "2:1"},
					wantRequests: []string{"1 0", "2 0"},
				},
				{
					reload:       true,
					server:       func(s *modelServer) { s.send(2, 21, "c"); s.send(2, 22, "d") },
					wantMsgs:     map[int64][]int64{2: {21, 22}},
					wantChanged:  []string{"2:3"},
					wantRequests: []string{"2 20"},
					wantCursors:  map[int64]int64{1: 10, 2: 22},
				},
				{reload: true, wantMsgs: map[int64][]int64{}, wantRequests: []string{}},
			},
		},
		{
			name: "recall and delete events are reported once",
			steps: []syncStep{
				{
					server:   func(s *modelServer) { s.send(1, 10, "a"); s.send(1, 11, "b") },
					wantMsgs: map[int64][]int64{1: {10, 11}}, wantChanged: []string{"1:2"},
				},
				{
					reload: true,
					server: func(s *modelServer) {
						s.recall(1, 10)
						s.deleteForMe(1, 11)
						s.send(1, 12, "c")
					},
					wantMsgs:    map[int64][]int64{1: {12}},
					wantEvents:  []string{"1:10", "6:11"},
					wantChanged: []string{"1:2"},
				},
				{reload: true, wantMsgs: map[int64][]int64{}},
			},
		},
		{
			name: "a message recalled before it was fetched comes as a tombstone only",
			steps: []syncStep{{
				server:      func(s *modelServer) { s.send(1, 10, "a"); s.send(1, 11, "b"); s.recall(1, 10) },
				wantMsgs:    map[int64][]int64{1: {10, 11}},
				wantChanged: []string{"1:1"},
			}},
		},
		{
			name: "a message deleted on another device is never fetched",
			steps: []syncStep{{
				server:      func(s *modelServer) { s.send(1, 10, "a"); s.send(1, 11, "b"); s.deleteForMe(1, 11) },
				wantMsgs:    map[int64][]int64{1: {10}},
				wantEvents:  []string{"6:11"},
				wantChanged: []string{"1:2"},
				wantCursors: map[int64]int64{1: 11},
			}},
		},
		{
			name: "an interrupted sync resumes the unfinished conversation",
			steps: []syncStep{
				{
					server: func(s *modelServer) {
						s.send(1, 10, "a")
						s.send(2, 20, "b")
						s.failMessages[2] = errors.New("connection lost")
					},
					wantMsgs:    map[int64][]int64{1: {10}},
					wantChanged: []string{"1:1", "2:1"},
					wantErr:     "connection lost",
					wantCursors: map[int64]int64{1: 10},
				},
				{
					reload:       true,
					server:       func(s *modelServer) { delete(s.failMessages, 2) },
					wantMsgs:     map[int64][]int64{2: {20}},
					wantRequests: []string{"2 0"},
					wantCursors:  map[int64]int64{1: 10, 2: 20},
				},
			},
		},
		{
			name: "a conversation the user left is removed",
			steps: []syncStep{
				{server: func(s *modelServer) { s.send(1, 10, "a"); s.send(2, 20, "b") }, wantMsgs: map[int64][]int64{1: {10}, 2: {20}}, wantChanged: []string{"1:1", "2:1"}},
				{
					server: func(s *modelServer) {
						s.send(2, 21, "c")
						s.failMessages[2] = &CodeError{Command: protocol.CmdSyncMessages, Code: errcode.Forbidden}
					},
					wantMsgs: map[int64][]int64{}, wantRemoved: []int64{2}, wantCursors: map[int64]int64{1: 10},
				},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := FileStateStore{Path: filepath.Join(t.TempDir(), "state.json")}
			srv := newModel()
			newRunner := func() *SyncRunner {
				r, err := NewSyncRunner(ctx, store, 7, "dev-1", tc.opts)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			r := newRunner()
			for i, st := range tc.steps {
				if st.reload {
					r = newRunner()
				}
				if st.server != nil {
					st.server(srv)
				}
				srv.calls = nil
				res, err := r.Sync(ctx, srv)
				if st.wantErr == "" && err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)) {
					t.Fatalf("step %d: err %v, want %q", i, err, st.wantErr)
				}
				gotMsgs := map[int64][]int64{}
				for cid, ms := range res.Messages {
					for _, m := range ms {
						gotMsgs[cid] = append(gotMsgs[cid], m.MsgID.Int64())
					}
				}
				if st.wantMsgs != nil && !reflect.DeepEqual(gotMsgs, st.wantMsgs) {
					t.Fatalf("step %d: messages %v, want %v", i, gotMsgs, st.wantMsgs)
				}
				var gotEvents []string
				for _, e := range res.Events {
					gotEvents = append(gotEvents, fmt.Sprintf("%d:%s", e.EventType, e.MsgID))
				}
				if !reflect.DeepEqual(gotEvents, st.wantEvents) {
					t.Fatalf("step %d: events %v, want %v", i, gotEvents, st.wantEvents)
				}
				if st.wantChanged != nil {
					var got []string
					for _, c := range res.Changed {
						got = append(got, fmt.Sprintf("%s:%d", c.ConversationID, c.Unread))
					}
					sort.Strings(got)
					if !reflect.DeepEqual(got, st.wantChanged) {
						t.Fatalf("step %d: changed %v, want %v", i, got, st.wantChanged)
					}
				}
				if st.wantRequests != nil {
					got := []string{}
					for _, c := range srv.calls {
						if rest, ok := strings.CutPrefix(c, "messages "); ok {
							got = append(got, rest)
						}
					}
					if !reflect.DeepEqual(got, st.wantRequests) {
						t.Fatalf("step %d: SYNC_MESSAGES requests %v, want %v (all calls %v)", i, got, st.wantRequests, srv.calls)
					}
				}
				if !reflect.DeepEqual(res.Removed, st.wantRemoved) {
					t.Fatalf("step %d: removed %v, want %v", i, res.Removed, st.wantRemoved)
				}
				if st.wantCursors != nil {
					// What is on disk, not only in memory.
					saved, ok, err := store.Load(ctx)
					if err != nil || !ok {
						t.Fatalf("step %d: load state: %v %v", i, ok, err)
					}
					got := map[int64]int64{}
					for cid, id := range saved.LastMsgIDs {
						got[cid] = id.Int64()
					}
					if !reflect.DeepEqual(got, st.wantCursors) {
						t.Fatalf("step %d: saved cursors %v, want %v", i, got, st.wantCursors)
					}
					if saved.DialogCursor != r.State().DialogCursor || saved.MailboxSeq != r.State().MailboxSeq {
						t.Fatalf("step %d: saved inbox cursors %q/%s, runner has %q/%s", i, saved.DialogCursor, saved.MailboxSeq, r.State().DialogCursor, r.State().MailboxSeq)
					}
				}
			}
		})
	}
}

func TestSyncRunnerInboxCursorsAndPaging(t *testing.T) {
	ctx := context.Background()
	srv := newModel()
	for cid := int64(1); cid <= 5; cid++ {
		srv.send(cid, cid*10, "x")
	}
	srv.event(EventKick, 0, 0)
	srv.event(EventMembership, 3, 0)
	r, err := NewSyncRunner(ctx, FileStateStore{Path: filepath.Join(t.TempDir(), "s.json")}, 7, "d", SyncRunnerOptions{InboxLimit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Sync(ctx, srv); err != nil {
		t.Fatal(err)
	}
	var inbox []string
	for _, c := range srv.calls {
		if strings.HasPrefix(c, "inbox") {
			inbox = append(inbox, c)
		}
	}
	want := []string{"inbox 0 0", "inbox v2 2", "inbox v4 2"}
	if !reflect.DeepEqual(inbox, want) {
		t.Fatalf("inbox requests %v, want %v", inbox, want)
	}
	st := r.State()
	if st.DialogCursor != "v5" || st.MailboxSeq != 2 || len(st.Conversations) != 5 {
		t.Fatalf("state %+v", st)
	}
}

func TestSyncRunnerRefusesAnotherDevicesState(t *testing.T) {
	ctx := context.Background()
	store := FileStateStore{Path: filepath.Join(t.TempDir(), "s.json")}
	if err := store.Save(ctx, NewSyncState(7, "phone")); err != nil {
		t.Fatal(err)
	}
	for _, who := range []struct {
		user   int64
		device string
		ok     bool
	}{{7, "phone", true}, {7, "laptop", false}, {8, "phone", false}} {
		_, err := NewSyncRunner(ctx, store, who.user, who.device, SyncRunnerOptions{})
		if (err == nil) != who.ok {
			t.Fatalf("user %d device %s: err %v, want ok=%v", who.user, who.device, err, who.ok)
		}
	}
}

func TestSyncRunnerConversationsOrderAndMarkRead(t *testing.T) {
	ctx := context.Background()
	srv := newModel()
	srv.send(1, 10, "old")
	srv.send(2, 20, "new")
	srv.send(3, 5, "pinned")
	srv.convs[3].conv.Pinned = true
	r, err := NewSyncRunner(ctx, FileStateStore{Path: filepath.Join(t.TempDir(), "s.json")}, 7, "d", SyncRunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.MarkRead(ctx, srv, 1); err == nil {
		t.Fatal("read before any sync succeeded")
	}
	if _, err := r.Sync(ctx, srv); err != nil {
		t.Fatal(err)
	}
	var order []int64
	for _, c := range r.Conversations() {
		order = append(order, c.ConversationID.Int64())
	}
	if !reflect.DeepEqual(order, []int64{3, 2, 1}) {
		t.Fatalf("order %v, want pinned 3 then 2, 1", order)
	}
	reply, err := r.MarkRead(ctx, srv, 2)
	if err != nil || reply.MsgID != 20 {
		t.Fatalf("read %+v %v", reply, err)
	}
	if c, _ := r.Conversation(2); c.Unread != 0 {
		t.Fatalf("unread %d after read", c.Unread)
	}
	if got := srv.calls[len(srv.calls)-1]; got != "read 2 20" {
		t.Fatalf("request %q", got)
	}
}

func TestSyncRunnerNotePushDedupesMailboxEvent(t *testing.T) {
	ctx := context.Background()
	srv := newModel()
	srv.send(1, 10, "a")
	srv.send(1, 11, "b")
	r, err := NewSyncRunner(ctx, FileStateStore{Path: filepath.Join(t.TempDir(), "s.json")}, 7, "d", SyncRunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Sync(ctx, srv); err != nil {
		t.Fatal(err)
	}
	push := func(cmd uint16, data string) Frame {
		return Frame{Command: cmd, Body: envelope.OK("r", []byte(data))}
	}
	tests := []struct {
		f      Frame
		ok     bool
		typ    int
		msgID  int64
		convID int64
	}{
		{push(protocol.CmdRecallMessage, `{"msg_id":"10","conversation_id":"1"}`), true, EventRecall, 10, 1},
		{push(protocol.CmdRecallMessage, `{"msg_id":"10","conversation_id":"1"}`), false, 0, 0, 0},
		{push(protocol.CmdDeleteMessage, `{"msg_id":"11","conversation_id":"1"}`), true, EventDelete, 11, 1},
		{push(protocol.CmdMessage, `{"msg_id":"12","conversation_id":"1"}`), false, 0, 0, 0},
		{push(protocol.CmdRecallMessage, `not json`), false, 0, 0, 0},
	}
	for i, tc := range tests {
		e, ok := r.NotePush(tc.f)
		if ok != tc.ok || e.EventType != tc.typ || e.MsgID.Int64() != tc.msgID || e.ConversationID.Int64() != tc.convID {
			t.Fatalf("push %d: %+v %v", i, e, ok)
		}
	}
	srv.recall(1, 10)
	srv.deleteForMe(1, 11)
	srv.recall(1, 11) // not pushed: reported by sync
	res, err := r.Sync(ctx, srv)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Events) != 1 || res.Events[0].EventType != EventRecall || res.Events[0].MsgID != 11 {
		t.Fatalf("events %+v, want only the recall of 11", res.Events)
	}
}

func TestHistoryKeepsNewest(t *testing.T) {
	ctx := context.Background()
	srv := newModel()
	for id := int64(1); id <= 9; id++ {
		srv.send(1, id, "m"+strconv.FormatInt(id, 10))
	}
	srv.deleted[9] = true
	tests := []struct {
		n, page int
		want    []int64
	}{
		{3, 2, []int64{6, 7, 8}},
		{0, 4, []int64{1, 2, 3, 4, 5, 6, 7, 8}},
		{20, 200, []int64{1, 2, 3, 4, 5, 6, 7, 8}},
		{1, 1, []int64{8}},
	}
	for _, tc := range tests {
		msgs, total, err := History(ctx, srv, 1, tc.n, tc.page)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, m := range msgs {
			got = append(got, m.MsgID.Int64())
		}
		if !reflect.DeepEqual(got, tc.want) || total != 8 {
			t.Fatalf("n=%d page=%d: %v total %d, want %v total 8", tc.n, tc.page, got, total, tc.want)
		}
	}
	if _, _, err := History(ctx, srv, 99, 5, 10); err == nil {
		t.Fatal("history of a conversation the user is not in succeeded")
	}
}

func TestFileStateStore(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "nested", "dir")
	store := FileStateStore{Path: filepath.Join(dir, StateFileName(7, "cli/../x"))}
	if filepath.Dir(store.Path) != dir {
		t.Fatalf("state file %s escapes %s", store.Path, dir)
	}
	if _, ok, err := store.Load(ctx); ok || err != nil {
		t.Fatalf("missing file: ok=%v err=%v", ok, err)
	}
	st := NewSyncState(7, "cli")
	st.DialogCursor, st.MailboxSeq = "abc:5", 9
	st.LastMsgIDs[7301234567890123456] = 7301234567890123457
	st.Conversations[7301234567890123456] = Conversation{ConversationID: 7301234567890123456, Unread: 3, Preview: &Preview{Text: "hi"}}
	if err := store.Save(ctx, st); err != nil {
		t.Fatal(err)
	}
	got, ok, err := store.Load(ctx)
	if err != nil || !ok || !reflect.DeepEqual(got, st) {
		t.Fatalf("round trip %+v %v %v, want %+v", got, ok, err, st)
	}
	raw, err := os.ReadFile(store.Path)
	if err != nil {
		t.Fatal(err)
	}
	// 64-bit ids stay exact as strings, the way the protocol writes them.
	if !strings.Contains(string(raw), `"7301234567890123456": "7301234567890123457"`) {
		t.Fatalf("state file:\n%s", raw)
	}
	if fi, err := os.Stat(store.Path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("leftover temporary files: %v", entries)
	}
	if err := os.WriteFile(store.Path, []byte("{torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Load(ctx); err == nil {
		t.Fatal("corrupt state loaded")
	}
}

func TestStateFileName(t *testing.T) {
	for _, tc := range []struct {
		user   int64
		device string
		want   string
	}{
		{1001, "cli-1001", "1001-cli-1001.json"},
		{1, "a.b_c", "1-a_b_c.json"},
		{2, "../../etc", "2-______etc.json"},
	} {
		if got := StateFileName(tc.user, tc.device); got != tc.want {
			t.Fatalf("StateFileName(%d, %q) = %q, want %q", tc.user, tc.device, got, tc.want)
		}
	}
}

// The runner over a real Conn: commands 10/11 and 12/13 on the wire.
func TestSyncRunnerOverWire(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{})
	go func() {
		in := s.read()
		if in.h.Command != protocol.CmdSyncInbox || string(in.body) != `{"dialog_cursor":"0","mailbox_seq":"0","limit":1}` {
			t.Errorf("first request %d %s", in.h.Command, in.body)
		}
		s.answer(in, protocol.CmdSyncInbox, envelope.OK(s.ids.Next(), []byte(`{"conversations":[{"conversation_id":"5","conversation_type":1,"peer_id":"9","last_msg_id":"51","unread":2}],"events":[],"dialog_cursor":"e:1","mailbox_seq":"0"}`)))
		in = s.read()
		if string(in.body) != `{"dialog_cursor":"e:1","mailbox_seq":"0","limit":1}` {
			t.Errorf("second request %s", in.body)
		}
		s.answer(in, protocol.CmdSyncInboxFinish, envelope.OK(s.ids.Next(), []byte(`{"conversations":[],"events":[{"seq":"3","event_type":1,"conversation_id":"5","msg_id":"40","payload":{}}],"dialog_cursor":"e:1","mailbox_seq":"3"}`)))
		in = s.read()
		if in.h.Command != protocol.CmdSyncMessages || string(in.body) != `{"conversation_id":"5","last_msg_id":"0","limit":200}` {
			t.Errorf("messages request %d %s", in.h.Command, in.body)
		}
		s.answer(in, protocol.CmdSyncMessages, envelope.OK(s.ids.Next(), []byte(`{"conversation_id":"5","messages":[{"msg_id":"50","conversation_id":"5","sender_id":"9","message_type":1,"content":{"t":1,"text":"x"},"status":1}],"next_msg_id":"50"}`)))
		in = s.read()
		if string(in.body) != `{"conversation_id":"5","last_msg_id":"50","limit":200}` {
			t.Errorf("messages request %s", in.body)
		}
		s.answer(in, protocol.CmdSyncMessagesDone, envelope.OK(s.ids.Next(), []byte(`{"conversation_id":"5","messages":[{"msg_id":"51","conversation_id":"5","sender_id":"9","message_type":1,"status":2}],"next_msg_id":"51"}`)))
	}()
	ctx := context.Background()
	r, err := NewSyncRunner(ctx, FileStateStore{Path: filepath.Join(t.TempDir(), "s.json")}, 1, "d", SyncRunnerOptions{InboxLimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Sync(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changed) != 1 || res.Changed[0].Unread != 2 || res.NewMessages() != 2 || len(res.Events) != 1 || res.Events[0].MsgID != 40 {
		t.Fatalf("result %+v", res)
	}
	if ids := res.ConversationIDs(); !reflect.DeepEqual(ids, []int64{5}) {
		t.Fatalf("conversation ids %v", ids)
	}
	st := r.State()
	if st.DialogCursor != "e:1" || st.MailboxSeq != 3 || st.LastMsgIDs[5] != 51 {
		t.Fatalf("state %+v", st)
	}
}
