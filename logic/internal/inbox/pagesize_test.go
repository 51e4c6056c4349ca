package inbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
)

// frameLen is the size of the frame the gate writes for an answer's data.
func frameLen(t *testing.T, data any) int {
	t.Helper()
	b, err := protocol.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	return len(frame.Encode(frame.Header{Command: protocol.CmdSyncMessages}, envelope.OK("AAAAAAAAAAA", b)))
}

// The size rule end to end in logic: the longest message of `<` the rule
// accepts is accepted and one byte more is refused with 41301 naming the
// limit; a conversation of such messages syncs page by
// page, every answer's frame within max_frame_size, each message once and
// in order.
func TestMaximumMessagesSyncWithinTheFrameLimit(t *testing.T) {
	e := newEnv(t, message.Config{})
	u := e.users(2)
	ctx := context.Background()
	const maxFrame = frame.DefaultMaxFrameSize
	wrap := func(text string) string { return `{"t":1,"text":"` + text + `"}` }
	// The longest text the send rule accepts.
	n := 0
	for protocol.MessageFits(len(wrap(strings.Repeat("<", n+1))), len("cmid-00"), maxFrame) {
		n++
	}
	send := func(i, textLen int) error {
		_, err := e.send.Send(ctx, message.Sender{UserID: u[0], DeviceID: "dev"},
			sendReq([]byte(fmt.Sprintf(`{"to_user_id":"%d","client_msg_id":"cmid-%02d","message_type":1,"content":%s}`, u[1], i, wrap(strings.Repeat("<", textLen))))))
		return err
	}
	if err := send(99, n+1); code(err) != errcode.TooLarge || !strings.Contains(err.Error(), "max_frame_size (65536 bytes)") {
		t.Fatalf("one byte over the limit: %v, want 41301 naming the limit", err)
	}
	var want []int64
	for i := range 5 {
		if err := send(i, n); err != nil {
			t.Fatalf("a push of exactly the limit was refused: %v", err)
		}
	}
	cid, last := e.msg(u[1], u[0], "small one after")
	_, rows, err := e.st.ConversationPage(ctx, cid, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		want = append(want, r.ID)
	}
	if len(want) != 6 || want[5] != last {
		t.Fatalf("stored %v", want)
	}

	var got []int64
	after := int64(0)
	for page := 0; ; page++ {
		if page > 10 {
			t.Fatal("sync did not finish")
		}
		r, more, err := e.syncMessages(ctx, asker{UserID: u[1], DeviceID: "dev"},
			wire[protocol.SyncMessagesRequest](body("conversation_id", id(cid), "last_msg_id", id(after), "limit", 200)))
		if err != nil {
			t.Fatal(err)
		}
		if size := frameLen(t, r); size > maxFrame {
			t.Fatalf("page %d is a %d-byte frame, over %d", page, size, maxFrame)
		}
		for _, m := range r.Messages {
			got = append(got, m.MsgID.Int64())
		}
		after = r.NextMsgID.Int64()
		if !more {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("synced %v, want %v", got, want)
	}
}

// With a small frame limit the conversation list and the mailbox events
// page by bytes: every answer fits, and paging still reaches every
// conversation once.
func TestSyncInboxPagesByBytes(t *testing.T) {
	e := newEnv(t, message.Config{})
	const maxFrame = 4096
	u := e.users(31)
	me, peers := u[0], u[1:]
	want := map[int64]bool{}
	for _, p := range peers {
		cid, _ := e.msg(p, me, strings.Repeat("<&>", 20))
		want[cid] = true
	}
	got := map[int64]int{}
	cursor, pages := "0", 0
	for more := true; more; pages++ {
		if pages > 40 {
			t.Fatal("sync did not finish")
		}
		var r *protocol.SyncInboxReply
		var err error
		r, more, err = e.syncInboxIn(context.Background(), maxFrame, asker{UserID: me, DeviceID: "dev"},
			wire[protocol.SyncInboxRequest](body("dialog_cursor", cursor, "mailbox_seq", "0", "limit", 200)))
		if err != nil {
			t.Fatal(err)
		}
		if size := frameLen(t, r); size > maxFrame {
			t.Fatalf("page %d is a %d-byte frame, over %d", pages, size, maxFrame)
		}
		for _, c := range r.Conversations {
			got[c.ConversationID.Int64()]++
		}
		cursor = r.DialogCursor
	}
	if pages < 3 {
		t.Fatalf("%d pages: the byte budget did not split the list", pages)
	}
	for cid := range want {
		if got[cid] != 1 {
			t.Fatalf("conversation %d seen %d times", cid, got[cid])
		}
	}
}
