package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
)

// wsNetConn lets the Spark test client speak over WebSocket: each Write
// is one masked binary message, Read returns the payloads of the gate's
// binary messages (answering pings) in order.
type wsNetConn struct {
	net.Conn
	rd  io.Reader
	buf []byte
}

func (c *wsNetConn) Write(p []byte) (int, error) {
	if err := wsutil.WriteClientBinary(c.Conn, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *wsNetConn) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		data, op, err := wsutil.ReadServerData(struct {
			io.Reader
			io.Writer
		}{c.rd, c.Conn})
		if err != nil {
			return 0, err
		}
		if op != ws.OpBinary {
			return 0, fmt.Errorf("opcode %v", op)
		}
		c.buf = data
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

func wsGate(t *testing.T, edit func(*config.Gate)) (*fakeLogic, *Server) {
	t.Helper()
	fl, addr := startLogic(t)
	cfg := testGateConfig(addr)
	cfg.WSAddr = "127.0.0.1:0"
	if edit != nil {
		edit(&cfg)
	}
	return fl, startGate(t, cfg)
}

// dialWS upgrades a connection to the gate's /ws; sizes (optional) split
// every client write.
func dialWS(t *testing.T, s *Server, origin string, sizes ...int) (*client, *wsNetConn, error) {
	t.Helper()
	d := ws.Dialer{Timeout: safety}
	if origin != "" {
		d.Header = ws.HandshakeHeaderHTTP(http.Header{"Origin": []string{origin}})
	}
	if len(sizes) > 0 {
		d.NetDial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := net.DialTimeout(network, addr, safety)
			if err != nil {
				return nil, err
			}
			return &splitConn{Conn: nc, sizes: sizes}, nil
		}
	}
	conn, br, _, err := d.Dial(context.Background(), "ws://"+s.WSAddr()+"/ws")
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { _ = conn.Close() })
	var rd io.Reader = conn
	if br != nil {
		rd = io.MultiReader(br, conn)
	}
	wc := &wsNetConn{Conn: conn, rd: rd}
	return &client{t: t, nc: wc}, wc, nil
}

func mustDialWS(t *testing.T, s *Server, sizes ...int) (*client, *wsNetConn) {
	t.Helper()
	c, wc, err := dialWS(t, s, "", sizes...)
	if err != nil {
		t.Fatalf("ws dial: %v", err)
	}
	return c, wc
}

// expectWSClose reads frames until the gate's close frame and checks its
// code, then that the socket closes.
func expectWSClose(t *testing.T, wc *wsNetConn, want ws.StatusCode) {
	t.Helper()
	_ = wc.SetReadDeadline(time.Now().Add(safety))
	for {
		f, err := ws.ReadFrame(wc.rd)
		if err != nil {
			t.Fatalf("no close frame (want %d): %v", want, err)
		}
		if f.Header.OpCode != ws.OpClose {
			continue
		}
		if code, _ := ws.ParseCloseFrameData(f.Payload); code != want {
			t.Fatalf("close code %d, want %d", code, want)
		}
		break
	}
	if _, err := wc.Conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("socket still open after close frame")
	}
}

