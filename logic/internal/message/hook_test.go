package message_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/sendhook"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
)

// hookServer is a real HTTP before-send hook whose answer is chosen by
// the client_msg_id's prefix (allow-, reject-, modify-), counting the
// calls per client_msg_id.
type hookServer struct {
	mu    sync.Mutex
	calls map[string]int
	last  map[string]sendhook.Message
}

func newHookServer(t *testing.T) (*hookServer, string) {
	h := &hookServer{calls: map[string]int{}, last: map[string]sendhook.Message{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m sendhook.Message
		if err := json.Unmarshal(b, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.calls[m.ClientMsgID]++
		h.last[m.ClientMsgID] = m
		h.mu.Unlock()
		switch {
		case m.EditOf != 0 && strings.Contains(string(m.Content), "spam"):
			_, _ = io.WriteString(w, `{"action":"reject","code":7002,"reason":"no spam in edits"}`)
		case strings.HasPrefix(m.ClientMsgID, "reject-"):
			_, _ = io.WriteString(w, `{"action":"reject","code":7001,"reason":"not here"}`)
		case strings.HasPrefix(m.ClientMsgID, "modify-"):
			_, _ = io.WriteString(w, `{"action":"modify","content":{"t":1,"text":"[redacted]"}}`)
		default:
			_, _ = io.WriteString(w, `{"action":"allow"}`)
		}
	}))
	t.Cleanup(srv.Close)
	return h, srv.URL
}

func (h *hookServer) seen(id string) sendhook.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last[id]
}

func (h *hookServer) count(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[id]
}

// The hook at the send entry: a rejection stores and queues nothing, a
// rewrite is what is stored, a retry of a committed send is answered
// without a second call, a retry after a rewrite is asked again and gets
// the stored message, and a switch that is off calls nothing.
func TestSendBeforeSendHook(t *testing.T) {
	e := newEnv(t)
	hs, url := newHookServer(t)
	hc := config.Default().Logic.BeforeSend
	hc.URL, hc.Secret, hc.API = url, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", false
	hook, err := sendhook.New(hc, nil, e.metrics)
	if err != nil {
		t.Fatal(err)
	}
	svc, _ := e.service(t, 24, message.Config{BeforeSend: hook})
	u := e.users(t, 2)
	ctx := context.Background()
	from := message.Sender{UserID: u[0], DeviceID: "phone"}
	send := func(from message.Sender, id, txt string) (*message.Ack, error) {
		return svc.Send(ctx, from, sendReq(body("to_user_id", u[1], "client_msg_id", id, "message_type", 1, "content", text(txt))))
	}
	stored := func(id string) (n int, content string) {
		t.Helper()
		var rows []string
		if err := e.st.DB().Select(&rows, "SELECT content FROM t_messages WHERE sender_id = ? AND client_msg_id = ?", from.UserID, id); err != nil {
			t.Fatal(err)
		}
		if len(rows) == 1 {
			content = rows[0]
		}
		return len(rows), content
	}

	allowed, err := send(from, "allow-1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if m := hs.seen("allow-1"); m.Kind != "p2p" || m.Origin != "client" || m.ToUserID != u[1] || m.ConversationID != allowed.ConversationID || m.DeviceID != "phone" {
		t.Errorf("hook saw %+v", m)
	}
	again, err := send(from, "allow-1", "hello")
	if err != nil || again.MsgID != allowed.MsgID || hs.count("allow-1") != 1 {
		t.Fatalf("retry after allow: ack %+v err %v, hook calls %d (want the stored message, one call)", again, err, hs.count("allow-1"))
	}

	_, err = send(from, "reject-1", "spam")
	if r := errcode.RejectionOf(err); code(err) != errcode.Rejected || r == nil || r.Code != 7001 || r.Reason != "not here" {
		t.Fatalf("reject: %v (%+v)", err, r)
	}
	if n, _ := stored("reject-1"); n != 0 {
		t.Fatalf("a rejected message has %d rows", n)
	}

	mod, err := send(from, "modify-1", "secret")
	if err != nil {
		t.Fatal(err)
	}
	if n, c := stored("modify-1"); n != 1 || c != `{"t":1,"text":"[redacted]"}` {
		t.Fatalf("modified message: %d rows, content %s", n, c)
	}
	mod2, err := send(from, "modify-1", "secret")
	if err != nil || mod2.MsgID != mod.MsgID || hs.count("modify-1") != 2 {
		t.Fatalf("retry after modify: ack %+v err %v, hook calls %d (want the stored message after a second call)", mod2, err, hs.count("modify-1"))
	}
	// Queued: the allow (twice: the retry enqueues again) and the modify
	// (twice); the rejection never.
	if n := e.jobs(t, allowed.ConversationID, allowed.MsgID) + e.jobs(t, allowed.ConversationID, mod.MsgID); n != 4 {
		t.Fatalf("%d jobs for the allowed and modified messages, want 4", n)
	}

	// An edit is asked about too, named by edit_of: allowed, it is
	// stored; rejected, nothing changes.
	edit := func(txt string) (*message.Edited, error) {
		c, _ := json.Marshal(text(txt))
		return svc.Edit(ctx, from, message.EditRequest{MsgID: allowed.MsgID, Content: c})
	}
	if ed, err := edit("hello again"); err != nil || ed.Version != 1 {
		t.Fatalf("allowed edit: %+v, %v", ed, err)
	}
	if m := hs.seen("allow-1"); m.EditOf != allowed.MsgID || !strings.Contains(string(m.Content), "hello again") {
		t.Fatalf("the hook saw the edit as %+v", m)
	}
	if _, err := edit("spam spam"); code(err) != errcode.Rejected {
		t.Fatalf("rejected edit: %v", err)
	}
	if _, c := stored("allow-1"); c != `{"t":1,"text":"hello again"}` {
		t.Fatalf("after a rejected edit the content is %s", c)
	}

	api := message.Sender{UserID: u[0], API: true}
	if _, err := send(api, "reject-api", "from the API"); err != nil || hs.count("reject-api") != 0 {
		t.Fatalf("API send with the api switch off: %v, hook calls %d", err, hs.count("reject-api"))
	}
}
