package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/tests/framework"
)

// wsStream carries the client library's byte stream over WebSocket: each
// Write (the library writes one whole frame at a time) is one binary
// message, Read returns the gate's binary messages in order.
type wsStream struct {
	net.Conn
	rd  io.Reader
	buf []byte
}

func (c *wsStream) Write(p []byte) (int, error) {
	if err := wsutil.WriteClientBinary(c.Conn, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *wsStream) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		data, op, err := wsutil.ReadServerData(struct {
			io.Reader
			io.Writer
		}{c.rd, c.Conn})
		if err != nil {
			return 0, err
		}
		if op != ws.OpBinary {
			return 0, fmt.Errorf("ws: opcode %v", op)
		}
		c.buf = data
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// dialWS opens a WebSocket with d and returns it as the byte stream the
// client library reads and writes; bytes the handshake read ahead come
// first.
func dialWS(ctx context.Context, d ws.Dialer, url string) (*wsStream, error) {
	nc, br, _, err := d.Dial(ctx, url)
	if err != nil {
		return nil, err
	}
	var rd io.Reader = nc
	if br != nil {
		rd = io.MultiReader(br, nc)
	}
	return &wsStream{Conn: nc, rd: rd}, nil
}

// must-show 6 end to end: a WebSocket client on one gate and a TCP client
// on the other exchange a message both ways through the real binaries.
func TestGateWebSocket(t *testing.T) {
	c := framework.NewCluster(t, framework.Options{Gates: 2})
	ctx := ctxT(t, 20*time.Second)
	conn, err := client.Dial(ctx, c.Gates[0].WSAddr, client.Options{
		Dial: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return dialWS(ctx, ws.Dialer{}, "ws://"+addr+"/ws")
		},
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