// must-show 6: AUTH, heartbeat, ping and a push over WebSocket, each
// answer one binary message holding one Spark frame.
func TestWSAuthHeartbeatPush(t *testing.T) {
	fl, s := wsGate(t, nil)
	c, wc := mustDialWS(t, s)
	c.auth(42, "dev-ws")
	if ip := fl.lastRequest(protocol.CmdAuth).RealIp; ip != "127.0.0.1" {
		t.Fatalf("real_ip %q", ip)
	}
	c.send(protocol.CmdHeartbeat, 2, 2, nil)
	c.expectHeartbeat(2, 2)

	if err := wsutil.WriteClientMessage(wc.Conn, ws.OpPing, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	_ = wc.SetReadDeadline(time.Now().Add(safety))
	f, err := ws.ReadFrame(wc.rd)
	if err != nil || f.Header.OpCode != ws.OpPong || string(f.Payload) != "hi" {
		t.Fatalf("pong %+v %q %v", f.Header, f.Payload, err)
	}

	pc := pushClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()
	body := envelope.OK("AAAAAAAAAAA", []byte(`{"msg_id":"1"}`))
	target := &gatev1.Target{ConnId: fl.connID(t, "dev-ws"), UserId: 42, DeviceId: "dev-ws"}
	for range 2 {
		r, err := pc.Push(ctx, &gatev1.PushRequest{Targets: []*gatev1.Target{target}, Command: uint32(protocol.CmdMessage), Body: body})
		if err != nil || r.Delivered != 1 {
			t.Fatalf("push: %v %v", r, err)
		}
	}
	for range 2 {
		msg, op, err := wsutil.ReadServerData(struct {
			io.Reader
			io.Writer
		}{wc.rd, wc.Conn})
		if err != nil || op != ws.OpBinary {
			t.Fatalf("push message: %v %v", op, err)
		}
		h, b, n, err := frame.Decode(msg, 0)
		if err != nil || n != len(msg) || h.Command != protocol.CmdMessage || !bytes.Contains(b, []byte(`"msg_id":"1"`)) {
			t.Fatalf("push message is not one frame: n=%d len=%d %+v %v", n, len(msg), h, err)
		}
	}
	fl.mu.Lock()
	addrs := fl.hellos[0].ClientAddrs
	fl.mu.Unlock()
	if !slices.Contains(addrs, "ws://"+s.WSAddr()+"/ws") {
		t.Fatalf("client addrs %v lack ws", addrs)
	}
}

// must-show 6: each violation is refused with its close code (or HTTP
// status at the upgrade) while a TCP and a WebSocket client on the same
// gate keep working.
func TestWSRefusals(t *testing.T) {
	_, s := wsGate(t, func(g *config.Gate) {
		g.MaxFrameSize = 4 << 10
		g.WSAllowedOrigins = []string{"https://h5.example.com"}
	})
	tcp := dial(t, s)
	tcp.auth(1, "dev-tcp")
	other, _, err := dialWS(t, s, "https://h5.example.com")
	if err != nil {
		t.Fatal(err)
	}
	other.auth(2, "dev-ws-other")
	var seq uint32 = 10
	stillFine := func(t *testing.T) {
		t.Helper()
		seq++
		tcp.t, other.t = t, t
		tcp.send(protocol.CmdHeartbeat, uint64(seq), seq, nil)
		tcp.expectHeartbeat(uint64(seq), seq)
		other.send(protocol.CmdHeartbeat, uint64(seq), seq, nil)
		other.expectHeartbeat(uint64(seq), seq)
	}
	hb := frame.Encode(frame.Header{Command: protocol.CmdHeartbeat, RequestID: 1, SequenceID: 1}, nil)
	cases := []struct {
		name string
		send func(wc *wsNetConn) error
		code ws.StatusCode
	}{
		{"text", func(wc *wsNetConn) error { return wsutil.WriteClientText(wc.Conn, hb) }, ws.StatusUnsupportedData},
		{"oversize", func(wc *wsNetConn) error {
			return wsutil.WriteClientBinary(wc.Conn, frame.Encode(frame.Header{Command: protocol.CmdGenerateMsgID}, make([]byte, 5<<10)))
		}, ws.StatusMessageTooBig},
		{"unmasked", func(wc *wsNetConn) error { return ws.WriteFrame(wc.Conn, ws.NewBinaryFrame(hb)) }, ws.StatusProtocolError},
		{"two frames in one message", func(wc *wsNetConn) error {
			return wsutil.WriteClientBinary(wc.Conn, append(append([]byte(nil), hb...), hb...))
		}, ws.StatusInvalidFramePayloadData},
		{"not a frame", func(wc *wsNetConn) error { return wsutil.WriteClientBinary(wc.Conn, []byte("hello")) }, ws.StatusInvalidFramePayloadData},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, wc, err := dialWS(t, s, "")
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.send(wc); err != nil {
				t.Fatal(err)
			}
			expectWSClose(t, wc, tc.code)
			stillFine(t)
		})
	}
	t.Run("client close is answered", func(t *testing.T) {
		c, wc, err := dialWS(t, s, "")
		if err != nil {
			t.Fatal(err)
		}
		c.auth(3, "dev-closing")
		if err := ws.WriteFrame(wc.Conn, ws.MaskFrame(ws.NewCloseFrame(ws.NewCloseFrameBody(ws.StatusGoingAway, "bye")))); err != nil {
			t.Fatal(err)
		}
		expectWSClose(t, wc, ws.StatusGoingAway)
		stillFine(t)
	})
	t.Run("bad origin", func(t *testing.T) {
		_, _, err := dialWS(t, s, "https://evil.example.com")
		var st ws.StatusError
		if !errors.As(err, &st) || int(st) != http.StatusForbidden {
			t.Fatalf("bad origin: %v", err)
		}
		stillFine(t)
	})
	t.Run("other path", func(t *testing.T) {
		_, _, _, err := ws.Dialer{Timeout: safety}.Dial(context.Background(), "ws://"+s.WSAddr()+"/other")
		var st ws.StatusError
		if !errors.As(err, &st) || int(st) != http.StatusNotFound {
			t.Fatalf("other path: %v", err)
		}
		stillFine(t)
	})
	if n := s.metrics.Connections.Load(); n != 2 {
		t.Fatalf("%d sessions, want the 2 healthy ones", n)
	}
}

