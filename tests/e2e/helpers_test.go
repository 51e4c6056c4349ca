package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/tests/framework"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func text(t testing.TB, s string) json.RawMessage {
	b, err := client.TextContent(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sendTo(to int64, clientMsgID string, content json.RawMessage) protocol.SendRequest {
	return protocol.SendRequest{ToUserID: jsonid.ID(to), ClientMsgID: clientMsgID, MessageType: 1, Content: content}
}

// collect reads n MESSAGE pushes from conn.
func collect(conn *client.Conn, n int, timeout time.Duration) ([]protocol.Message, error) {
	var out []protocol.Message
	deadline := time.Now().Add(timeout)
	for len(out) < n {
		m, err := nextMessage(conn, time.Until(deadline))
		if err != nil {
			return out, fmt.Errorf("after %d of %d messages: %w", len(out), n, err)
		}
		out = append(out, m)
	}
	return out, nil
}

func nextMessage(conn *client.Conn, timeout time.Duration) (protocol.Message, error) {
	if timeout <= 0 {
		timeout = time.Millisecond
	}
	return framework.NextMessage(conn, timeout)
}

// noMessage fails if a MESSAGE push is waiting on conn.
func noMessage(t *testing.T, conn *client.Conn, what string) {
	t.Helper()
	for {
		select {
		case f := <-conn.Pushes():
			if f.Command == protocol.CmdMessage && f.IsPush() {
				m, _ := f.Message()
				t.Fatalf("%s: unexpected MESSAGE %s from %s", what, m.MsgID, m.SenderID)
			}
		default:
			return
		}
	}
}

// tinyPNG is a whole 1x1 PNG (signature, IHDR, IDAT, IEND), what a
// picture upload sends.
var tinyPNG = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89" +
	"\x00\x00\x00\rIDATx\x9cc\xf8\xcf\xc0\xf0\x1f\x00\x05\x00\x01\xff\x89\x99=\x1d\x00\x00\x00\x00IEND\xaeB`\x82")
