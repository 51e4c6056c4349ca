package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/tests/framework"
)

// nextSignal waits for a SIGNAL push on conn, skipping other pushes.
func nextSignal(conn *client.Conn, timeout time.Duration) (protocol.SignalPush, bool) {
	deadline := time.After(timeout)
	for {
		select {
		case f := <-conn.Pushes():
			if f.Command != protocol.CmdSignal || !f.IsPush() {
				continue
			}
			var s protocol.SignalPush
			env, err := f.Envelope()
			if err != nil || json.Unmarshal(env.Data, &s) != nil {
				continue
			}
			return s, true
		case <-deadline:
			return protocol.SignalPush{}, false
		}
	}
}

// TestSignalReachesOnlineMembersOnlyAndIsNeverSynced: a typing signal
// reaches the peer's and the sender's other online devices (across gates)
// and not the sending device; strangers, forged conversations, bad kinds
// and oversized payloads are refused with their codes; a flood hits the
// signal bucket (42901) while messages still go; a device that was
// offline gets no signal push and finds none in sync.
func TestSignalReachesOnlineMembersOnlyAndIsNeverSynced(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4})
	ctx := ctxT(t, 2*time.Minute)
	a1 := c.Login(t, 0, 24201, "a1")
	a2 := c.Login(t, 1, 24201, "a2")
	b := c.Login(t, 1, 24202, "b")
	stranger := c.Login(t, 0, 24203, "s")
	ack, err := a1.Send(ctx, sendTo(24202, "sig-1", text(t, "hi")))
	if err != nil {
		t.Fatal(err)
	}
	conv := ack.ConversationID.Int64()

	n, err := a1.Signal(ctx, conv, protocol.SignalTyping, json.RawMessage(`{"draft":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("typing delivered to %d connections, want 2 (b and a2)", n)
	}
	for name, dev := range map[string]*client.Conn{"b": b, "a2": a2} {
		s, ok := nextSignal(dev, 10*time.Second)
		if !ok {
			t.Fatalf("%s got no SIGNAL push", name)
		}
		if s.ConversationID.Int64() != conv || s.SenderID.Int64() != 24201 || s.DeviceID != "a1" || s.Kind != protocol.SignalTyping || string(s.Payload) != `{"draft":true}` {
			t.Fatalf("%s got %+v", name, s)
		}
	}
	if s, ok := nextSignal(a1, 300*time.Millisecond); ok {
		t.Fatalf("the sending device got its own signal %+v", s)
	}

	for _, tc := range []struct {
		name    string
		conn    *client.Conn
		conv    int64
		kind    string
		payload json.RawMessage
		code    errcode.Code
	}{
		{"a stranger to the conversation", stranger, conv, "typing", nil, errcode.Forbidden},
		{"a forged conversation id", a1, conv + 987654321, "typing", nil, errcode.NotFound},
		{"a kind with spaces", a1, conv, "is typing", nil, errcode.InvalidArgument},
		{"a payload that is not an object", a1, conv, "typing", json.RawMessage(`"x"`), errcode.InvalidArgument},
		{"a payload over 1 KiB", a1, conv, "typing", json.RawMessage(`{"x":"` + strings.Repeat("a", 2000) + `"}`), errcode.TooLarge},
	} {
		if _, err := tc.conn.Signal(ctx, tc.conv, tc.kind, tc.payload); !hasCode(err, tc.code) {
			t.Fatalf("signal from %s: %v, want %s", tc.name, err, tc.code)
		}
	}

	limited := false
	for i := 0; i < 40 && !limited; i++ {
		_, err := b.Signal(ctx, conv, protocol.SignalTypingStop, nil)
		limited = hasCode(err, errcode.RateLimited)
		if err != nil && !limited {
			t.Fatalf("signal %d: %v", i, err)
		}
	}
	if !limited {
		t.Fatal("40 signals in a row never hit the signal bucket (burst 20)")
	}
	if _, err := b.Send(ctx, sendTo(24201, "sig-2", text(t, "still sending"))); err != nil {
		t.Fatalf("a message after the signal flood: %v", err)
	}

	bOff := c.Login(t, 0, 24202, "b-off")
	if s, ok := nextSignal(bOff, 500*time.Millisecond); ok {
		t.Fatalf("a device that came online later got a signal %+v", s)
	}
	msgs, _, err := bOff.SyncMessages(ctx, conv, 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 {
		t.Fatalf("sync holds %d messages, want the 2 sent (signals are never stored)", len(msgs))
	}
}
