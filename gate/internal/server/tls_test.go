package server

import (
	"bytes"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/testca"
)

type tlsFixture struct {
	fl                *fakeLogic
	s                 *Server
	ca                *testca.CA
	certFile, keyFile string
}

func tlsGate(t *testing.T, edit func(*config.Gate)) *tlsFixture {
	t.Helper()
	fl, addr := startLogic(t)
	ca := testca.New(t)
	dir := t.TempDir()
	f := &tlsFixture{fl: fl, ca: ca, certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem")}
	ca.WriteServer(t, f.certFile, f.keyFile, 100)
	cfg := testGateConfig(addr)
	cfg.TLSAddr = "127.0.0.1:0"
	cfg.TLSCertFile, cfg.TLSKeyFile = f.certFile, f.keyFile
	cfg.TLSReloadInterval = 20 * time.Millisecond
	if edit != nil {
		edit(&cfg)
	}
	f.s = startGate(t, cfg)
	return f
}

// splitConn writes each buffer in chunks cycling through sizes, pausing
// between them, so the gate sees TLS records cut at every kind of place.
type splitConn struct {
	net.Conn
	sizes []int
	i     int
}

func (c *splitConn) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(c.sizes[c.i%len(c.sizes)], len(p))
		c.i++
		if _, err := c.Conn.Write(p[:n]); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
		time.Sleep(200 * time.Microsecond)
	}
	return written, nil
}

// dialTLS connects to the gate's TLS listener; sizes (optional) split
// every client write.
func (f *tlsFixture) dialTLS(t *testing.T, conf *tls.Config, sizes ...int) (*client, *tls.Conn) {
	t.Helper()
	raw, err := net.DialTimeout("tcp", f.s.TLSAddr(), safety)
	if err != nil {
		t.Fatal(err)
	}
	var nc net.Conn = raw
	if len(sizes) > 0 {
		nc = &splitConn{Conn: raw, sizes: sizes}
	}
	if conf == nil {
		conf = &tls.Config{}
	}
	conf.RootCAs, conf.ServerName = f.ca.Pool, "127.0.0.1"
	tc := tls.Client(nc, conf)
	_ = tc.SetDeadline(time.Now().Add(safety))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	_ = tc.SetDeadline(time.Time{})
	t.Cleanup(func() { _ = tc.Close() })
	return &client{t: t, nc: tc}, tc
}

// sendBurstAndLargeFrame sends three heartbeats back to back, then a
// frame with a 20 KiB body (wider than a TLS record's 16 KiB), and checks
// every answer: what the split-write tests run over each carrier.
func (c *client) sendBurstAndLargeFrame() {
	c.t.Helper()
	for i := range 3 {
		c.send(protocol.CmdHeartbeat, uint64(10+i), uint32(10+i), nil)
	}
	for i := range 3 {
		c.expectHeartbeat(uint64(10+i), uint32(10+i))
	}
	big := append([]byte("{"), bytes.Repeat([]byte(" "), 20<<10)...)
	big = append(big, '}')
	c.send(protocol.CmdGenerateMsgID, 20, 20, big)
	c.expect(protocol.CmdGenerateMsgID, 20, 20, errcode.OK)
}

