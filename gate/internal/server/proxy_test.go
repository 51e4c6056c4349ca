package server

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
)

// headerTimeout is the gate's proxy_header_timeout: short where a test
// waits for it to close a slow header, long where a header sent one byte a
// millisecond must arrive whole even on a loaded machine.
func proxyGate(t *testing.T, headerTimeout time.Duration, trusted ...string) (*fakeLogic, *Server) {
	t.Helper()
	fl, addr := startLogic(t)
	cfg := testGateConfig(addr)
	cfg.ProxyProtocol = true
	cfg.ProxyTrustedCIDRs = trusted
	cfg.ProxyHeaderTimeout = headerTimeout
	return fl, startGate(t, cfg)
}

// proxyV2 builds a v2 PROXY (cmd 1) or LOCAL (cmd 0) header for src.
func proxyV2(cmd byte, src string) []byte {
	b := []byte("\r\n\r\n\x00\r\nQUIT\n")
	var addrs []byte
	fam := byte(0x00)
	if src != "" {
		ap := netip.MustParseAddrPort(src)
		fam = 0x11
		if ap.Addr().Is6() {
			fam = 0x21
		}
		s := ap.Addr().AsSlice()
		addrs = append(append(addrs, s...), make([]byte, len(s))...) // destination: zeros
		addrs = binary.BigEndian.AppendUint16(addrs, ap.Port())
		addrs = binary.BigEndian.AppendUint16(addrs, 8100)
	}
	tlv := []byte{0x04, 0x00, 0x02, 'x', 'y'} // NOOP, skipped
	b = append(b, 0x20|cmd, fam)
	b = binary.BigEndian.AppendUint16(b, uint16(len(addrs)+len(tlv)))
	return append(append(b, addrs...), tlv...)
}

// The client's address as the PROXY header names it is what logic gets as
// real_ip; LOCAL and UNKNOWN keep the socket's.
func TestProxyHeaderSetsRealIP(t *testing.T) {
	fl, s := proxyGate(t, 10*time.Second, "127.0.0.0/8")
	cases := []struct {
		name   string
		header []byte
		realIP string
		split  bool
	}{
		{"v1 TCP4", []byte("PROXY TCP4 203.0.113.7 127.0.0.1 51234 8100\r\n"), "203.0.113.7", false},
		{"v1 TCP6", []byte("PROXY TCP6 2001:db8::7 2001:db8::1 51234 8100\r\n"), "2001:db8::7", false},
		{"v1 UNKNOWN", []byte("PROXY UNKNOWN\r\n"), "127.0.0.1", false},
		{"v2 IPv4", proxyV2(1, "198.51.100.9:4000"), "198.51.100.9", false},
		{"v2 IPv6", proxyV2(1, "[2001:db8::9]:4000"), "2001:db8::9", false},
		{"v2 IPv4-mapped IPv6", proxyV2(1, "[::ffff:198.51.100.10]:4000"), "198.51.100.10", false},
		{"v2 LOCAL", proxyV2(0, ""), "127.0.0.1", false},
		{"v1 byte by byte, then the frame", []byte("PROXY TCP4 203.0.113.8 127.0.0.1 1 8100\r\n"), "203.0.113.8", true},
		{"v2 byte by byte, then the frame", proxyV2(1, "198.51.100.11:1"), "198.51.100.11", true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, s)
			c.t = t
			device := "dev-proxy-" + string(rune('a'+i))
			auth := frame.Encode(frame.Header{Command: protocol.CmdAuth, RequestID: 1, SequenceID: 1},
				[]byte(`{"token":"user:5","device_id":"`+device+`","platform":"test"}`))
			if tc.split {
				for _, b := range tc.header {
					c.raw([]byte{b})
					time.Sleep(time.Millisecond)
				}
				c.raw(auth)
			} else {
				// Header and first frame in one write: the frame must
				// not be lost to the header's parsing.
				c.raw(append(append([]byte(nil), tc.header...), auth...))
			}
			c.expect(protocol.CmdAuth, 1, 1, errcode.OK)
			r := fl.lastRequest(protocol.CmdAuth)
			if !strings.Contains(string(r.Body), device) {
				t.Fatalf("last AUTH was %s", r.Body)
			}
			if r.RealIp != tc.realIP {
				t.Fatalf("real_ip %q, want %q", r.RealIp, tc.realIP)
			}
			c.send(protocol.CmdGenerateMsgID, 2, 2, []byte(`{}`))
			c.expect(protocol.CmdGenerateMsgID, 2, 2, errcode.OK)
			if r := fl.lastRequest(protocol.CmdGenerateMsgID); r.RealIp != tc.realIP {
				t.Fatalf("later request real_ip %q, want %q", r.RealIp, tc.realIP)
			}
		})
	}
}

