package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/protocol"
)

// dialWSS upgrades a TLS connection to the gate's wss listener; sizes
// (optional) split every client write into TCP pieces.
func (f *tlsFixture) dialWSS(t *testing.T, sizes ...int) (*client, *wsNetConn) {
	t.Helper()
	raw, err := net.DialTimeout("tcp", f.s.WSSAddr(), safety)
	if err != nil {
		t.Fatal(err)
	}
	var nc net.Conn = raw
	if len(sizes) > 0 {
		nc = &splitConn{Conn: raw, sizes: sizes}
	}
	tc := tls.Client(nc, &tls.Config{RootCAs: f.ca.Pool, ServerName: "127.0.0.1"})
	t.Cleanup(func() { _ = tc.Close() })
	_ = tc.SetDeadline(time.Now().Add(safety))
	u, _ := url.Parse("wss://" + f.s.WSSAddr() + "/ws")
	br, _, err := ws.Dialer{}.Upgrade(tc, u)
	if err != nil {
		t.Fatalf("wss upgrade: %v", err)
	}
	_ = tc.SetDeadline(time.Time{})
	var rd io.Reader = tc
	if br != nil {
		rd = io.MultiReader(br, tc)
	}
	wc := &wsNetConn{Conn: tc, rd: rd}
	return &client{t: t, nc: wc}, wc
}

// WebSocket inside TLS: AUTH, heartbeats, a message larger than a TLS
// record, a ping, all with the client's writes cut into 1- to 1,500-byte
// pieces; the plain listeners keep working beside it and the wss URL is
// among the addresses the gate announces.
func TestWSSAuthHeartbeatPingOverSplitRecords(t *testing.T) {
	f := tlsGate(t, func(g *config.Gate) {
		g.WSAddr = "127.0.0.1:0"
		g.WSSAddr = "127.0.0.1:0"
	})
	c, wc := f.dialWSS(t, 1, 2, 3, 5, 7, 11, 64, 100, 333, 512, 1000, 1500)
	c.auth(77, "dev-wss")
	if ip := f.fl.lastRequest(protocol.CmdAuth).RealIp; ip != "127.0.0.1" {
		t.Fatalf("real_ip %q", ip)
	}
	c.sendBurstAndLargeFrame()

	if err := wsutil.WriteClientMessage(wc.Conn, ws.OpPing, []byte("wss")); err != nil {
		t.Fatal(err)
	}
	_ = wc.SetReadDeadline(time.Now().Add(safety))
	fr, err := ws.ReadFrame(wc.rd)
	if err != nil || fr.Header.OpCode != ws.OpPong || string(fr.Payload) != "wss" {
		t.Fatalf("pong %+v %q %v", fr.Header, fr.Payload, err)
	}
	_ = wc.SetReadDeadline(time.Time{})

	plain := dial(t, f.s)
	plain.auth(78, "dev-plain")
	plain.send(protocol.CmdHeartbeat, 2, 2, nil)
	plain.expectHeartbeat(2, 2)
	w, _ := mustDialWS(t, f.s)
	w.auth(79, "dev-ws")
	w.send(protocol.CmdHeartbeat, 3, 3, nil)
	w.expectHeartbeat(3, 3)

	f.fl.mu.Lock()
	addrs := f.fl.hellos[0].ClientAddrs
	f.fl.mu.Unlock()
	for _, want := range []string{"tcp://" + f.s.TCPAddr(), "tls://" + f.s.TLSAddr(), "ws://" + f.s.WSAddr() + "/ws", "wss://" + f.s.WSSAddr() + "/ws"} {
		if !slices.Contains(addrs, want) {
			t.Errorf("client addrs %v lack %s", addrs, want)
		}
	}
}

// A wss listener without certificates is a configuration error, not a
// listener that silently never starts.
func TestWSSNeedsCertificates(t *testing.T) {
	cfg := testGateConfig("127.0.0.1:1")
	cfg.WSSAddr = "127.0.0.1:0"
	if _, err := New(Options{Gate: cfg, ClusterSecret: testSecret, Logger: zap.NewNop()}); err == nil {
		t.Fatal("gate with wss_addr and no certificate started")
	}
}

