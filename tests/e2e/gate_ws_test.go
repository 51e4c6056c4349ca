package e2e

import (
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/tests/framework"
)

// must-show 6 end to end: a WebSocket client on one gate and a TCP client
// on the other exchange a message both ways through the real binaries.
func TestGateWebSocket(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2})
	ctx := ctxT(t, 20*time.Second)
	conn, err := client.Dial(ctx, c.Gates[0].WSAddr, client.Options{
		Dial: client.WSDialer{}.DialContext,
	})
	if err != nil {
		t.Fatalf("ws dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.Auth(ctx, c.Token(8201, "ws-alice"), "ws-alice", "web", "1.0.0"); err != nil {
		t.Fatalf("auth over ws: %v", err)
	}
	bob := c.Login(t, 1, 8202, "tcp-bob")

	ack, err := conn.Send(ctx, sendTo(8202, "ws-1", text(t, "over ws")))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := nextMessage(bob, 10*time.Second); err != nil || m.MsgID != ack.MsgID {
		t.Fatalf("bob got %+v, %v; want msg %v", m, err, ack.MsgID)
	}
	back, err := bob.Send(ctx, sendTo(8201, "ws-2", text(t, "back over tcp")))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := nextMessage(conn, 10*time.Second); err != nil || m.MsgID != back.MsgID {
		t.Fatalf("alice got %+v, %v; want msg %v", m, err, back.MsgID)
	}
	if _, err := conn.Heartbeat(ctx); err != nil {
		t.Fatalf("heartbeat over ws: %v", err)
	}
}
