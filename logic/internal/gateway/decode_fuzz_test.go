package gateway

import (
	"testing"

	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
)

// FuzzDecodeBodies feeds arbitrary bytes to the front door's body decoders
// for every request type a client sends: they never panic, a failure is
// always a 40001 the client can read, and a body that decodes encodes
// again. decodeFields, which re-decodes field by field through reflection
// to name the bad one, gets the same bytes.
func FuzzDecodeBodies(f *testing.F) {
	for _, seed := range []string{
		`{"token":"t","device_id":"d","platform":"ios","app_version":"1"}`,
		`{"to_user_id":"7","client_msg_id":"c","message_type":1,"content":{"t":1,"text":"<&>"}}`,
		`{"group_id":7,"client_msg_id":"c","msg_id":"730123456789","message_type":1,"content":{"t":1}}`,
		`{"dialog_cursor":"0","mailbox_seq":"0","limit":100}`,
		`{"conversation_id":"1","last_msg_id":"9223372036854775807","limit":200}`,
		`{"conversation_id":1,"msg_id":2}`,
		`{"conversation_id":1,"muted":true,"pinned":false,"hidden":null}`,
		`{"op":"request","user_id":"5","note":"hi"}`,
		`{"op":"create","name":"g","member_ids":["1",2,"3"]}`,
		`{"op":"mute_member","group_id":"1","user_id":2,"until":-1}`,
		`{"op":"register","platform":"apns","token":"a1b2","topic":"com.x","sandbox":true}`,
		`{"op":"preview","preview":"none"}`,
		`{"service":"orders","body":"{\"op\":1}","upstream_id":"u-1"}`,
		`{"service":"orders","body":5}`,
		`{"user_id":"x"}`, `{"limit":1e400}`, `{"member_ids":{}}`, `[]`, `null`, ``, `{`, "\xff",
	} {
		f.Add([]byte(seed))
	}
	targets := []struct {
		name string
		new  func() any
	}{
		{"auth", func() any { return new(protocol.AuthRequest) }},
		{"send", func() any { return new(protocol.SendRequest) }},
		{"sync inbox", func() any { return new(protocol.SyncInboxRequest) }},
		{"sync messages", func() any { return new(protocol.SyncMessagesRequest) }},
		{"read", func() any { return new(protocol.ReadRequest) }},
		{"message ref", func() any { return new(protocol.MessageRef) }},
		{"settings", func() any { return new(protocol.SettingsRequest) }},
		{"relation", func() any { return new(protocol.RelationRequest) }},
		{"group", func() any { return new(protocol.GroupRequest) }},
		{"push settings", func() any { return new(protocol.PushRequest) }},
		{"upstream", func() any { return new(protocol.UpstreamRequest) }},
	}
	check := func(t *testing.T, name, how string, v any, err error) {
		if err != nil {
			if c, _ := errcode.Of(err); c != errcode.InvalidArgument {
				t.Fatalf("%s via %s: error %v is %s, want 40001", name, how, err, c)
			}
			return
		}
		if _, merr := protocol.Marshal(v); merr != nil {
			t.Fatalf("%s via %s: decoded but does not encode: %v", name, how, merr)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, tg := range targets {
			v := tg.new()
			check(t, tg.name, "decode", v, decode(body, v, "invalid JSON body"))
			v = tg.new()
			check(t, tg.name, "decodeFields", v, decodeFields(body, v))
		}
	})
}
