package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/auth"
	"github.com/sparkim/spark/logic/internal/gateway"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/ratelimit"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

func TestAuthValidation(t *testing.T) {
	e := newEnv(t, 31)
	ctx := context.Background()
	now := time.Now()
	uid := testenv.RandomUserID()
	disabled := testenv.RandomUserID()
	revoked := testenv.RandomUserID()
	for _, u := range []int64{disabled, revoked} {
		if err := e.st.EnsureUser(ctx, u, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.st.DB().Exec("UPDATE t_users SET status = 2 WHERE id = ?", disabled); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.DB().Exec("UPDATE t_users SET tokens_valid_after_ms = ? WHERE id = ?", now.Add(time.Hour).UnixMilli(), revoked); err != nil {
		t.Fatal(err)
	}
	good := mint(t, secret, uid, "", time.Hour, now)
	tests := []struct {
		name      string
		body      []byte
		want      errcode.Code
		wantClose bool
	}{
		{"invalid JSON", []byte(`{"token":`), errcode.InvalidArgument, false},
		{"empty device id", authBody(good, ""), errcode.InvalidArgument, false},
		{"device id too long", authBody(good, strings.Repeat("a", 65)), errcode.InvalidArgument, false},
		{"device id with space", authBody(good, "my phone"), errcode.InvalidArgument, false},
		{"device id with slash", authBody(good, "a/b"), errcode.InvalidArgument, false},
		{"device id non-ASCII", authBody(good, "tel\u00e9fono"), errcode.InvalidArgument, false},
		{"no token", authBody("", "dev-1"), errcode.BadToken, true},
		{"garbage token", authBody("not.a.jwt", "dev-1"), errcode.BadToken, true},
		{"expired token", authBody(mint(t, secret, uid, "", time.Minute, now.Add(-time.Hour)), "dev-1"), errcode.BadToken, true},
		{"forged token", authBody(mint(t, []byte("other-secret"), uid, "", time.Hour, now), "dev-1"), errcode.BadToken, true},
		{"did mismatch", authBody(mint(t, secret, uid, "dev-2", time.Hour, now), "dev-1"), errcode.BadToken, true},
		{"disabled user", authBody(mint(t, secret, disabled, "", time.Hour, now), "dev-1"), errcode.BadToken, true},
		{"revoked token", authBody(mint(t, secret, revoked, "", time.Hour, now), "dev-1"), errcode.BadToken, true},
		{"ok", authBody(good, "dev-1"), errcode.OK, false},
		{"ok with did", authBody(mint(t, secret, uid, "dev_3.x-Y", time.Hour, now), "dev_3.x-Y"), errcode.OK, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &logicv1.Request{ConnId: uint64(100 + i), RealIp: "10.0.0.1", Command: 1, RequestId: 77, SequenceId: 9, Body: tt.body}
			resp := e.handler.Handle(ctx, "gate-auth-test", req)
			r := decode(t, resp.Body)
			if r.Code != tt.want || resp.Close != tt.wantClose {
				t.Fatalf("code %s close %v (%s), want %s close %v", r.Code, resp.Close, r.Msg, tt.want, tt.wantClose)
			}
			if resp.Command != 1 || resp.RequestId != 77 || resp.SequenceId != 9 || resp.ConnId != req.ConnId {
				t.Fatalf("response header %+v", resp)
			}
			if tt.want != errcode.OK {
				if resp.Bind != nil || string(r.Data) != "{}" {
					t.Fatalf("failed AUTH bound %v / data %s", resp.Bind, r.Data)
				}
				return
			}
			var data struct {
				UserID     string `json:"user_id"`
				DeviceID   string `json:"device_id"`
				ServerTime int64  `json:"server_time"`
			}
			if err := json.Unmarshal(r.Data, &data); err != nil {
				t.Fatal(err)
			}
			b := resp.Bind
			if b == nil || b.UserId != uid || b.DeviceId != data.DeviceID || b.Platform != "ios" || b.AppVersion != "1.0" || b.SinceMs != data.ServerTime {
				t.Fatalf("bind %+v data %+v", b, data)
			}
		})
	}
	var n int
	if err := e.st.DB().Get(&n, "SELECT COUNT(*) FROM t_users WHERE id = ?", uid); err != nil || n != 1 {
		t.Fatalf("user row not created on first AUTH (%d, %v)", n, err)
	}
}

func TestCommandsNeedSession(t *testing.T) {
	e := newEnv(t, 32)
	ctx := context.Background()
	sess := &logicv1.Session{UserId: testenv.RandomUserID(), DeviceId: "d", SinceMs: 1}
	tests := []struct {
		name    string
		session *logicv1.Session
		command uint32
		body    string
		want    errcode.Code
		wantCmd uint32
		// wantMsg, when set, is the envelope's msg: it tells an unknown
		// command from a known one refused for its body.
		wantMsg string
	}{
		{"msg id without session", nil, 3, "", errcode.NotAuthed, 3, ""},
		{"send without session", nil, 4, "{}", errcode.NotAuthed, 4, ""},
		{"sync without session", nil, 12, "{}", errcode.NotAuthed, 12, ""},
		{"msg id", sess, 3, "", errcode.OK, 3, ""},
		{"second AUTH", sess, 1, `{}`, errcode.InvalidArgument, 1, ""},
		{"send invalid JSON", sess, 4, `{"to_user_id":`, errcode.InvalidArgument, 4, ""},
		{"read: no ids", sess, 8, "{}", errcode.InvalidArgument, 8, ""},
		{"read: id not an integer", sess, 8, `{"conversation_id":"x","msg_id":"1"}`, errcode.InvalidArgument, 8, "invalid JSON body (ids are integers)"},
		{"recall: invalid JSON", sess, 9, `{"msg_id":`, errcode.InvalidArgument, 9, "invalid JSON body (ids are integers)"},
		{"delete: id not an integer", sess, 15, `{"msg_id":"abc"}`, errcode.InvalidArgument, 15, "invalid JSON body (ids are integers)"},
		{"sync messages: empty body", sess, 12, "", errcode.InvalidArgument, 12, "invalid JSON body (ids are integers)"},
		{"sync inbox: invalid JSON", sess, 10, `{"dialog_cursor":`, errcode.InvalidArgument, 10, "invalid JSON body"},
		{"sync inbox: empty body is a fresh device", sess, 10, "", errcode.OK, 11, ""},
		{"conversation settings: muted not a boolean", sess, uint32(protocol.CmdConversationSettings), `{"conversation_id":"5","muted":"yes"}`, errcode.InvalidArgument, uint32(protocol.CmdConversationSettings), "invalid JSON body (ids are integers, flags booleans)"},
		{"sync inbox: mailbox seq not an integer", sess, 10, `{"mailbox_seq":"1.5"}`, errcode.InvalidArgument, 10, "invalid JSON body"},
		{"sync messages: cursor not an integer", sess, 12, `{"conversation_id":"5","last_msg_id":"abc"}`, errcode.InvalidArgument, 12, "invalid JSON body (ids are integers)"},
		{"sync messages: fractional cursor", sess, 12, `{"conversation_id":"5","last_msg_id":1.5}`, errcode.InvalidArgument, 12, "invalid JSON body (ids are integers)"},
		{"delete: no msg_id", sess, 15, "{}", errcode.InvalidArgument, 15, ""},
		{"conversation settings: no conversation_id", sess, uint32(protocol.CmdConversationSettings), "{}", errcode.InvalidArgument, uint32(protocol.CmdConversationSettings), ""},
		{"SEND_ACK is not a request", sess, uint32(protocol.CmdSendAck), "{}", errcode.InvalidArgument, uint32(protocol.CmdSendAck), "not a request command"},
		{"unknown command: first past the known ones", sess, uint32(protocol.MaxKnownCommand) + 1, "{}", errcode.InvalidArgument, uint32(protocol.MaxKnownCommand) + 1, "unknown command"},
		{"unknown command 999", sess, 999, "{}", errcode.InvalidArgument, 999, "unknown command"},
		{"command 0", sess, 0, "{}", errcode.InvalidArgument, 0, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := e.handler.Handle(ctx, "gate-x", &logicv1.Request{ConnId: 1, Session: tt.session, Command: tt.command, Body: []byte(tt.body)})
			r := decode(t, resp.Body)
			if r.Code != tt.want || resp.Command != tt.wantCmd {
				t.Fatalf("command %d code %s (%s), want %d %s", resp.Command, r.Code, r.Msg, tt.wantCmd, tt.want)
			}
			if tt.wantMsg != "" && r.Msg != tt.wantMsg {
				t.Fatalf("msg %q, want %q", r.Msg, tt.wantMsg)
			}
			if tt.command == 3 && tt.want == errcode.OK {
				var d struct {
					MsgID string `json:"msg_id"`
				}
				if err := json.Unmarshal(r.Data, &d); err != nil || d.MsgID == "" {
					t.Fatalf("msg id data %s", r.Data)
				}
			}
		})
	}
}

