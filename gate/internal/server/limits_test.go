package server

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
)

// The admission counters: a refusal counts nothing, every admitted
// connection is released exactly once, and authenticating frees an
// unauthenticated slot but not the address's.
func TestConnLimitsCounting(t *testing.T) {
	type step struct {
		op   string // admit, auth, release, release-unauth
		key  string
		want string // admit's refusal
	}
	tests := []struct {
		name          string
		perIP, unauth int
		steps         []step
		wantUnauthed  int64
	}{
		{"per address", 2, 0, []step{
			{"admit", "a", ""}, {"admit", "a", ""}, {"admit", "a", refusedPerIP}, {"admit", "b", ""},
			{"release-unauth", "a", ""}, {"admit", "a", ""}, {"auth", "a", ""}, {"admit", "a", refusedPerIP},
		}, 2},
		{"unauthenticated", 0, 2, []step{
			{"admit", "a", ""}, {"admit", "b", ""}, {"admit", "c", refusedUnauth}, {"auth", "a", ""},
			{"admit", "c", ""}, {"admit", "d", refusedUnauth}, {"release", "a", ""}, {"admit", "d", refusedUnauth},
			{"release-unauth", "b", ""}, {"admit", "d", ""},
		}, 2},
		{"both off", 0, 0, []step{{"admit", "a", ""}, {"admit", "a", ""}, {"admit", "a", ""}}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newConnLimits(tt.perIP, tt.unauth)
			for i, s := range tt.steps {
				switch s.op {
				case "admit":
					if got := l.admit(s.key); got != s.want {
						t.Fatalf("step %d admit %s: %q, want %q", i, s.key, got, s.want)
					}
				case "auth":
					l.authenticated()
				case "release":
					l.release(s.key, false)
				case "release-unauth":
					l.release(s.key, true)
				}
			}
			if got := l.unauthed.Load(); got != tt.wantUnauthed {
				t.Fatalf("unauthenticated %d, want %d", got, tt.wantUnauthed)
			}
		})
	}
}

