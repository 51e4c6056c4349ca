package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/ratelimit"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/errcode"
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

// The send limit is the client front door's: SEND_MESSAGE per (user,
// device) past the burst is 42901 before the body is even read; another
// device of the same user has its own bucket.
func TestSendRateLimitPerDevice(t *testing.T) {
	e := newEnv(t, 33)
	e.handler.SendLimit = ratelimit.New(1, 3)
	ctx := context.Background()
	from, to := testenv.RandomUserID(), testenv.RandomUserID()
	now := time.Now()
	for _, u := range []int64{from, to} {
		if err := e.st.EnsureUser(ctx, u, now); err != nil {
			t.Fatal(err)
		}
	}
	send := func(device string, i int) errcode.Code {
		b, _ := json.Marshal(map[string]any{"to_user_id": fmt.Sprint(to), "client_msg_id": fmt.Sprint(device, i), "message_type": 1,
			"content": map[string]any{"t": 1, "text": "x"}})
		resp := e.handler.Handle(ctx, "gate-x", &logicv1.Request{ConnId: 1, Session: &logicv1.Session{UserId: from, DeviceId: device}, Command: 4, Body: b})
		return decode(t, resp.Body).Code
	}
	var codes []errcode.Code
	for i := 0; i < 5; i++ {
		codes = append(codes, send("d", i))
	}
	want := []errcode.Code{"0", "0", "0", errcode.RateLimited, errcode.RateLimited}
	if fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Fatalf("codes %v, want %v", codes, want)
	}
	if c := send("d2", 0); c != errcode.OK {
		t.Fatalf("another device: %s", c)
	}
}