// The limits are the client front door's: SEND_MESSAGE per (user, device)
// past the burst is 42901 with retry_after_ms before the body is even
// read; GENERATE_MSG_ID draws from the same bucket; another device of the
// same user has its own bucket.
func TestSendRateLimitPerDevice(t *testing.T) {
	e := newEnv(t, 33)
	cfg := ratelimit.FromConfig(config.RateLimit{})
	cfg.Classes[ratelimit.Send] = ratelimit.Limits{Device: ratelimit.Bucket{Rate: 1, Burst: 3}}
	e.handler.Limits = mustLimiter(t, e.rdb, cfg)
	ctx := context.Background()
	from, to := testenv.RandomUserID(), testenv.RandomUserID()
	now := time.Now()
	for _, u := range []int64{from, to} {
		if err := e.st.EnsureUser(ctx, u, now); err != nil {
			t.Fatal(err)
		}
	}
	ip := fmt.Sprintf("10.33.%d.%d", from%250, to%250)
	request := func(device string, cmd uint32, body []byte) envelope.Response {
		resp := e.handler.Handle(ctx, "gate-x", &logicv1.Request{ConnId: 1, RealIp: ip, Session: &logicv1.Session{UserId: from, DeviceId: device}, Command: cmd, Body: body})
		return decode(t, resp.Body)
	}
	send := func(device string, i int) envelope.Response {
		b, _ := json.Marshal(map[string]any{"to_user_id": fmt.Sprint(to), "client_msg_id": fmt.Sprint(device, i), "message_type": 1,
			"content": map[string]any{"t": 1, "text": "x"}})
		return request(device, 4, b)
	}
	var codes []errcode.Code
	for i := 0; i < 2; i++ {
		codes = append(codes, send("d", i).Code)
	}
	codes = append(codes, request("d", 3, nil).Code) // GENERATE_MSG_ID: the third token
	over := send("d", 3)
	codes = append(codes, over.Code, request("d", 4, []byte("not json")).Code)
	want := []errcode.Code{"0", "0", "0", errcode.RateLimited, errcode.RateLimited}
	if fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Fatalf("codes %v, want %v", codes, want)
	}
	var hint envelope.RetryAfter
	if err := json.Unmarshal(over.Data, &hint); err != nil || hint.RetryAfterMs <= 0 || hint.RetryAfterMs > 1000 {
		t.Fatalf("42901 data %s: want retry_after_ms in (0, 1000]", over.Data)
	}
	if c := send("d2", 0).Code; c != errcode.OK {
		t.Fatalf("another device: %s", c)
	}
}

