package sendhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sparkim/spark/logic/internal/metrics"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/stdwebhook"
)

func TestParseAnswer(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		action  string
		wantErr string
	}{
		{"allow", `{"action":"allow"}`, actionAllow, ""},
		{"allow ignores unknown fields", `{"action":"allow","trace":"x"}`, actionAllow, ""},
		{"reject", `{"action":"reject","code":7001,"reason":"banned word"}`, actionReject, ""},
		{"reject without reason", `{"action":"reject","code":1}`, actionReject, ""},
		{"reject without code", `{"action":"reject","reason":"no"}`, "", "positive code"},
		{"reject with negative code", `{"action":"reject","code":-3}`, "", "positive code"},
		{"reject with a long reason", `{"action":"reject","code":1,"reason":"` + strings.Repeat("x", MaxReasonLen+1) + `"}`, "", "reason over"},
		{"modify", `{"action":"modify","content":{"t":1,"text":"***"}}`, actionModify, ""},
		{"modify without content", `{"action":"modify"}`, "", "content object"},
		{"modify with a string content", `{"action":"modify","content":"{}"}`, "", "content object"},
		{"unknown action", `{"action":"maybe"}`, "", "unknown action"},
		{"no action", `{}`, "", "unknown action"},
		{"not JSON", `allow`, "", "not a JSON object"},
		{"an array", `[1]`, "", "not a JSON object"},
		{"over the bound", `{"action":"allow","x":"` + strings.Repeat("x", maxAnswer) + `"}`, "", "answer over"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := parseAnswer([]byte(tt.raw))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || a.Action != tt.action {
				t.Fatalf("answer %+v, err %v; want action %s", a, err, tt.action)
			}
		})
	}
}

// FuzzParseAnswer: any answer either parses into one of the three
// actions with its fields in bounds, or is refused; never a panic.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{`{"action":"allow"}`, `{"action":"reject","code":1,"reason":"r"}`, `{"action":"modify","content":{"t":1}}`, `{`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		a, err := parseAnswer(raw)
		if err != nil {
			return
		}
		switch a.Action {
		case actionAllow:
		case actionReject:
			if a.Code <= 0 || len(a.Reason) > MaxReasonLen {
				t.Fatalf("accepted reject %+v", a)
			}
		case actionModify:
			if len(a.Content) == 0 {
				t.Fatalf("accepted modify without content")
			}
		default:
			t.Fatalf("accepted action %q", a.Action)
		}
	})
}

func TestBreakerTransitions(t *testing.T) {
	type step struct {
		op        string // "call ok", "call fail", "probe ok", "probe fail", "refused", "wait", "abandon probe"
		wantState State
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"failures below the threshold keep it closed", []step{
			{"call fail", Closed}, {"call fail", Closed},
		}},
		{"a success resets the count", []step{
			{"call fail", Closed}, {"call fail", Closed}, {"call ok", Closed}, {"call fail", Closed}, {"call fail", Closed},
		}},
		{"the threshold opens it and calls are refused", []step{
			{"call fail", Closed}, {"call fail", Closed}, {"call fail", Open}, {"refused", Open},
		}},
		{"after the cooldown one probe, others refused; its success closes", []step{
			{"call fail", Closed}, {"call fail", Closed}, {"call fail", Open}, {"wait", Open},
			{"probe", HalfOpen}, {"refused", HalfOpen}, {"probe ok", Closed}, {"call ok", Closed},
		}},
		{"a failed probe opens it for another cooldown", []step{
			{"call fail", Closed}, {"call fail", Closed}, {"call fail", Open}, {"wait", Open},
			{"probe", HalfOpen}, {"probe fail", Open}, {"refused", Open}, {"wait", Open}, {"probe", HalfOpen},
		}},
		{"an abandoned probe lets the next send probe", []step{
			{"call fail", Closed}, {"call fail", Closed}, {"call fail", Open}, {"wait", Open},
			{"probe", HalfOpen}, {"abandon probe", Open}, {"probe", HalfOpen},
		}},
		{"a late result of a call from before the trip does not move it", []step{
			{"call fail", Closed}, {"call fail", Closed}, {"call fail", Open}, {"late ok", Open}, {"refused", Open},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			var seen []State
			b := newBreaker(3, 10*time.Second, func() time.Time { return now }, func(s State) { seen = append(seen, s) })
			for i, s := range tt.steps {
				switch s.op {
				case "call ok", "call fail":
					probe, ok := b.allow()
					if !ok || probe {
						t.Fatalf("step %d %s: allow = probe %v ok %v", i, s.op, probe, ok)
					}
					b.done(false, s.op == "call ok")
				case "late ok":
					b.done(false, true)
				case "probe":
					if probe, ok := b.allow(); !ok || !probe {
						t.Fatalf("step %d: allow = probe %v ok %v, want the probe", i, probe, ok)
					}
				case "probe ok", "probe fail":
					b.done(true, s.op == "probe ok")
				case "abandon probe":
					b.abandon(true)
				case "refused":
					if _, ok := b.allow(); ok {
						t.Fatalf("step %d: a call was let through", i)
					}
				case "wait":
					now = now.Add(10 * time.Second)
				}
				if got := b.current(); got != s.wantState {
					t.Fatalf("step %d %s: state %d, want %d", i, s.op, got, s.wantState)
				}
			}
			if len(seen) > 0 && seen[len(seen)-1] != b.current() {
				t.Fatalf("gauge last set to %d, state is %d", seen[len(seen)-1], b.current())
			}
		})
	}
}

