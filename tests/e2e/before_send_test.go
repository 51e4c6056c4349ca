package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/stdwebhook"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// hookSecret signs the test clusters' hook requests (the Standard
// Webhooks specification's example secret).
const hookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// hookCall is what the business server got: the body and its kind.
type hookCall struct {
	Kind, Origin string
	ClientMsgID  string `json:"client_msg_id"`
	Content      json.RawMessage
}

// businessHook is a real HTTP before-send hook, as a business server
// runs it: it verifies every request's Standard Webhooks signature and
// answers by the client_msg_id's prefix — allow-, reject-, modify-,
// slow- (past the cluster's timeout), fail- (500) — or 500 to everything
// while dead is set.
type businessHook struct {
	t   *testing.T
	srv *httptest.Server

	mu    sync.Mutex
	calls map[string][]hookCall
	dead  bool
}

func newBusinessHook(t *testing.T) *businessHook {
	h := &businessHook{t: t, calls: map[string][]hookCall{}}
	secret, err := stdwebhook.ParseSecret(hookSecret)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := stdwebhook.Verify(r.Header, body, time.Now(), secret); err != nil {
			t.Errorf("hook request: %v", err)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var c hookCall
		if err := json.Unmarshal(body, &c); err != nil {
			t.Errorf("hook body %s: %v", body, err)
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.calls[c.ClientMsgID] = append(h.calls[c.ClientMsgID], c)
		dead := h.dead
		h.mu.Unlock()
		id := c.ClientMsgID
		switch {
		case dead || strings.HasPrefix(id, "fail-"):
			http.Error(w, "down", http.StatusInternalServerError)
		case strings.HasPrefix(id, "reject-"):
			_, _ = io.WriteString(w, `{"action":"reject","code":7001,"reason":"no <spam> here"}`)
		case strings.HasPrefix(id, "modify-"):
			_, _ = io.WriteString(w, `{"action":"modify","content":{"t":1,"text":"[redacted]"}}`)
		case strings.HasPrefix(id, "slow-"):
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
			}
			_, _ = io.WriteString(w, `{"action":"reject","code":1,"reason":"too late"}`)
		default:
			_, _ = io.WriteString(w, `{"action":"allow"}`)
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *businessHook) setDead(d bool) {
	h.mu.Lock()
	h.dead = d
	h.mu.Unlock()
}

// seen is the calls the hook got for a client_msg_id.
func (h *businessHook) seen(id string) []hookCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookCall(nil), h.calls[id]...)
}

// hookCluster starts a cluster whose logic calls h with the given
// policies and a 300 ms timeout.
func hookCluster(t *testing.T, h *businessHook, onError, onTimeout, failures, cooldown string) *framework.Cluster {
	return framework.NewCluster(t, framework.Options{Gates: 1, LogicEnv: []string{
		"IM_LOGIC_BEFORE_SEND_URL=" + h.srv.URL + "/before-send", "IM_LOGIC_BEFORE_SEND_SECRET=" + hookSecret,
		"IM_LOGIC_BEFORE_SEND_TIMEOUT=300ms", "IM_LOGIC_BEFORE_SEND_ON_ERROR=" + onError,
		"IM_LOGIC_BEFORE_SEND_ON_TIMEOUT=" + onTimeout,
		"IM_LOGIC_BEFORE_SEND_BREAKER_FAILURES=" + failures, "IM_LOGIC_BEFORE_SEND_BREAKER_COOLDOWN=" + cooldown,
	}})
}

