package clientwire

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/inbox"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/pkg/protocol"
)

// The client forms are the bodies as they were before the domain had types
// of its own: field for field, ids as decimal strings, times in Unix ms.
func TestClientForms(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123).Add(456 * time.Microsecond)
	tests := []struct {
		name string
		got  any
		want string
	}{
		{"send ack", SendAck(&message.Ack{MsgID: 7, ClientMsgID: "c1", ConversationID: 9, ServerTime: at}),
			`{"msg_id":"7","client_msg_id":"c1","conversation_id":"9","server_time":1700000000123}`},
		{"read mark, msg_id", ReadMark(protocol.ReadRequest{ConversationID: 9, MsgID: 7, LastMsgID: 3}), `{"ConversationID":9,"MsgID":7}`},
		{"read mark, last_msg_id alias", ReadMark(protocol.ReadRequest{ConversationID: 9, LastMsgID: 3}), `{"ConversationID":9,"MsgID":3}`},
		{"message", Message(inbox.Message{ID: 7, ConversationID: 9, ConversationType: 1, SenderID: 5, ClientMsgID: "c1", MessageType: 1, Content: []byte(`{"t":1}`), CreatedAt: at}),
			`{"msg_id":"7","conversation_id":"9","conversation_type":1,"sender_id":"5","client_msg_id":"c1","message_type":1,"content":{"t":1},"created_at":1700000000123,"status":1}`},
		{"recalled message", Message(inbox.Message{ID: 7, ConversationID: 9, ConversationType: 1, SenderID: 5, ClientMsgID: "c1", MessageType: 1, CreatedAt: at, Recalled: true}),
			`{"msg_id":"7","conversation_id":"9","conversation_type":1,"sender_id":"5","client_msg_id":"c1","message_type":1,"created_at":1700000000123,"status":2}`},
		{"empty history page", SyncMessagesReply(inbox.HistoryPage{ConversationID: 9, Next: 4}), `{"conversation_id":"9","messages":[],"next_msg_id":"4"}`},
		{"empty inbox page", SyncInboxReply(inbox.InboxPage{DialogCursor: "e.1"}), `{"conversations":[],"events":[],"dialog_cursor":"e.1","mailbox_seq":"0"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b []byte
			var err error
			if _, domain := tt.got.(message.ReadMark); domain {
				b, err = json.Marshal(tt.got)
			} else {
				b, err = protocol.Marshal(tt.got)
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Fatalf("got  %s\nwant %s", b, tt.want)
			}
		})
	}
}