// script is a real HTTP hook server whose answer to each call is the
// next of a scripted list (the last repeats).
type script struct {
	srv   *httptest.Server
	calls atomic.Int64
	got   chan Message
}

type reply struct {
	status int
	body   string
	delay  time.Duration
}

func newScript(t *testing.T, replies ...reply) *script {
	t.Helper()
	s := &script{got: make(chan Message, 100)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(s.calls.Add(1)) - 1
		rep := replies[min(n, len(replies)-1)]
		body, _ := io.ReadAll(r.Body)
		var m Message
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &m) != nil {
			http.Error(w, "bad hook request", http.StatusBadRequest)
			return
		}
		secret, _ := stdwebhook.ParseSecret(testSecret)
		if err := stdwebhook.Verify(r.Header, body, time.Now(), secret); err != nil || !strings.HasPrefix(r.Header.Get(stdwebhook.HeaderID), "bs_") {
			t.Errorf("hook request not signed: %v (id %q)", err, r.Header.Get(stdwebhook.HeaderID))
			http.Error(w, "unsigned", http.StatusUnauthorized)
			return
		}
		s.got <- m
		if rep.delay > 0 {
			select {
			case <-time.After(rep.delay):
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(rep.status)
		_, _ = io.WriteString(w, rep.body)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// testSecret is the Standard Webhooks specification's example secret.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func mustNew(t *testing.T, c config.BeforeSend) *Hook {
	t.Helper()
	h, err := New(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func hookFor(url, onError, onTimeout string) (*Hook, *metrics.Metrics) {
	c := config.Default().Logic.BeforeSend
	c.URL, c.Secret, c.OnError, c.OnTimeout = url, testSecret, onError, onTimeout
	c.Timeout = 200 * time.Millisecond
	c.BreakerFailures, c.BreakerCooldown = 2, time.Hour
	m := metrics.New(nil)
	h, err := New(c, nil, m)
	if err != nil {
		panic(err)
	}
	return h, m
}

func testMessage() *Message {
	return &Message{Kind: "p2p", Origin: "client", SenderID: 1001, DeviceID: "phone", ConversationID: 7, ToUserID: 1002,
		ClientMsgID: "c-1", MessageType: 1, Content: json.RawMessage(`{"t":1,"text":"hi <b>"}`)}
}

// validText accepts a text content whose text is not "invalid".
func validText(raw json.RawMessage) ([]byte, error) {
	var c struct {
		T    int    `json:"t"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &c); err != nil || c.T != 1 || c.Text == "invalid" {
		return nil, errcode.New(errcode.InvalidArgument, "bad content")
	}
	return raw, nil
}

func TestCheckAnswersAndPolicies(t *testing.T) {
	const orig = `{"t":1,"text":"hi <b>"}`
	tests := []struct {
		name              string
		reply             reply
		onError, onTimout string
		wantContent       string
		wantCode          errcode.Code
		wantReject        *errcode.Rejection
		wantCall, wantFB  string // hook_calls_total result, hook_fallbacks_total cause/policy
	}{
		{"allow", reply{200, `{"action":"allow"}`, 0}, "reject", "reject", orig, "", nil, "allow", ""},
		{"reject carries the business code and reason", reply{200, `{"action":"reject","code":7001,"reason":"banned"}`, 0}, "allow", "allow", "", errcode.Rejected, &errcode.Rejection{Code: 7001, Reason: "banned"}, "reject", ""},
		{"modify", reply{200, `{"action":"modify","content":{"t":1,"text":"***"}}`, 0}, "reject", "reject", `{"t":1,"text":"***"}`, "", nil, "modify", ""},
		{"invalid modify, error policy allow", reply{200, `{"action":"modify","content":{"t":1,"text":"invalid"}}`, 0}, "allow", "reject", orig, "", nil, "invalid", "error/allow"},
		{"invalid modify, error policy reject", reply{200, `{"action":"modify","content":{"t":1,"text":"invalid"}}`, 0}, "reject", "allow", "", errcode.Busy, nil, "invalid", "error/reject"},
		{"500, error policy allow", reply{500, `oops`, 0}, "allow", "reject", orig, "", nil, "error", "error/allow"},
		{"500, error policy reject", reply{500, `oops`, 0}, "reject", "allow", "", errcode.Busy, nil, "error", "error/reject"},
		{"malformed answer, error policy reject", reply{200, `{"action":"yes"}`, 0}, "reject", "allow", "", errcode.Busy, nil, "error", "error/reject"},
		{"timeout, timeout policy allow", reply{200, `{"action":"reject","code":1}`, time.Second}, "reject", "allow", orig, "", nil, "timeout", "timeout/allow"},
		{"timeout, timeout policy reject", reply{200, `{"action":"allow"}`, time.Second}, "allow", "reject", "", errcode.Busy, nil, "timeout", "timeout/reject"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newScript(t, tt.reply)
			h, m := hookFor(s.srv.URL, tt.onError, tt.onTimout)
			// A slow reply answers the opposite of the timeout policy, so
			// only an enforced timeout passes.
			content, err := h.Check(context.Background(), P2P, testMessage(), validText)
			if tt.wantCode == "" {
				if err != nil || string(content) != tt.wantContent {
					t.Fatalf("content %s, err %v; want %s", content, err, tt.wantContent)
				}
			} else {
				if c, _ := errcode.Of(err); c != tt.wantCode || content != nil {
					t.Fatalf("content %s, err %v; want code %s", content, err, tt.wantCode)
				}
				if r := errcode.RejectionOf(err); fmt.Sprint(r) != fmt.Sprint(tt.wantReject) {
					t.Fatalf("rejection %+v, want %+v", r, tt.wantReject)
				}
			}
			got := <-s.got
			if got.SenderID != 1001 || got.DeviceID != "phone" || got.ClientMsgID != "c-1" || string(got.Content) != orig {
				t.Errorf("hook saw %+v", got)
			}
			if n := testutil.ToFloat64(m.HookCalls.WithLabelValues("p2p", tt.wantCall)); n != 1 {
				t.Errorf("hook_calls_total{result=%s} = %v", tt.wantCall, n)
			}
			if tt.wantFB != "" {
				cause, policy, _ := strings.Cut(tt.wantFB, "/")
				if n := testutil.ToFloat64(m.HookFallbacks.WithLabelValues(cause, policy)); n != 1 {
					t.Errorf("hook_fallbacks_total{%s} = %v", tt.wantFB, n)
				}
			}
		})
	}
}

// The hook's body: ids as decimal strings, no HTML escaping, every field.
func TestMessageBody(t *testing.T) {
	b, err := marshal(testMessage())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"p2p","origin":"client","sender_id":"1001","device_id":"phone","system":false,"conversation_id":"7","to_user_id":"1002","group_id":"0","client_msg_id":"c-1","message_type":1,"content":{"t":1,"text":"hi <b>"}}` + "\n"
	if string(b) != want {
		t.Fatalf("body\n%s\nwant\n%s", b, want)
	}
}

// A dead hook opens the breaker after breaker_failures calls; then the
// error policy applies at once without a call, and the state gauge says
// open.
func TestBreakerOpensOnADeadHook(t *testing.T) {
	s := newScript(t, reply{503, "", 0})
	h, m := hookFor(s.srv.URL, "reject", "allow")
	for i := 0; i < 2; i++ {
		if _, err := h.Check(context.Background(), Group, testMessage(), validText); errcode.RejectionOf(err) != nil || err == nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if g := testutil.ToFloat64(m.HookBreakerState); g != float64(Open) {
		t.Fatalf("breaker gauge %v, want open", g)
	}
	_, err := h.Check(context.Background(), Group, testMessage(), validText)
	if c, _ := errcode.Of(err); c != errcode.Busy {
		t.Fatalf("open breaker answered %v", err)
	}
	if n := s.calls.Load(); n != 2 {
		t.Fatalf("hook called %d times, want 2 (the open breaker calls nothing)", n)
	}
	if n := testutil.ToFloat64(m.HookCalls.WithLabelValues("group", "open")); n != 1 {
		t.Fatalf("hook_calls_total{open} = %v", n)
	}
}

// A caller that gives up says nothing about the hook: its context's end
// is neither a timeout nor a failure the breaker counts.
func TestCallerCancelIsNotAHookFailure(t *testing.T) {
	s := newScript(t, reply{200, `{"action":"allow"}`, time.Second})
	h, _ := hookFor(s.srv.URL, "reject", "allow")
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := h.Check(ctx, P2P, testMessage(), validText)
		cancel()
		if err == nil || errors.Is(err, errTimeout) {
			t.Fatalf("call %d: %v, want the error policy's 50301 (not a timeout)", i, err)
		}
	}
	if st := h.breaker.current(); st != Closed {
		t.Fatalf("breaker %d after callers gave up, want closed", st)
	}
}

func TestCovers(t *testing.T) {
	c := config.Default().Logic.BeforeSend
	if mustNew(t, c) != nil {
		t.Fatal("a hook without a URL is on")
	}
	var off *Hook
	if off.Covers(P2P) {
		t.Fatal("a nil hook covers p2p")
	}
	c.URL, c.Secret, c.Group = "http://127.0.0.1:1/x", testSecret, false
	h := mustNew(t, c)
	if !h.Covers(P2P) || h.Covers(Group) || !h.Covers(API) {
		t.Fatalf("covers p2p %v group %v api %v", h.Covers(P2P), h.Covers(Group), h.Covers(API))
	}
}