// WebSocket frames cut into 1- to 1,500-byte TCP writes, a 20 KiB message
// and a fragmented message still parse.
func TestWSSplitFrames(t *testing.T) {
	_, s := wsGate(t, nil)
	c, wc := mustDialWS(t, s, 1, 2, 3, 5, 7, 11, 64, 100, 333, 512, 1000, 1500)
	c.auth(5, "dev-ws-split")
	c.sendBurstAndLargeFrame()

	// One Spark frame in three fragments, with a ping between them.
	hb := frame.Encode(frame.Header{Command: protocol.CmdHeartbeat, RequestID: 21, SequenceID: 21}, nil)
	parts := []ws.Frame{
		ws.NewFrame(ws.OpBinary, false, hb[:5]),
		ws.NewPingFrame([]byte("p")),
		ws.NewFrame(ws.OpContinuation, false, hb[5:12]),
		ws.NewFrame(ws.OpContinuation, true, hb[12:]),
	}
	for _, f := range parts {
		if err := ws.WriteFrame(wc.Conn, ws.MaskFrame(f)); err != nil {
			t.Fatal(err)
		}
	}
	c.expectHeartbeat(21, 21)
}

// Behind a balancer the PROXY header comes before the upgrade request.
func TestWSAfterProxyHeader(t *testing.T) {
	fl, s := wsGate(t, func(g *config.Gate) {
		g.ProxyProtocol = true
		g.ProxyTrustedCIDRs = []string{"127.0.0.0/8"}
	})
	raw, err := net.DialTimeout("tcp", s.WSAddr(), safety)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	if _, err := raw.Write([]byte("PROXY TCP4 203.0.113.51 127.0.0.1 4000 8180\r\n")); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("ws://" + s.WSAddr() + "/ws")
	_ = raw.SetDeadline(time.Now().Add(safety))
	br, _, err := ws.Dialer{}.Upgrade(raw, u)
	if err != nil {
		t.Fatal(err)
	}
	_ = raw.SetDeadline(time.Time{})
	var rd io.Reader = raw
	if br != nil {
		rd = bufio.NewReader(io.MultiReader(br, raw))
	}
	c := &client{t: t, nc: &wsNetConn{Conn: raw, rd: rd}}
	c.auth(11, "dev-proxied-ws")
	if ip := fl.lastRequest(protocol.CmdAuth).RealIp; ip != "203.0.113.51" {
		t.Fatalf("real_ip %q", ip)
	}
}
