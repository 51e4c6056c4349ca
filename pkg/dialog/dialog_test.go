package dialog

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/testredis"
)

func testRedis(t *testing.T) *redis.Client {
	t.Helper()
	return testredis.Open(t)
}

func TestApplyColdInvalidate(t *testing.T) {
	ctx := context.Background()
	rdb := testRedis(t)
	uid, cid := int64(910001), int64(253608578634481665)
	rdb.Del(ctx, StateKey(uid, cid), ListKey(uid), VersionKey(uid), BuiltKey(uid))
	p := Preview{MsgID: "253608578697396225", MessageType: 1, Text: "hi", SenderID: "2"}

	// Absent state: only the version moves, the next sync rebuilds.
	if ok, err := ApplyMessage(ctx, rdb, uid, cid, 253608578697396225, 1, true, p); err != nil || ok {
		t.Fatalf("apply on absent state: %v %v", ok, err)
	}
	ch, _ := Changes(ctx, rdb, uid, 0, 10)
	if len(ch) != 1 || ch[0].ConversationID != cid {
		t.Fatalf("changes %+v", ch)
	}
	observed := "1"
	// A cold write with a stale observed version is refused.
	if ok, _ := WriteCold(ctx, rdb, uid, cid, "", State{Type: 1}); ok {
		t.Fatal("cold write over a listed conversation with observed '' accepted")
	}
	if ok, err := WriteCold(ctx, rdb, uid, cid, observed, State{Type: 1, PeerID: 2, LastMsgID: 253608578697396225, Unread: 1, Base: 253608578697396225, Preview: &p}); err != nil || !ok {
		t.Fatalf("cold write: %v %v", ok, err)
	}
	tests := []struct {
		name       string
		msgID      int64
		count      bool
		wantOK     bool
		wantUnread int64
	}{
		{"at base: already counted", 253608578697396225, true, false, 1},
		{"newer from peer", 253608578697396226, true, true, 2},
		{"redelivered", 253608578697396226, true, false, 2},
		{"own message", 253608578697396300, false, true, 2},
		{"older than last but above base", 253608578697396250, true, true, 3},
		{"a shorter id is older", 99, true, false, 3},
	}
	for _, tt := range tests {
		ok, err := ApplyMessage(ctx, rdb, uid, cid, tt.msgID, 5, tt.count, p)
		s, _, _ := Load(ctx, rdb, uid, cid)
		if err != nil || ok != tt.wantOK || s.Unread != tt.wantUnread {
			t.Fatalf("%s: ok %v unread %d err %v", tt.name, ok, s.Unread, err)
		}
	}
	s, _, _ := Load(ctx, rdb, uid, cid)
	if s.LastMsgID != 253608578697396300 || s.Preview == nil || s.PeerID != 2 {
		t.Fatalf("state %+v", s)
	}
	before, _ := Changes(ctx, rdb, uid, 0, 10)
	if err := Invalidate(ctx, rdb, uid, cid); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := Load(ctx, rdb, uid, cid); ok {
		t.Fatal("state survived invalidation")
	}
	after, _ := Changes(ctx, rdb, uid, before[0].Version, 10)
	if len(after) != 1 {
		t.Fatal("invalidation did not bump the version")
	}
}

func TestEnsureMembers(t *testing.T) {
	ctx := context.Background()
	rdb := testRedis(t)
	uid := int64(910002)
	rdb.Del(ctx, ListKey(uid), VersionKey(uid), BuiltKey(uid))
	if e, _ := Epoch(ctx, rdb, uid); e != "" {
		t.Fatal("epoch before build")
	}
	e1, err := EnsureMembers(ctx, rdb, uid, "aaa", []int64{1, 2, 3})
	if err != nil || e1 != "aaa" {
		t.Fatalf("%q %v", e1, err)
	}
	e2, _ := EnsureMembers(ctx, rdb, uid, "bbb", []int64{3, 4})
	if e2 != "aaa" {
		t.Fatalf("racing build changed the epoch to %q", e2)
	}
	ch, _ := Changes(ctx, rdb, uid, 0, 10)
	if len(ch) != 4 {
		t.Fatalf("changes %+v", ch)
	}
	page, _ := Changes(ctx, rdb, uid, ch[1].Version, 10)
	if len(page) != 2 || page[0].ConversationID != 3 {
		t.Fatalf("page after the second change: %+v", page)
	}
}

