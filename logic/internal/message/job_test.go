package message

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/conversation"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/protocol"
)

// A job carries everything deliver needs without parsing the message
// again: the push data, and the list preview as deliver stores it.
func TestJobCarriesPushDataAndPreview(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	for _, tc := range []struct {
		name    string
		typ     int
		content string
		text    string
	}{
		{"text", 1, `{"text":"hi <there> & you"}`, "hi <there> & you"},
		{"image", 2, `{"url":"https://cdn.example.com/a.png"}`, "[image]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := store.Message{ID: 900, ConversationID: 31, SenderID: 5, SenderDevice: "d", ClientMsgID: "c1",
				MessageType: tc.typ, Content: []byte(tc.content), CreatedAt: at}
			conv := conversation.Conversation{ID: 31, Type: protocol.ConversationP2P, Users: [2]int64{5, 6}}
			job, err := Job(row, conv, Flags{}, at)
			if err != nil {
				t.Fatal(err)
			}
			var p dialog.Preview
			if err := json.Unmarshal(job.GetPreview(), &p); err != nil {
				t.Fatalf("preview %q: %v", job.GetPreview(), err)
			}
			if want := (dialog.Preview{MsgID: "900", MessageType: tc.typ, Text: tc.text, SenderID: "5"}); p != want {
				t.Fatalf("preview %+v, want %+v", p, want)
			}
			var m protocol.Message
			if err := json.Unmarshal(job.GetPushData(), &m); err != nil || int64(m.MsgID) != 900 {
				t.Fatalf("push data %s: %v", job.GetPushData(), err)
			}
			var got, want any
			_ = json.Unmarshal(m.Content, &got)
			_ = json.Unmarshal([]byte(tc.content), &want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("push content %s, want %s", m.Content, tc.content)
			}
			// Written without HTML escaping: the bytes are the content's.
			if !bytes.Contains(job.GetPushData(), []byte(tc.content)) {
				t.Fatalf("push data %s does not carry the content %s verbatim", job.GetPushData(), tc.content)
			}
			if job.GetCreatedAtMs() != at.UnixMilli() || len(job.GetRecipients()) != 2 {
				t.Fatalf("job %+v", job)
			}
		})
	}
}
