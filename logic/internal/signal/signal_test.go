package signal

import (
	"strings"
	"testing"

	"github.com/sparkim/spark/pkg/errcode"
)

func TestValidateSignal(t *testing.T) {
	tests := []struct {
		name string
		req  Request
		want errcode.Code
	}{
		{"typing with no payload", Request{ConversationID: 1, Kind: "typing"}, errcode.OK},
		{"a custom kind with an object payload", Request{ConversationID: 1, Kind: "app.recording_2", Payload: []byte(`{"s":1}`)}, errcode.OK},
		{"no conversation", Request{Kind: "typing"}, errcode.InvalidArgument},
		{"negative conversation", Request{ConversationID: -5, Kind: "typing"}, errcode.InvalidArgument},
		{"empty kind", Request{ConversationID: 1}, errcode.InvalidArgument},
		{"kind with upper case", Request{ConversationID: 1, Kind: "Typing"}, errcode.InvalidArgument},
		{"kind starting with a digit", Request{ConversationID: 1, Kind: "1typing"}, errcode.InvalidArgument},
		{"kind of 33 characters", Request{ConversationID: 1, Kind: "a" + strings.Repeat("b", 32)}, errcode.InvalidArgument},
		{"payload an array", Request{ConversationID: 1, Kind: "typing", Payload: []byte(`[1]`)}, errcode.InvalidArgument},
		{"payload null", Request{ConversationID: 1, Kind: "typing", Payload: []byte(`null`)}, errcode.InvalidArgument},
		{"payload over 1 KiB", Request{ConversationID: 1, Kind: "typing", Payload: []byte(`{"x":"` + strings.Repeat("a", MaxPayload) + `"}`)}, errcode.TooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := errcode.OK
			if err := Validate(tc.req); err != nil {
				got, _ = errcode.Of(err)
			}
			if got != tc.want {
				t.Fatalf("Validate = %s, want %s", got, tc.want)
			}
		})
	}
}