func TestCursor(t *testing.T) {
	tests := []struct {
		in      string
		want    Cursor
		wantErr bool
	}{
		{"", Cursor{}, false},
		{"0", Cursor{}, false},
		{"ab12.57", Cursor{"ab12", 57}, false},
		{"ab12.0", Cursor{"ab12", 0}, false},
		{"57", Cursor{}, true},
		{".5", Cursor{}, true},
		{"a.-1", Cursor{}, true},
		{"a.b", Cursor{}, true},
		{"a.1.2", Cursor{}, true},
	}
	for _, tt := range tests {
		got, err := ParseCursor(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want || (err != nil && !errors.Is(err, ErrBadCursor)) {
			t.Errorf("%q: %+v %v", tt.in, got, err)
		}
		if err == nil && tt.in != "" {
			if back, _ := ParseCursor(got.String()); back != got {
				t.Errorf("%q does not round-trip", tt.in)
			}
		}
	}
	if (Cursor{"e1", 9}).From("e2") != 0 || (Cursor{"e1", 9}).From("e1") != 9 {
		t.Error("From")
	}
}

func TestPreviewText(t *testing.T) {
	long := ""
	for i := 0; i < 60; i++ {
		long += "你"
	}
	if got := PreviewText(1, long); len([]rune(got)) != PreviewTextLen {
		t.Fatalf("%d runes", len([]rune(got)))
	}
	if PreviewText(2, "x") != "[image]" || PreviewText(1, "hi") != "hi" {
		t.Fatal("placeholders")
	}
}

// PreviewOf reads a text-bearing message's "text", shows media as a
// placeholder without reading it, and previews bad content as empty.
func TestPreviewOf(t *testing.T) {
	for _, tc := range []struct {
		name    string
		typ     int
		content string
		text    string
	}{
		{"text", 1, `{"text":"hello <b>&"}`, "hello <b>&"},
		{"system text", 9, `{"text":"joined"}`, "joined"},
		{"image placeholder", 2, `{"url":"http://x/y.png"}`, "[image]"},
		{"media content never read", 7, `not json`, "[file]"},
		{"not an object", 1, `1`, ""},
		{"text not a string", 1, `{"text":5}`, ""},
		{"no content", 1, ``, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := PreviewOf(77, 5, tc.typ, []byte(tc.content))
			want := Preview{MsgID: "77", MessageType: tc.typ, Text: tc.text, SenderID: "5"}
			if p != want {
				t.Fatalf("got %+v, want %+v", p, want)
			}
		})
	}
}

// Past MaxApplied recorded ids the state is dropped (the next sync
// rebuilds it from MySQL) rather than forgetting an id a redelivery could
// bring back; until then every id counts once.
func TestApplyMessageDropsStatePastMaxApplied(t *testing.T) {
	ctx := context.Background()
	rdb := testRedis(t)
	uid, cid := int64(910003), int64(77)
	rdb.Del(ctx, StateKey(uid, cid), ListKey(uid), VersionKey(uid), BuiltKey(uid))
	if ok, err := WriteCold(ctx, rdb, uid, cid, "", State{Type: 1, PeerID: 2, LastMsgID: 1000, Base: 1000}); err != nil || !ok {
		t.Fatalf("seed: %v %v", ok, err)
	}
	p := Preview{MsgID: "1", MessageType: 1, Text: "x", SenderID: "2"}
	for i := int64(1); i <= MaxApplied; i++ {
		for again := 0; again < 2; again++ { // each one redelivered at once
			if _, err := ApplyMessage(ctx, rdb, uid, cid, 1000+i, 1, true, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	s, ok, err := Load(ctx, rdb, uid, cid)
	if err != nil || !ok || s.Unread != MaxApplied {
		t.Fatalf("after %d ids: ok %v unread %d err %v", MaxApplied, ok, s.Unread, err)
	}
	before, _ := Changes(ctx, rdb, uid, 0, 10)
	if ok, err := ApplyMessage(ctx, rdb, uid, cid, 1000+MaxApplied+1, 1, true, p); err != nil || ok {
		t.Fatalf("one past the bound: applied %v err %v", ok, err)
	}
	if _, ok, _ := Load(ctx, rdb, uid, cid); ok {
		t.Fatal("the state past the bound was kept")
	}
	if after, _ := Changes(ctx, rdb, uid, before[0].Version, 10); len(after) != 1 {
		t.Fatal("dropping the state did not bump the version")
	}
}