// dialWSFrom upgrades from a given local address with extra headers.
func dialWSFrom(t *testing.T, s *Server, local string, hdr http.Header) (*client, error) {
	t.Helper()
	d := ws.Dialer{
		Timeout: safety,
		Header:  ws.HandshakeHeaderHTTP(hdr),
		NetDial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			nd := net.Dialer{Timeout: safety, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
			return nd.DialContext(ctx, network, addr)
		},
	}
	conn, br, _, err := d.Dial(context.Background(), "ws://"+s.WSAddr()+"/ws")
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = conn.Close() })
	var rd io.Reader = conn
	if br != nil {
		rd = io.MultiReader(br, conn)
	}
	return &client{t: t, nc: &wsNetConn{Conn: conn, rd: rd}}, nil
}

// Behind an HTTP proxy the client's address comes from the configured
// header, and only when the proxy is trusted: the last X-Forwarded-For
// entry (what the proxy appended) counts, a direct client's header is
// ignored, and a trusted proxy's unparsable header refuses the upgrade.
func TestWSRealIPHeaderOnlyFromTrustedProxy(t *testing.T) {
	fl, s := wsGate(t, func(g *config.Gate) {
		g.WSRealIPHeader = "X-Forwarded-For"
		g.ProxyTrustedCIDRs = []string{"127.0.0.1"}
	})
	cases := []struct {
		name, from, xff, want string
		status                int
	}{
		{"trusted proxy, last hop counts", "127.0.0.1", "198.51.100.1, 203.0.113.9", "203.0.113.9", 0},
		{"trusted proxy, IPv6 client", "127.0.0.1", "2001:db8::7", "2001:db8::7", 0},
		{"trusted proxy without the header", "127.0.0.1", "", "127.0.0.1", 0},
		{"untrusted peer's header is ignored", "127.0.0.2", "203.0.113.9", "127.0.0.2", 0},
		{"trusted proxy, garbage", "127.0.0.1", "not-an-address", "", http.StatusBadRequest},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hdr := http.Header{}
			if tc.xff != "" {
				hdr.Set("X-Forwarded-For", tc.xff)
			}
			c, err := dialWSFrom(t, s, tc.from, hdr)
			if tc.status != 0 {
				var st ws.StatusError
				if !errors.As(err, &st) || int(st) != tc.status {
					t.Fatalf("upgrade: %v, want status %d", err, tc.status)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.auth(int64(100+i), "dev-xff")
			if got := fl.lastRequest(protocol.CmdAuth).RealIp; got != tc.want {
				t.Fatalf("real_ip %q, want %q", got, tc.want)
			}
		})
	}
}

// gate.proxy_protocol_listeners: the TCP listener demands a PROXY header
// while the WebSocket listener, left out, takes direct upgrades.
func TestProxyProtocolPerListener(t *testing.T) {
	fl, s := wsGate(t, func(g *config.Gate) {
		g.ProxyProtocol = true
		g.ProxyTrustedCIDRs = []string{"127.0.0.0/8"}
		g.ProxyProtocolListeners = []string{"tcp"}
	})
	w, _ := mustDialWS(t, s)
	w.auth(5, "dev-ws-direct")
	if got := fl.lastRequest(protocol.CmdAuth).RealIp; got != "127.0.0.1" {
		t.Fatalf("ws real_ip %q", got)
	}

	// Without a header the TCP listener reads a frame as a bad header.
	raw, err := net.DialTimeout("tcp", s.TCPAddr(), safety)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("not a proxy header\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = raw.SetReadDeadline(time.Now().Add(safety))
	if _, err := raw.Read(make([]byte, 1)); err == nil {
		t.Fatal("tcp listener kept a connection without a PROXY header")
	}

	p := dial(t, s)
	p.raw([]byte("PROXY TCP4 203.0.113.60 127.0.0.1 4000 8100\r\n"))
	p.auth(6, "dev-tcp-proxied")
	if got := fl.lastRequest(protocol.CmdAuth).RealIp; got != "203.0.113.60" {
		t.Fatalf("tcp real_ip %q", got)
	}
}