// sendOnce sends one SEND_MESSAGE without the client's retries (a 50301
// here is the answer under test, not a reason to send again).
func sendOnce(t *testing.T, conn *client.Conn, req protocol.SendRequest) (protocol.SendAck, error) {
	t.Helper()
	r, err := conn.Request(ctxT(t, 30*time.Second), protocol.CmdSendMessage, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err != nil {
		return protocol.SendAck{}, err
	}
	var ack protocol.SendAck
	if err := r.Decode(&ack); err != nil {
		t.Fatal(err)
	}
	return ack, nil
}

// wantCode checks err is a CodeError with code.
func wantCode(t *testing.T, what string, err error, code errcode.Code) *client.CodeError {
	t.Helper()
	var ce *client.CodeError
	if !errors.As(err, &ce) || ce.Code != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
	return ce
}

// storedContent is the t_messages content of a client_msg_id, "" when
// there is no row (and fails on more than one).
func storedContent(t *testing.T, c *framework.Cluster, id string) string {
	t.Helper()
	rows, err := c.DB().Query("SELECT content FROM t_messages WHERE client_msg_id = ?", id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if len(out) > 1 {
		t.Fatalf("%s: %d rows", id, len(out))
	}
	if len(out) == 0 {
		return ""
	}
	return out[0]
}

// receives checks that the next MESSAGE at conn is client_msg_id id with
// content want: a refused message sent before it was not delivered (a
// conversation's pushes come in commit order).
func receives(t *testing.T, conn *client.Conn, id, want string) protocol.Message {
	t.Helper()
	m, err := framework.NextMessage(conn, 10*time.Second)
	if err != nil {
		t.Fatalf("waiting for %s: %v", id, err)
	}
	if m.ClientMsgID != id || string(m.Content) != want {
		t.Fatalf("got %s %s, want %s %s", m.ClientMsgID, m.Content, id, want)
	}
	return m
}

// unread is the receiver's unread count of conversation conv (SYNC_INBOX).
func unread(t *testing.T, conn *client.Conn, conv int64) int64 {
	t.Helper()
	p, err := conn.SyncInboxPage(ctxT(t, 10*time.Second), "0", "0", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, cv := range p.Conversations {
		if cv.ConversationID.Int64() == conv {
			return cv.Unread
		}
	}
	t.Fatalf("conversation %d not in the inbox", conv)
	return 0
}

// logicMetric reads one unlabelled sample from logic's /metrics.
func logicMetric(t *testing.T, c *framework.Cluster, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + c.Logics[0].AdminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("%s not exposed", name)
	return 0
}

const txtHi, txtRedacted = `{"t":1,"text":"hi"}`, `{"t":1,"text":"[redacted]"}`

// The before-send hook against the real binaries, with on_error reject
// and on_timeout allow. Allow, reject (the client's 40302 with the
// business's code and reason; not stored, not pushed, unread unchanged),
// modify (stored and pushed rewritten), a resend after an allow (the
// stored message, no second call), a group send and an API send (the
// reject as gRPC PERMISSION_DENIED and HTTP 403 with the same fields), a
// timeout (allowed as sent), and a dead hook: errors answer 50301 until
// the breaker opens, then sends answer 50301 at once without a call, the
// gauge says open, and once the hook is back a probe closes it.
func TestBeforeSendHookAnswersTimeoutAllowAndBreaker(t *testing.T) {
	t.Parallel()
	h := newBusinessHook(t)
	c := hookCluster(t, h, "reject", "allow", "3", "1s")
	const ann, ben = 35001, 35002
	annConn := c.Login(t, 0, ann, "phone")
	benConn := c.Login(t, 0, ben, "phone")
	var conv int64

	t.Run("allow", func(t *testing.T) {
		ack, err := sendOnce(t, annConn, sendTo(ben, "allow-1", json.RawMessage(txtHi)))
		if err != nil {
			t.Fatal(err)
		}
		conv = ack.ConversationID.Int64()
		receives(t, benConn, "allow-1", txtHi)
		if got := storedContent(t, c, "allow-1"); got != txtHi {
			t.Fatalf("stored %q", got)
		}
		if s := h.seen("allow-1"); len(s) != 1 || s[0].Kind != "p2p" || s[0].Origin != "client" || string(s[0].Content) != txtHi {
			t.Fatalf("hook saw %+v", s)
		}
		again, err := sendOnce(t, annConn, sendTo(ben, "allow-1", json.RawMessage(txtHi)))
		if err != nil || again.MsgID != ack.MsgID || len(h.seen("allow-1")) != 1 {
			t.Fatalf("resend: %+v %v, hook calls %d; want the stored message without a call", again, err, len(h.seen("allow-1")))
		}
	})

	t.Run("reject", func(t *testing.T) {
		before := unread(t, benConn, conv)
		_, err := sendOnce(t, annConn, sendTo(ben, "reject-1", json.RawMessage(txtHi)))
		ce := wantCode(t, "reject", err, errcode.Rejected)
		if ce.Rejection == nil || ce.Rejection.RejectCode != 7001 || ce.Rejection.RejectReason != "no <spam> here" {
			t.Fatalf("rejection %+v", ce.Rejection)
		}
		if got := storedContent(t, c, "reject-1"); got != "" {
			t.Fatalf("a rejected message is stored: %s", got)
		}
		if _, err := sendOnce(t, annConn, sendTo(ben, "allow-after-reject", json.RawMessage(txtHi))); err != nil {
			t.Fatal(err)
		}
		receives(t, benConn, "allow-after-reject", txtHi)
		if after := unread(t, benConn, conv); after != before+1 {
			t.Fatalf("unread %d → %d, want +1 (the allowed message only)", before, after)
		}
	})

	t.Run("modify", func(t *testing.T) {
		ack, err := sendOnce(t, annConn, sendTo(ben, "modify-1", json.RawMessage(`{"t":1,"text":"my secret"}`)))
		if err != nil {
			t.Fatal(err)
		}
		m := receives(t, benConn, "modify-1", txtRedacted)
		if m.MsgID.Int64() != ack.MsgID.Int64() {
			t.Fatalf("pushed %d, acked %d", m.MsgID, ack.MsgID)
		}
		if got := storedContent(t, c, "modify-1"); got != txtRedacted {
			t.Fatalf("stored %s", got)
		}
	})

	t.Run("group and API sends", func(t *testing.T) {
		api, ctx := apiClient(t, c, ctxT(t, time.Minute))
		g, err := api.CreateGroup(ctx, &logicv1.CreateGroupRequest{OwnerId: ann, MemberIds: []int64{ben}, Name: "hooked"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sendOnce(t, annConn, sendToGroup(g.Group.GroupId, "reject-group", json.RawMessage(txtHi))); err == nil {
			t.Fatal("group send not rejected")
		}
		if s := h.seen("reject-group"); len(s) != 1 || s[0].Kind != "group" {
			t.Fatalf("hook saw %+v", s)
		}
		_, err = api.SendMessage(ctx, &logicv1.SendMessageRequest{SenderId: ann, ToUserId: ben, ClientMsgId: "reject-api",
			MessageType: 1, Content: txtHi})
		st := status.Convert(err)
		var info *errdetails.ErrorInfo
		for _, d := range st.Details() {
			if i, ok := d.(*errdetails.ErrorInfo); ok {
				info = i
			}
		}
		if st.Code() != codes.PermissionDenied || info == nil || info.Reason != "40302" ||
			info.Metadata["reject_code"] != "7001" || info.Metadata["reject_reason"] != "no <spam> here" {
			t.Fatalf("API reject: %v %+v", err, info)
		}
		if s := h.seen("reject-api"); len(s) != 1 || s[0].Origin != "api" {
			t.Fatalf("hook saw %+v", s)
		}
		code, b := httpCall(t, c.Logics[0].HTTPAddr, framework.APIKey, http.MethodPost, "/v1/messages",
			`{"sender_id": 35001, "to_user_id": 35002, "client_msg_id": "reject-http", "message_type": 1, "content": "{\"t\":1,\"text\":\"hi\"}"}`)
		var body struct {
			Code         int    `json:"code"`
			RejectCode   int64  `json:"reject_code"`
			RejectReason string `json:"reject_reason"`
		}
		if err := json.Unmarshal(b, &body); err != nil || code != 403 || body.Code != 40302 || body.RejectCode != 7001 || body.RejectReason != "no <spam> here" {
			t.Fatalf("HTTP reject: %d %s", code, b)
		}
		for _, id := range []string{"reject-group", "reject-api", "reject-http"} {
			if got := storedContent(t, c, id); got != "" {
				t.Fatalf("%s stored: %s", id, got)
			}
		}
	})

	t.Run("timeout allows", func(t *testing.T) {
		// The slow hook would answer reject after 5 s: allowed means the
		// timeout cut it off and its policy decided.
		if _, err := sendOnce(t, annConn, sendTo(ben, "slow-1", json.RawMessage(txtHi))); err != nil {
			t.Fatal(err)
		}
		receives(t, benConn, "slow-1", txtHi)
		if got := storedContent(t, c, "slow-1"); got != txtHi {
			t.Fatalf("stored %q", got)
		}
		// One success resets the breaker's count of consecutive failures.
		if _, err := sendOnce(t, annConn, sendTo(ben, "allow-reset", json.RawMessage(txtHi))); err != nil {
			t.Fatal(err)
		}
		receives(t, benConn, "allow-reset", txtHi)
	})

	t.Run("breaker opens on a dead hook and a probe closes it", func(t *testing.T) {
		h.setDead(true)
		for i := 1; i <= 3; i++ {
			id := "dead-" + strconv.Itoa(i)
			_, err := sendOnce(t, annConn, sendTo(ben, id, json.RawMessage(txtHi)))
			wantCode(t, id, err, errcode.Busy)
			if n := len(h.seen(id)); n != 1 {
				t.Fatalf("%s: %d hook calls, want 1", id, n)
			}
		}
		if s := logicMetric(t, c, "spark_logic_hook_breaker_state"); s != 2 {
			t.Fatalf("breaker state %v after 3 failures, want 2 (open)", s)
		}
		// No call, so no wait for the hook: the policy applies at once.
		_, err := sendOnce(t, annConn, sendTo(ben, "while-open", json.RawMessage(txtHi)))
		wantCode(t, "while open", err, errcode.Busy)
		if n := len(h.seen("while-open")); n != 0 {
			t.Fatalf("the open breaker called the hook %d times", n)
		}
		for _, id := range []string{"dead-1", "dead-2", "dead-3", "while-open"} {
			if got := storedContent(t, c, id); got != "" {
				t.Fatalf("%s stored: %s", id, got)
			}
		}

		h.setDead(false)
		deadline := time.Now().Add(15 * time.Second)
		for i := 0; ; i++ {
			id := "probe-" + strconv.Itoa(i)
			_, err := sendOnce(t, annConn, sendTo(ben, id, json.RawMessage(txtHi)))
			if err == nil {
				receives(t, benConn, id, txtHi)
				break
			}
			wantCode(t, id, err, errcode.Busy)
			if time.Now().After(deadline) {
				t.Fatal("the breaker did not close after the hook came back")
			}
			time.Sleep(100 * time.Millisecond) // polls the 1 s cooldown
		}
		if s := logicMetric(t, c, "spark_logic_hook_breaker_state"); s != 0 {
			t.Fatalf("breaker state %v after a good probe, want 0 (closed)", s)
		}
	})
}

// With on_timeout reject and on_error allow: a hook that does not answer
// in time refuses the send with 50301 (not stored, not pushed, unread
// unchanged), and one that fails lets the message through as sent.
func TestBeforeSendHookTimeoutRejectsErrorAllows(t *testing.T) {
	t.Parallel()
	h := newBusinessHook(t)
	c := hookCluster(t, h, "allow", "reject", "100", "10s")
	const ann, ben = 35101, 35102
	annConn := c.Login(t, 0, ann, "phone")
	benConn := c.Login(t, 0, ben, "phone")

	ack, err := sendOnce(t, annConn, sendTo(ben, "allow-1", json.RawMessage(txtHi)))
	if err != nil {
		t.Fatal(err)
	}
	receives(t, benConn, "allow-1", txtHi)
	conv := ack.ConversationID.Int64()
	before := unread(t, benConn, conv)

	t.Run("timeout rejects", func(t *testing.T) {
		_, err := sendOnce(t, annConn, sendTo(ben, "slow-1", json.RawMessage(txtHi)))
		wantCode(t, "slow", err, errcode.Busy)
		if got := storedContent(t, c, "slow-1"); got != "" {
			t.Fatalf("stored %s", got)
		}
	})
	t.Run("error allows", func(t *testing.T) {
		if _, err := sendOnce(t, annConn, sendTo(ben, "fail-1", json.RawMessage(txtHi))); err != nil {
			t.Fatal(err)
		}
		// The next message ben gets is this one: the timed-out one never came.
		receives(t, benConn, "fail-1", txtHi)
		if got := storedContent(t, c, "fail-1"); got != txtHi {
			t.Fatalf("stored %q", got)
		}
		if after := unread(t, benConn, conv); after != before+1 {
			t.Fatalf("unread %d → %d, want +1 (the allowed message only)", before, after)
		}
	})
}
