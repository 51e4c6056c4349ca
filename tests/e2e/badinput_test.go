package e2e

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/token"
	"github.com/sparkim/spark/tests/framework"
)

func mustHex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func closedWithin(conn *client.Conn, d time.Duration) bool {
	select {
	case <-conn.Done():
		return true
	case <-time.After(d):
		return false
	}
}

// Bad input gets its error code or a close, changes nothing, and the gate
// keeps serving everyone else.
func TestBadInput(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, GateEnv: []string{"IM_GATE_AUTH_TIMEOUT=2s"}})
	ctx := ctxT(t, 2*time.Minute)
	bystander := c.Login(t, 0, 8001, "bystander")
	friend := c.Login(t, 1, 8002, "friend")

	closes := []struct {
		name string
		raw  string
	}{
		{"bad magic", "1250010002000000000000000000000000000100000000"},
		{"unknown version", "5350020002000000000000000000000000000100000000"},
		{"length over 64 KiB", "535001000400000000000000000000000000010000ffea"},
	}
	for _, tt := range closes {
		t.Run(tt.name, func(t *testing.T) {
			conn := c.Dial(t, 0)
			if err := conn.WriteRaw(mustHex(t, tt.raw)); err != nil {
				t.Fatal(err)
			}
			if !closedWithin(conn, 3*time.Second) {
				t.Fatal("connection not closed")
			}
			for f := range conn.Pushes() {
				t.Fatalf("unexpected frame %d before the close", f.Command)
			}
		})
	}

	t.Run("truncated header waits, then the auth deadline closes", func(t *testing.T) {
		conn := c.Dial(t, 0)
		if err := conn.WriteRaw(mustHex(t, "5350010002000000000000000000000000000100")); err != nil {
			t.Fatal(err)
		}
		if closedWithin(conn, 500*time.Millisecond) {
			t.Fatal("closed before the header was complete")
		}
		if !closedWithin(conn, 5*time.Second) {
			t.Fatal("not closed by the auth deadline")
		}
	})

	t.Run("commands before AUTH are 40102", func(t *testing.T) {
		conn := c.Dial(t, 0)
		for _, cmd := range []uint16{protocol.CmdSendMessage, protocol.CmdGenerateMsgID, protocol.CmdSyncInbox, 99} {
			reply, err := conn.Request(ctx, cmd, `{"to_user_id":"8002","client_msg_id":"x","message_type":1,"content":{"t":1,"text":"x"}}`)
			if err != nil {
				t.Fatal(err)
			}
			if reply.Command != cmd || reply.Envelope.Code != errcode.NotAuthed || string(reply.Envelope.Data) != "{}" {
				t.Fatalf("command %d: answer %d %+v", cmd, reply.Command, reply.Envelope)
			}
		}
		if _, err := conn.Heartbeat(ctx); err != nil {
			t.Fatalf("heartbeat before AUTH: %v", err)
		}
		if _, err := conn.Auth(ctx, c.Token(8003, ""), "late-auth", "test", "1"); err != nil {
			t.Fatalf("AUTH after refused commands: %v", err)
		}
	})

	now := time.Now()
	expired, _, _ := token.Mint([]byte(framework.JWTSecret), 8004, "", time.Minute, now.Add(-time.Hour))
	forged, _, _ := token.Mint([]byte("not-the-secret"), 8004, "", time.Hour, now)
	bound, _, _ := token.Mint([]byte(framework.JWTSecret), 8004, "dev-a", time.Hour, now)
	auths := []struct {
		name, token, device string
		code                errcode.Code
		closes              bool
	}{
		{"garbage token", "not-a-token", "d1", errcode.BadToken, true},
		{"expired token", expired, "d1", errcode.BadToken, true},
		{"forged token", forged, "d1", errcode.BadToken, true},
		{"token for another device", bound, "dev-b", errcode.BadToken, true},
		{"empty device id", c.Token(8004, ""), "", errcode.InvalidArgument, false},
		{"device id with a slash", c.Token(8004, ""), "a/b", errcode.InvalidArgument, false},
		{"device id too long", c.Token(8004, ""), strings.Repeat("d", 65), errcode.InvalidArgument, false},
	}
	for _, tt := range auths {
		t.Run(tt.name, func(t *testing.T) {
			conn := c.Dial(t, 1)
			reply, err := conn.Request(ctx, protocol.CmdAuth, protocol.AuthRequest{Token: tt.token, DeviceID: tt.device, Platform: "test"})
			if err != nil {
				t.Fatal(err)
			}
			if reply.Command != protocol.CmdAuth || reply.Envelope.Code != tt.code {
				t.Fatalf("answer %d %+v, want code %s", reply.Command, reply.Envelope, tt.code)
			}
			if tt.closes && !closedWithin(conn, 3*time.Second) {
				t.Fatal("connection not closed after a failed AUTH")
			}
		})
	}

	authed := c.Login(t, 0, 8005, "sender")
	bigText := strings.Repeat("a", protocol.MaxContentBytes)
	requests := []struct {
		name string
		cmd  uint16
		body string
		code errcode.Code
	}{
		{"invalid JSON", protocol.CmdSendMessage, `{"to_user_id":`, errcode.InvalidArgument},
		{"unknown command", 99, `{}`, errcode.InvalidArgument},
		{"content type mismatch", protocol.CmdSendMessage, `{"to_user_id":"8002","client_msg_id":"bad-1","message_type":1,"content":{"t":2,"key":"k"}}`, errcode.InvalidArgument},
		{"message type out of range", protocol.CmdSendMessage, `{"to_user_id":"8002","client_msg_id":"bad-2","message_type":10,"content":{"t":10}}`, errcode.InvalidArgument},
		{"content not an object", protocol.CmdSendMessage, `{"to_user_id":"8002","client_msg_id":"bad-3","message_type":1,"content":"hi"}`, errcode.InvalidArgument},
		{"no target", protocol.CmdSendMessage, `{"client_msg_id":"bad-4","message_type":1,"content":{"t":1,"text":"x"}}`, errcode.InvalidArgument},
		{"no client_msg_id", protocol.CmdSendMessage, `{"to_user_id":"8002","message_type":1,"content":{"t":1,"text":"x"}}`, errcode.InvalidArgument},
		{"send to self", protocol.CmdSendMessage, `{"to_user_id":"8005","client_msg_id":"bad-5","message_type":1,"content":{"t":1,"text":"x"}}`, errcode.InvalidArgument},
		{"unknown recipient", protocol.CmdSendMessage, `{"to_user_id":"999999","client_msg_id":"bad-6","message_type":1,"content":{"t":1,"text":"x"}}`, errcode.Forbidden},
		{"id that is not a number", protocol.CmdSendMessage, `{"to_user_id":"abc","client_msg_id":"bad-7","message_type":1,"content":{"t":1,"text":"x"}}`, errcode.InvalidArgument},
		{"media without an op", protocol.CmdMedia, `{"kind":"image","size":10,"content_type":"image/png"}`, errcode.InvalidArgument},
		{"media with an unknown op", protocol.CmdMedia, `{"op":"delete","key":"img/0123456789012345678901"}`, errcode.InvalidArgument},
		{"media size that is not a number", protocol.CmdMedia, `{"op":"upload","kind":"image","size":"10","content_type":"image/png"}`, errcode.InvalidArgument},
		{"media size past int64", protocol.CmdMedia, `{"op":"upload","kind":"image","size":99999999999999999999,"content_type":"image/png"}`, errcode.InvalidArgument},
		{"media size over the kind's limit", protocol.CmdMedia, `{"op":"upload","kind":"video","size":9223372036854775807,"content_type":"video/mp4"}`, errcode.TooLarge},
		{"media content type with a newline", protocol.CmdMedia, `{"op":"upload","kind":"file","size":10,"content_type":"text/plain\nx: y"}`, errcode.InvalidArgument},
		{"media key with a path", protocol.CmdMedia, `{"op":"complete","key":"../../etc/passwd"}`, errcode.InvalidArgument},
		{"media key of nobody", protocol.CmdMedia, `{"op":"complete","key":"img/0123456789012345678901"}`, errcode.NotFound},
		{"media download of a negative id", protocol.CmdMedia, `{"op":"download","msg_id":"-5"}`, errcode.InvalidArgument},
		{"media download of a forged id", protocol.CmdMedia, `{"op":"download","msg_id":"123456789"}`, errcode.NotFound},
		{"edit without a message id", protocol.CmdEditMessage, `{"content":{"t":1,"text":"x"}}`, errcode.InvalidArgument},
		{"edit of a negative id", protocol.CmdEditMessage, `{"msg_id":"-3","content":{"t":1,"text":"x"}}`, errcode.InvalidArgument},
		{"edit of a forged id", protocol.CmdEditMessage, `{"msg_id":"123456789","content":{"t":1,"text":"x"}}`, errcode.NotFound},
		{"edit with content that is not JSON", protocol.CmdEditMessage, `{"msg_id":"123456789","content":`, errcode.InvalidArgument},
		{"reaction without an op", protocol.CmdReaction, `{"msg_id":"123456789","emoji":"👍"}`, errcode.InvalidArgument},
		{"reaction with an unknown op", protocol.CmdReaction, `{"op":"toggle","msg_id":"123456789","emoji":"👍"}`, errcode.InvalidArgument},
		{"reaction of a forged id", protocol.CmdReaction, `{"op":"add","msg_id":"123456789","emoji":"👍"}`, errcode.NotFound},
		{"reaction of a negative id", protocol.CmdReaction, `{"op":"add","msg_id":"-1","emoji":"👍"}`, errcode.InvalidArgument},
		{"reaction carrying text", protocol.CmdReaction, `{"op":"add","msg_id":"123456789","emoji":"<script>"}`, errcode.InvalidArgument},
		{"reaction emoji over 32 bytes", protocol.CmdReaction, `{"op":"add","msg_id":"123456789","emoji":"` + strings.Repeat("👍", 9) + `"}`, errcode.InvalidArgument},
		{"reaction emoji that is a number", protocol.CmdReaction, `{"op":"add","msg_id":"123456789","emoji":7}`, errcode.InvalidArgument},
		{"reactions of more than 100 ids", protocol.CmdReaction, `{"op":"get","conversation_id":"1","msg_ids":[` + strings.TrimSuffix(strings.Repeat(`"1",`, 101), ",") + `]}`, errcode.InvalidArgument},
		{"reactions of no ids", protocol.CmdReaction, `{"op":"get","conversation_id":"1","msg_ids":[]}`, errcode.InvalidArgument},
		{"reactions of a conversation not joined", protocol.CmdReaction, `{"op":"get","conversation_id":"123456789","msg_ids":["1"]}`, errcode.Forbidden},
		{"reactors page over 100", protocol.CmdReaction, `{"op":"users","msg_id":"123456789","emoji":"👍","limit":101}`, errcode.InvalidArgument},
		{"reactors after a negative cursor", protocol.CmdReaction, `{"op":"users","msg_id":"123456789","emoji":"👍","after":"-1"}`, errcode.InvalidArgument},
		{"sync of more than 100 ids", protocol.CmdSyncMessages, `{"conversation_id":"1","last_msg_id":"0","msg_ids":[` + strings.TrimSuffix(strings.Repeat(`"1",`, 101), ",") + `]}`, errcode.InvalidArgument},
		{"image message carrying a URL", protocol.CmdSendMessage, `{"to_user_id":"8002","client_msg_id":"bad-8","message_type":2,"content":{"t":2,"url":"http://evil.example/x.png"}}`, errcode.InvalidArgument},
	}
	for _, tt := range requests {
		t.Run(tt.name, func(t *testing.T) {
			reply, err := authed.Request(ctx, tt.cmd, tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if reply.Command != tt.cmd || reply.Envelope.Code != tt.code {
				t.Fatalf("answer %d %+v, want command %d code %s", reply.Command, reply.Envelope, tt.cmd, tt.code)
			}
		})
	}

	t.Run("content over 64 KiB, gzipped under the frame limit", func(t *testing.T) {
		body := `{"to_user_id":"8002","client_msg_id":"big-1","message_type":1,"content":{"t":1,"text":"` + bigText + `"}}`
		z, ok := frame.Compress([]byte(body))
		if !ok {
			t.Fatal("did not compress")
		}
		if err := authed.WriteFrame(frame.Header{Command: protocol.CmdSendMessage, Flags: frame.FlagGzip, RequestID: 1 << 40, SequenceID: 1}, z); err != nil {
			t.Fatal(err)
		}
		f, err := framework.NextPush(authed, 10*time.Second) // answers to raw frames arrive as unpaired frames
		if err != nil {
			t.Fatal(err)
		}
		env, _ := f.Envelope()
		if f.RequestID != 1<<40 || env.Code != errcode.TooLarge {
			t.Fatalf("answer rid %d %+v, want 41301", f.RequestID, env)
		}
	})

	t.Run("gzip flag on a body that is not gzip", func(t *testing.T) {
		conn := c.Login(t, 0, 8006, "gz")
		if err := conn.WriteRaw(mustHex(t, "535001000d0001000000000000000100000001000000086e6f7420677a6970")); err != nil {
			t.Fatal(err)
		}
		f, err := framework.NextPush(conn, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		env, _ := f.Envelope()
		if f.Command != 13 || env.Code != errcode.InvalidArgument {
			t.Fatalf("answer %d %+v, want 13 / 40001", f.Command, env)
		}
		if !closedWithin(conn, 3*time.Second) {
			t.Fatal("not closed after a protocol error")
		}
	})

	if n := c.CountRows("SELECT COUNT(*) FROM t_messages"); n != 0 {
		t.Fatalf("bad input stored %d messages", n)
	}
	// Everyone else was served all along.
	if _, err := bystander.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	ack, err := bystander.Send(ctx, sendTo(8002, "still-fine", text(t, "still here")))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := nextMessage(friend, 10*time.Second); err != nil || m.MsgID != ack.MsgID {
		t.Fatalf("friend: %+v %v", m, err)
	}
}