func serialOf(tc *tls.Conn) int64 {
	return tc.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// TLS records cut into 1- to 1,500-byte pieces still decrypt into frames:
// this guards the non-blocking read (crypto/tls must keep treating a
// temporary error as retryable and keep the partial record) against a Go
// upgrade. Frames larger than a record, and several frames in one write,
// cross record boundaries too.
func TestTLSSplitRecords(t *testing.T) {
	f := tlsGate(t, nil)
	sizes := []int{1, 2, 3, 5, 7, 11, 64, 100, 333, 512, 1000, 1500}
	for _, v := range []struct {
		name string
		ver  uint16
	}{{"TLS 1.2", tls.VersionTLS12}, {"TLS 1.3", tls.VersionTLS13}} {
		t.Run(v.name, func(t *testing.T) {
			c, tc := f.dialTLS(t, &tls.Config{MinVersion: v.ver, MaxVersion: v.ver}, sizes...)
			c.t = t
			if got := tc.ConnectionState().Version; got != v.ver {
				t.Fatalf("version %x, want %x", got, v.ver)
			}
			c.auth(int64(v.ver), "dev-tls-split")
			c.sendBurstAndLargeFrame()
			c.send(protocol.CmdHeartbeat, 21, 21, nil)
			c.expectHeartbeat(21, 21)
			if f.fl.lastRequest(protocol.CmdAuth).RealIp != "127.0.0.1" {
				t.Fatal("real_ip is not the client's")
			}
		})
	}
	// Plain TCP keeps working beside the TLS listener.
	p := dial(t, f.s)
	p.auth(7, "dev-plain")
	p.send(protocol.CmdHeartbeat, 2, 2, nil)
	p.expectHeartbeat(2, 2)
}

// A rotated certificate is served to new connections while an old one
// stays up and keeps working; a bad new file keeps the current
// certificate.
func TestTLSCertificateRotation(t *testing.T) {
	f := tlsGate(t, nil)
	old, oldTC := f.dialTLS(t, nil)
	old.auth(1, "dev-old")
	if serialOf(oldTC) != 100 {
		t.Fatalf("serial %d", serialOf(oldTC))
	}

	f.ca.WriteServer(t, f.certFile, f.keyFile, 200)
	f.waitFor(t, func() bool { return f.s.metrics.CertReloads.Load() >= 1 }, "reload")
	fresh, freshTC := f.dialTLS(t, nil)
	if serialOf(freshTC) != 200 {
		t.Fatalf("new connection got serial %d, want 200", serialOf(freshTC))
	}
	fresh.auth(2, "dev-new")
	old.send(protocol.CmdHeartbeat, 5, 5, nil)
	old.expectHeartbeat(5, 5)
	old.send(protocol.CmdGenerateMsgID, 6, 6, []byte(`{}`))
	old.expect(protocol.CmdGenerateMsgID, 6, 6, errcode.OK)

	// A certificate that is not PEM, then a key that does not match:
	// both keep serial 200.
	testca.WriteFile(t, f.certFile, []byte("not a certificate"))
	f.waitFor(t, func() bool { return f.s.metrics.CertReloadFailures.Load() >= 1 }, "failed reload")
	other := t.TempDir()
	f.ca.WriteServer(t, filepath.Join(other, "c.pem"), filepath.Join(other, "k.pem"), 300)
	b, err := os.ReadFile(filepath.Join(other, "c.pem"))
	if err != nil {
		t.Fatal(err)
	}
	testca.WriteFile(t, f.certFile, b)
	f.waitFor(t, func() bool { return f.s.metrics.CertReloadFailures.Load() >= 2 }, "mismatched reload")
	c3, tc3 := f.dialTLS(t, nil)
	if serialOf(tc3) != 200 {
		t.Fatalf("after bad files: serial %d, want 200", serialOf(tc3))
	}
	c3.auth(3, "dev-third")
	old.send(protocol.CmdHeartbeat, 7, 7, nil)
	old.expectHeartbeat(7, 7)
}

// Handshakes in progress are bounded; a stalled one is closed by the
// handshake deadline and frees its slot.
func TestTLSHandshakeBound(t *testing.T) {
	f := tlsGate(t, func(g *config.Gate) {
		g.TLSMaxHandshakes = 1
		g.TLSHandshakeTimeout = 300 * time.Millisecond
	})
	stalled, err := net.DialTimeout("tcp", f.s.TLSAddr(), safety)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	// A record header promising a ClientHello that never comes.
	if _, err := stalled.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00}); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, func() bool { return len(f.s.tls.slots) == 1 }, "stalled handshake")
	raw, err := net.DialTimeout("tcp", f.s.TLSAddr(), safety)
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(raw, &tls.Config{RootCAs: f.ca.Pool, ServerName: "127.0.0.1"})
	_ = tc.SetDeadline(time.Now().Add(safety))
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake beyond the bound succeeded")
	}
	_ = tc.Close()
	if f.s.metrics.TLSHandshakeRejects.Load() == 0 {
		t.Fatal("reject not counted")
	}
	c := &client{t: t, nc: stalled}
	c.expectClosed()
	f.waitFor(t, func() bool { return len(f.s.tls.slots) == 0 }, "slot freed")
	ok, _ := f.dialTLS(t, nil)
	ok.auth(9, "dev-after")
}

// Behind a balancer the PROXY header comes first, then the ClientHello;
// the session gets the header's address.
func TestTLSAfterProxyHeader(t *testing.T) {
	f := tlsGate(t, func(g *config.Gate) {
		g.ProxyProtocol = true
		g.ProxyTrustedCIDRs = []string{"127.0.0.0/8"}
	})
	raw, err := net.DialTimeout("tcp", f.s.TLSAddr(), safety)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	if _, err := raw.Write([]byte("PROXY TCP4 203.0.113.50 127.0.0.1 4000 8101\r\n")); err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(raw, &tls.Config{RootCAs: f.ca.Pool, ServerName: "127.0.0.1"})
	c := &client{t: t, nc: tc}
	c.auth(11, "dev-proxied-tls")
	if ip := f.fl.lastRequest(protocol.CmdAuth).RealIp; ip != "203.0.113.50" {
		t.Fatalf("real_ip %q", ip)
	}
}

func (f *tlsFixture) waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(safety)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TLS 1.1 and plaintext frames on the TLS listener are refused at the
// handshake; the gate keeps serving others.
func TestTLSRefusesOldVersionsAndPlaintext(t *testing.T) {
	f := tlsGate(t, nil)
	raw, err := net.DialTimeout("tcp", f.s.TLSAddr(), safety)
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(raw, &tls.Config{RootCAs: f.ca.Pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
	_ = tc.SetDeadline(time.Now().Add(safety))
	if err := tc.Handshake(); err == nil {
		t.Fatal("TLS 1.1 handshake succeeded")
	}
	_ = tc.Close()

	plain, err := net.DialTimeout("tcp", f.s.TLSAddr(), safety)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	c := &client{t: t, nc: plain}
	c.send(protocol.CmdHeartbeat, 1, 1, nil)
	c.expectClosed()
	// The gate counts a failure after its handshake returns, which is
	// after the alert or close the client has already seen.
	f.waitFor(t, func() bool { return f.s.metrics.TLSHandshakeFailures.Load() >= 2 }, "2 handshake failures counted")
	if n := f.s.metrics.Connections.Load(); n != 0 {
		t.Fatalf("%d sessions opened for failed handshakes", n)
	}
	ok, _ := f.dialTLS(t, nil)
	ok.auth(4, "dev-ok")
}