// A request over its limit is refused before any store call: with MySQL
// gone, the first request of a burst of one fails on the store (5xx), the
// next is 42901, for SEND and for AUTH (per device, after the token).
func TestOverLimitCostsNoMySQL(t *testing.T) {
	e := newEnv(t, 34)
	dsn, _ := testenv.MySQL(t)
	gone, err := store.Open(dsn, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	_ = gone.Close()
	st := store.New(gone)
	gen, err := msgid.New(context.Background(), msgid.Settings{MachineID: 34})
	if err != nil {
		t.Fatal(err)
	}
	cfg := ratelimit.FromConfig(config.RateLimit{})
	cfg.Classes[ratelimit.Send] = ratelimit.Limits{Device: ratelimit.Bucket{Rate: 0.1, Burst: 1}}
	cfg.Classes[ratelimit.Auth] = ratelimit.Limits{Device: ratelimit.Bucket{Rate: 0.1, Burst: 1}}
	lim := mustLimiter(t, e.rdb, cfg)
	a := auth.New(st, e.rdb, secret, nil, nil)
	a.LimitDevices(lim)
	sendCfg := message.ConfigFrom(config.Default())
	sendCfg.MsgIDWindow, sendCfg.EnqueueRetries, sendCfg.Partitions = time.Minute, 1, 4
	send, err := message.New(st, e.rdb, gen, sendCfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &gateway.Handler{Auth: a, Messages: send, IDs: gen, Limits: lim,
		Timeout: config.Default().Logic.RequestTimeout, MaxFrameSize: config.Default().Logic.MaxFrameSize}
	t.Cleanup(h.Messages.Close)
	ctx := context.Background()
	uid := testenv.RandomUserID()
	ip := fmt.Sprintf("10.34.%d.%d", uid%250, uid/250%250)
	sendBody, _ := json.Marshal(map[string]any{"to_user_id": "5", "client_msg_id": "c", "message_type": 1, "content": map[string]any{"t": 1, "text": "x"}})
	tok := mint(t, secret, uid, "", time.Hour, time.Now())
	steps := []struct {
		name    string
		req     *logicv1.Request
		want5xx bool
	}{
		{"send reaches the store", &logicv1.Request{ConnId: 1, RealIp: ip, Session: &logicv1.Session{UserId: uid, DeviceId: "d"}, Command: 4, Body: sendBody}, true},
		{"send over the limit", &logicv1.Request{ConnId: 1, RealIp: ip, Session: &logicv1.Session{UserId: uid, DeviceId: "d"}, Command: 4, Body: sendBody}, false},
		{"auth reaches the store", &logicv1.Request{ConnId: 2, RealIp: ip, Command: 1, Body: authBody(tok, "d")}, true},
		{"auth over the device limit", &logicv1.Request{ConnId: 3, RealIp: ip, Command: 1, Body: authBody(tok, "d")}, false},
	}
	for _, s := range steps {
		r := decode(t, h.Handle(ctx, "gate-x", s.req).Body)
		if s.want5xx {
			if !strings.HasPrefix(string(r.Code), "5") {
				t.Fatalf("%s: code %s, want a 5xx from the closed store", s.name, r.Code)
			}
			continue
		}
		if r.Code != errcode.RateLimited {
			t.Fatalf("%s: code %s (%s), want 42901 without touching the store", s.name, r.Code, r.Msg)
		}
	}
}

// Failed AUTHs count against the address: at the threshold an AUTH from
// it is refused with 42901 and closed, even with a valid token (which is
// not looked at); the same user's device on another address logs in.
func TestAuthFailuresBlockTheAddressNotTheUser(t *testing.T) {
	e := newEnv(t, 35)
	cfg := ratelimit.FromConfig(config.RateLimit{})
	cfg.AuthFailures, cfg.AuthFailureWindow, cfg.AuthBlock = 3, time.Minute, time.Minute
	e.handler.Limits = mustLimiter(t, e.rdb, cfg)
	ctx := context.Background()
	uid := testenv.RandomUserID()
	if err := e.st.EnsureUser(ctx, uid, time.Now()); err != nil {
		t.Fatal(err)
	}
	bad, other := fmt.Sprintf("10.35.%d.1", uid%250), fmt.Sprintf("10.35.%d.2", uid%250)
	good := mint(t, secret, uid, "", time.Hour, time.Now())
	forged := mint(t, []byte("not-the-secret"), uid, "", time.Hour, time.Now())
	expired := mint(t, secret, uid, "", time.Minute, time.Now().Add(-time.Hour))
	auth := func(conn uint64, ip, tok, device string) (*logicv1.Response, envelope.Response) {
		resp := e.handler.Handle(ctx, "gate-x", &logicv1.Request{ConnId: conn, RealIp: ip, Command: 1, Body: authBody(tok, device)})
		return resp, decode(t, resp.Body)
	}
	for i, tok := range []string{forged, expired, "garbage"} {
		resp, r := auth(uint64(10+i), bad, tok, "phone")
		if r.Code != errcode.BadToken || !resp.Close {
			t.Fatalf("failure %d: code %s close %v", i+1, r.Code, resp.Close)
		}
	}
	resp, r := auth(20, bad, good, "phone")
	if r.Code != errcode.RateLimited || !resp.Close || resp.Bind != nil {
		t.Fatalf("valid token from the blocked address: code %s close %v bind %v, want 42901, closed, unbound", r.Code, resp.Close, resp.Bind)
	}
	var hint envelope.RetryAfter
	if err := json.Unmarshal(r.Data, &hint); err != nil || hint.RetryAfterMs <= 0 || hint.RetryAfterMs > 60000 {
		t.Fatalf("blocked data %s: want retry_after_ms within the 1 min block", r.Data)
	}
	resp, r = auth(21, other, good, "tablet")
	if r.Code != errcode.OK || resp.Bind == nil || resp.Bind.UserId != uid {
		t.Fatalf("the user's device on another address: code %s (%s)", r.Code, r.Msg)
	}
}

// mustLimiter is a limiter enforcing cfg.
func mustLimiter(t *testing.T, rdb ratelimit.Redis, cfg ratelimit.Config) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(rdb, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
