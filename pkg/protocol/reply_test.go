package protocol

import (
	"encoding/json"
	"testing"
)

func TestReplyHelpersSetReadAndReduceTheSnapshot(t *testing.T) {
	snap := []byte(`{"msg_id":"42","message_type":1,"text":"hi","sender_id":"7"}`)
	cases := []struct {
		name, content, want string
		has                 bool
		origID              int64
	}{
		{"plain text gains the snapshot last", `{"t":1,"text":"a"}`, `{"t":1,"text":"a","reply_to":` + string(snap) + `}`, false, 42},
		{"a hook's reply_to is replaced in place of order", `{"reply_to":1,"t":1,"text":"a"}`, `{"t":1,"text":"a","reply_to":` + string(snap) + `}`, true, 42},
		{"reply_to inside a nested object is not the key", `{"t":1,"x":{"reply_to":1}}`, `{"t":1,"x":{"reply_to":1},"reply_to":` + string(snap) + `}`, false, 42},
		{"the word in a text is not the key", `{"t":1,"text":"\"reply_to\""}`, `{"t":1,"text":"\"reply_to\"","reply_to":` + string(snap) + `}`, false, 42},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := HasReplyKey([]byte(c.content)); got != c.has {
				t.Fatalf("HasReplyKey = %v, want %v", got, c.has)
			}
			out, err := WithReply([]byte(c.content), snap)
			if err != nil || string(out) != c.want {
				t.Fatalf("WithReply = %s, %v; want %s", out, err, c.want)
			}
			if id := ReplyOf(out); id != c.origID {
				t.Fatalf("ReplyOf = %d, want %d", id, c.origID)
			}
			rec := RecalledReply(out, c.origID)
			if ReplyOf(rec) != c.origID || string(rec) == string(out) {
				t.Fatalf("RecalledReply = %s", rec)
			}
		})
	}
	if ReplyOf([]byte(`{"t":1,"text":"a"}`)) != 0 || ReplyOf([]byte(`{"t":1,"reply_to":{"msg_id":"x"}}`)) != 0 {
		t.Fatal("ReplyOf of no or a malformed snapshot must be 0")
	}
	if _, err := WithReply([]byte(`[1]`), snap); err == nil {
		t.Fatal("WithReply of a non-object must fail")
	}
}

// FuzzReplyContent: whatever content a client or a hook hands in, reading
// the reply key never panics, and a canonical object with the server's
// snapshot set is one JSON object whose reply is that snapshot's, and
// whose recalled form still names it.
func FuzzReplyContent(f *testing.F) {
	for _, s := range []string{`{"t":1,"text":"a"}`, `{"t":1,"reply_to":{"msg_id":"9"}}`, `{"reply_to":1}`, `[]`, `{"t":1,"x":{"reply_to":2}}`, `{`, `"reply_to"`} {
		f.Add([]byte(s))
	}
	snap := []byte(`{"msg_id":"42","message_type":1,"text":"hi","sender_id":"7"}`)
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = HasReplyKey(b)
		_ = ReplyOf(b)
		c, err := CanonicalContent(1, b)
		if err != nil {
			return
		}
		out, err := WithReply(c, snap)
		if err != nil {
			t.Fatalf("WithReply of canonical %s: %v", c, err)
		}
		if !json.Valid(out) || !HasReplyKey(out) || ReplyOf(out) != 42 {
			t.Fatalf("WithReply(%s) = %s", c, out)
		}
		if ReplyOf(RecalledReply(out, 42)) != 42 {
			t.Fatalf("RecalledReply of %s lost the id", out)
		}
	})
}
