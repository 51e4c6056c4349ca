package protocol

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/jsonid"
)

// The bounds hold for the widest and the most escape-prone values: the
// encoded push never exceeds PushBound, and the bound is tight (within a
// few bytes per field) so the rule does not refuse much that would fit.
func TestPushBoundCoversTheEncodedPush(t *testing.T) {
	for _, tc := range []struct {
		name, content, cmid string
	}{
		{"small", `{"t":1,"text":"hi"}`, "c1"},
		{"html characters", `{"t":1,"text":"` + strings.Repeat("<>&", 1000) + `"}`, "<&>"},
		{"quotes in the client id", `{"t":1,"text":"x"}`, strings.Repeat(`"\`, 32)},
		{"escaped content stays verbatim", `{"t":1,"text":"\u2028\"\\\n"}`, "id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Message{MsgID: jsonid.ID(math.MaxInt64), ConversationID: 1, ConversationType: 1, SenderID: 2,
				ClientMsgID: tc.cmid, MessageType: 1, Content: json.RawMessage(tc.content), CreatedAt: 1_700_000_000_000,
				Version: math.MaxInt32, EditedAt: math.MaxInt64}
			data, err := Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			got := len(frame.Encode(frame.Header{Command: CmdMessage}, envelope.OK("AAAAAAAAAAA", data)))
			bound := PushBound(len(tc.content), len(tc.cmid))
			if got > bound {
				t.Fatalf("push is %d bytes, over its bound %d", got, bound)
			}
			if slack := bound - got; slack > 2*len(tc.cmid)+64 {
				t.Fatalf("bound %d is %d bytes above the push: too loose", bound, slack)
			}
		})
	}
}