// From an untrusted source, with a malformed, truncated or slow header, the
// connection closes and no session ever starts.
func TestProxyStageCloses(t *testing.T) {
	timeout := 300 * time.Millisecond
	_, s := proxyGate(t, timeout, "127.0.0.1/32")
	cases := []struct {
		name string
		// from is the client's local address; untrusted peers use
		// another loopback address.
		from string
		send []byte
		// minAge is how long the gate must wait before closing: the
		// deadline cases must not close early.
		minAge time.Duration
	}{
		{"untrusted source", "127.0.0.9", []byte("PROXY TCP4 203.0.113.7 127.0.0.1 1 8100\r\n"), 0},
		{"frame without a header", "", frame.Encode(frame.Header{Command: protocol.CmdHeartbeat, RequestID: 1}, nil), 0},
		{"malformed v1", "", []byte("PROXY TCP4 203.0.113.7\r\n"), 0},
		{"v1 line too long", "", []byte("PROXY UNKNOWN " + strings.Repeat("x", 120)), 0},
		{"v2 bad version", "", append([]byte("\r\n\r\n\x00\r\nQUIT\n"), 0x11, 0x11, 0, 12), 0},
		{"truncated v2 header", "", proxyV2(1, "198.51.100.9:4000")[:20], timeout / 2},
		{"truncated v1 header", "", []byte("PROXY TCP4 203.0.113.7 127.0.0.1 1"), timeout / 2},
		{"slow header: nothing sent", "", nil, timeout / 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := net.Dialer{Timeout: safety}
			if tc.from != "" {
				d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(tc.from)}
			}
			nc, err := d.Dial("tcp", s.TCPAddr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = nc.Close() })
			c := &client{t: t, nc: nc}
			start := time.Now()
			if len(tc.send) > 0 {
				c.raw(tc.send)
			}
			c.expectClosed()
			if age := time.Since(start); age < tc.minAge {
				t.Fatalf("closed after %v, before the header deadline", age)
			}
		})
	}
	// A header trickled in slower than the deadline closes too, even though
	// bytes keep arriving.
	t.Run("slow header: trickled", func(t *testing.T) {
		c := dial(t, s)
		c.t = t
		start := time.Now()
		for _, b := range []byte("PROXY TCP4 203.0.113.7 127.0.0.1 1 8100\r\n") {
			if _, err := c.nc.Write([]byte{b}); err != nil {
				break
			}
			time.Sleep(40 * time.Millisecond)
			if time.Since(start) > 3*timeout {
				break
			}
		}
		c.expectClosed()
	})
	if s.table.Len() != 0 {
		t.Fatalf("%d sessions started", s.table.Len())
	}
	if got := s.metrics.ProxyRejects.Load(); got < 9 {
		t.Fatalf("proxy_rejects %d, want 9", got)
	}
}

func TestProxyConfig(t *testing.T) {
	for _, tc := range []struct {
		cidrs     []string
		listeners []string
		ok        bool
	}{
		{nil, nil, false},
		{[]string{""}, nil, false},
		{[]string{"10.0.0.0/8", "127.0.0.1", "::1", "fd00::/8"}, nil, true},
		{[]string{"10.0.0.0/33"}, nil, false},
		{[]string{"not-an-ip"}, nil, false},
		{[]string{"10.0.0.0/8"}, []string{"tcp", "tls", "ws", "wss"}, true},
		{[]string{"10.0.0.0/8"}, []string{"http"}, false},
	} {
		trusted, err := parsePeerSet(tc.cidrs)
		if err == nil {
			_, err = newProxyPolicy(trusted, time.Second, tc.listeners)
		}
		if (err == nil) != tc.ok {
			t.Errorf("cidrs %q listeners %q: err %v, want ok=%v", tc.cidrs, tc.listeners, err, tc.ok)
		}
	}
	some, err := newProxyPolicy(mustPeerSet(t, "10.0.0.0/8"), time.Second, []string{"tls"})
	if err != nil {
		t.Fatal(err)
	}
	for kind, want := range map[carrier]bool{carrierTCP: false, carrierTLS: true, carrierWS: false, carrierWSS: false} {
		if got := some.on(kind); got != want {
			t.Errorf("on(%s) = %v, want %v", kind, got, want)
		}
	}
	var off *proxyPolicy
	if off.on(carrierTCP) {
		t.Error("a nil policy (PROXY off) expects headers")
	}
	p, err := newProxyPolicy(mustPeerSet(t, "10.0.0.0/8", "127.0.0.1"), time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{"10.1.2.3:1": true, "127.0.0.1:1": true, "127.0.0.2:1": false, "[::ffff:10.0.0.1]:1": true, "[::1]:1": false} {
		a, _ := net.ResolveTCPAddr("tcp", addr)
		if got := p.trusts(a); got != want {
			t.Errorf("trusts(%s) = %v, want %v", addr, got, want)
		}
	}
}

func mustPeerSet(t *testing.T, cidrs ...string) peerSet {
	t.Helper()
	set, err := parsePeerSet(cidrs)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// gate.proxy_trusted_cidrs is parsed once for both the PROXY header and the
// WebSocket real-IP header, and only when one of them uses it.
func TestTrustedPeersParsedOnlyWhenAProxyPolicyUsesThem(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     config.Gate
		wantLen int
		ok      bool
	}{
		{"neither policy on, bad entry ignored", config.Gate{ProxyTrustedCIDRs: []string{"not-an-ip"}}, 0, true},
		{"PROXY on", config.Gate{ProxyProtocol: true, ProxyTrustedCIDRs: []string{"10.0.0.0/8", "127.0.0.1"}}, 2, true},
		{"PROXY on, bad entry", config.Gate{ProxyProtocol: true, ProxyTrustedCIDRs: []string{"10.0.0.0/33"}}, 0, false},
		{"real-IP header on", config.Gate{WSRealIPHeader: "X-Real-IP", ProxyTrustedCIDRs: []string{"::1"}}, 1, true},
		{"real-IP header on, bad entry", config.Gate{WSRealIPHeader: "X-Real-IP", ProxyTrustedCIDRs: []string{"nope"}}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, err := newTrustedPeers(&tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok=%v", err, tc.ok)
			}
			if len(set) != tc.wantLen {
				t.Fatalf("%d trusted networks, want %d", len(set), tc.wantLen)
			}
		})
	}
}