// dialFrom opens a raw client connection from a loopback source address
// (all of 127.0.0.0/8 is local on Linux).
func dialFrom(t *testing.T, addr, src string) *client {
	t.Helper()
	d := net.Dialer{Timeout: safety, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &client{t: t, nc: nc}
}

// refusedOnAuth sends AUTH (a refused plain TCP connection gets its
// refusal with its first bytes) and expects the refusal.
func (c *client) refusedOnAuth(reason string) {
	c.t.Helper()
	c.send(protocol.CmdAuth, 7, 7, []byte(`{"token":"user:9","device_id":"over"}`))
	c.expectRefused(reason)
}

// expectRefused reads the refusal frame of a connection over a cap
// (command AUTH, RequestID 0, 42901 naming the cap) and the close.
func (c *client) expectRefused(reason string) {
	c.t.Helper()
	a := c.expect(protocol.CmdAuth, 0, 0, errcode.RateLimited)
	if a.env.Msg != reason {
		c.t.Fatalf("refusal %q, want %q", a.env.Msg, reason)
	}
	c.expectClosed()
}

// waitConns waits until the gate holds n sessions.
func waitConns(t *testing.T, s *Server, n int64) {
	t.Helper()
	deadline := time.Now().Add(safety)
	for s.metrics.Connections.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions, want %d", s.metrics.Connections.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// gate.max_conns_per_ip: an address at the cap gets one 42901 frame and a
// close, whether authenticated connections hold the cap or not and on
// either listener; another address connects; a closed connection frees
// its slot; a refused client that sends nothing is closed anyway.
func TestConnCapPerAddress(t *testing.T) {
	fl, addr := startLogic(t)
	cfg := testGateConfig(addr)
	cfg.WSAddr = "127.0.0.1:0"
	cfg.MaxConnsPerIP = 3
	s := startGate(t, cfg)
	held := []*client{dialFrom(t, s.TCPAddr(), "127.0.0.1"), dialFrom(t, s.TCPAddr(), "127.0.0.1"), dialFrom(t, s.TCPAddr(), "127.0.0.1")}
	held[0].auth(1, "held-0")
	waitConns(t, s, 3)

	dialFrom(t, s.TCPAddr(), "127.0.0.1").refusedOnAuth(refusedPerIP)
	fl.mu.Lock()
	_, reached := fl.connOf["over"]
	fl.mu.Unlock()
	if reached {
		t.Fatal("a refused connection's AUTH reached logic")
	}

	wsc, _ := mustDialWS(t, s)
	wsc.expectRefused(refusedPerIP)

	other := dialFrom(t, s.TCPAddr(), "127.0.0.2")
	other.auth(2, "other-address")

	silent := dialFrom(t, s.TCPAddr(), "127.0.0.1")
	start := time.Now()
	silent.expectClosed()
	if d := time.Since(start); d > refuseGrace+time.Second {
		t.Fatalf("silent refused connection closed after %v", d)
	}

	_ = held[1].nc.Close()
	waitConns(t, s, 3)
	again := dialFrom(t, s.TCPAddr(), "127.0.0.1")
	again.auth(3, "after-a-close")
	if got := s.limits.refusedPerIP.Load(); got != 3 {
		t.Fatalf("conn_per_ip_rejects_total %d, want 3", got)
	}
}

// gate.max_unauthenticated: past the cap a new connection is refused;
// one that authenticates frees its slot.
func TestUnauthenticatedCap(t *testing.T) {
	_, addr := startLogic(t)
	cfg := testGateConfig(addr)
	cfg.MaxUnauthenticated = 2
	s := startGate(t, cfg)
	a, b := dial(t, s), dial(t, s)
	waitConns(t, s, 2)
	dial(t, s).refusedOnAuth(refusedUnauth)
	a.auth(1, "a")
	c := dial(t, s)
	waitConns(t, s, 3)
	dial(t, s).refusedOnAuth(refusedUnauth)
	_ = b.nc.Close()
	waitConns(t, s, 2)
	c.auth(2, "c")
	d := dial(t, s)
	d.auth(3, "d")
	if got := s.limits.unauthed.Load(); got != 0 {
		t.Fatalf("%d unauthenticated, want 0", got)
	}
}

// Before AUTH a connection may send frames up to
// gate.preauth_max_frame_size: a header announcing more (even under
// max_frame_size, and with no body) closes it at once instead of making
// the gate buffer the body, and a small gzip body may not inflate past
// four times the limit. After AUTH the full max_frame_size applies.
func TestPreAuthFrameLimit(t *testing.T) {
	_, addr := startLogic(t)
	cfg := testGateConfig(addr)
	cfg.WSAddr = "127.0.0.1:0"
	cfg.PreAuthMaxFrameSize = 1 << 10
	s := startGate(t, cfg)
	header := func(cmd uint16, bodyLen int) []byte {
		b := make([]byte, frame.HeaderSize)
		frame.PutHeader(b, frame.Header{Command: cmd, RequestID: 1, SequenceID: 1})
		binary.BigEndian.PutUint32(b[19:23], uint32(bodyLen))
		return b
	}
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	_, _ = zw.Write([]byte(`{"token":"` + strings.Repeat("a", 8<<10) + `"}`))
	_ = zw.Close()

	t.Run("header announcing 60 KiB before AUTH closes", func(t *testing.T) {
		c := dial(t, s)
		c.raw(header(protocol.CmdAuth, 60<<10))
		c.expectClosed()
		if s.limits.preAuthTooLarge.Load() == 0 {
			t.Fatal("preauth_frame_rejects_total not counted")
		}
	})
	t.Run("frame at the limit is read", func(t *testing.T) {
		c := dial(t, s)
		c.send(protocol.CmdSyncInbox, 2, 2, make([]byte, 1<<10-frame.HeaderSize))
		c.expect(protocol.CmdSyncInbox, 2, 2, errcode.NotAuthed)
		c.auth(1, "at-limit")
	})
	t.Run("gzip body inflating past the pre-auth bound", func(t *testing.T) {
		if bomb.Len() >= 1<<10-frame.HeaderSize {
			t.Fatalf("test body compressed to %d bytes, not under the limit", bomb.Len())
		}
		c := dial(t, s)
		c.raw(frame.Encode(frame.Header{Command: protocol.CmdAuth, Flags: frame.FlagGzip, RequestID: 3, SequenceID: 3}, bomb.Bytes()))
		c.expect(protocol.CmdAuth, 3, 3, errcode.TooLarge)
		c.expectClosed()
	})
	t.Run("after AUTH the full frame size", func(t *testing.T) {
		c := dial(t, s)
		c.auth(2, "big-after-auth")
		body := []byte(`"` + strings.Repeat("x", 60<<10) + `"`)
		c.send(protocol.CmdSendMessage, 4, 4, body)
		if a := c.expect(protocol.CmdSendMessage, 4, 4, errcode.OK); a.BodyLength < 60<<10 {
			t.Fatalf("echo of %d bytes", a.BodyLength)
		}
	})
	t.Run("websocket message over the limit before AUTH closes with 1009", func(t *testing.T) {
		_, wc := mustDialWS(t, s)
		msg := frame.Encode(frame.Header{Command: protocol.CmdAuth, RequestID: 5, SequenceID: 5}, make([]byte, 2<<10))
		if err := wsutil.WriteClientBinary(wc.Conn, msg); err != nil {
			t.Fatal(err)
		}
		expectWSClose(t, wc, ws.StatusMessageTooBig)
	})
	t.Run("websocket after AUTH takes the full size", func(t *testing.T) {
		c, wc := mustDialWS(t, s)
		c.auth(3, "ws-big")
		body := []byte(`"` + strings.Repeat("y", 8<<10) + `"`)
		if err := wsutil.WriteClientBinary(wc.Conn, frame.Encode(frame.Header{Command: protocol.CmdSendMessage, RequestID: 6, SequenceID: 6}, body)); err != nil {
			t.Fatal(err)
		}
		c.expect(protocol.CmdSendMessage, 6, 6, errcode.OK)
	})
}

// The pre-AUTH limit defaults to 4 KiB (config.Default); the server takes
// an explicit one as given and refuses one it cannot use instead of
// replacing it.
func TestPreAuthFrameSetting(t *testing.T) {
	for _, tt := range []struct {
		name       string
		max, pre   int
		wantPreAut int
		wantErr    bool
	}{
		{"default", 64 << 10, config.Default().Gate.PreAuthMaxFrameSize, 4 << 10, false},
		{"explicit", 64 << 10, 2048, 2048, false},
		{"zero refused", 64 << 10, 0, 0, true},
		{"over max_frame_size refused", 8 << 10, 16 << 10, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := testGateConfig("127.0.0.1:1")
			g.MaxFrameSize, g.PreAuthMaxFrameSize = tt.max, tt.pre
			s, err := New(Options{Gate: g, ClusterSecret: testSecret, Logger: zap.NewNop()})
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "gate.preauth_max_frame_size") {
					t.Fatalf("err %v, want one naming gate.preauth_max_frame_size", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.cfg.PreAuthMaxFrameSize != tt.wantPreAut {
				t.Fatalf("pre-auth limit %d, want %d", s.cfg.PreAuthMaxFrameSize, tt.wantPreAut)
			}
		})
	}
}

// The gate builds from the validated defaults alone (with only its
// secret), and refuses a zero it used to replace with a default.
func TestNewFromDefaults(t *testing.T) {
	c := config.Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Gate: c.Gate, ClusterSecret: testSecret, Logger: zap.NewNop()}); err != nil {
		t.Fatalf("New from config.Default(): %v", err)
	}
	for _, tt := range []struct {
		key    string
		change func(*config.Gate)
	}{
		{"gate.max_frame_size", func(g *config.Gate) { g.MaxFrameSize = 0 }},
		{"gate.shards", func(g *config.Gate) { g.Shards = 0 }},
		{"gate.outbound_queue", func(g *config.Gate) { g.OutboundQueue = 0 }},
		{"gate.request_timeout", func(g *config.Gate) { g.RequestTimeout = 0 }},
		{"gate.write_timeout", func(g *config.Gate) { g.WriteTimeout = 0 }},
		{"gate.drain_timeout", func(g *config.Gate) { g.DrainTimeout = 0 }},
		{"gate.tls_max_handshakes", func(g *config.Gate) { g.TLSMaxHandshakes = 0 }},
	} {
		g := c.Gate
		tt.change(&g)
		if _, err := New(Options{Gate: g, ClusterSecret: testSecret, Logger: zap.NewNop()}); err == nil || !strings.Contains(err.Error(), tt.key) {
			t.Errorf("%s zero: err %v, want one naming it", tt.key, err)
		}
	}
}
