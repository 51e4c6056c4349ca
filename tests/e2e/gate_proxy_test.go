package e2e

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sparkim/spark/tests/framework"
)

// logicSawAuth waits for logic's "authenticated" line of device and
// returns the real_ip it logged.
func logicSawAuth(t *testing.T, c *framework.Cluster, device string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(c.Logics[0].Logs(), "\n") {
			if !strings.Contains(line, `"authenticated"`) || !strings.Contains(line, `"device_id":"`+device+`"`) {
				continue
			}
			var entry struct {
				RealIP string `json:"real_ip"`
			}
			if err := json.Unmarshal([]byte(line[strings.Index(line, "{"):]), &entry); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			return entry.RealIP
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("logic never logged the AUTH of %s", device)
	return ""
}

// A gate behind an L4 balancer: a PROXY header from a trusted peer
// (127.0.0.1) claiming 203.0.113.7 makes that the real_ip logic sees; the
// same header from an untrusted peer (127.0.0.9) is refused with a close.
func TestGateProxyProtocol(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 1, GateEnv: []string{
		"IM_GATE_PROXY_PROTOCOL=true",
		"IM_GATE_PROXY_TRUSTED_CIDRS=127.0.0.1/32",
		"IM_GATE_PROXY_HEADER_TIMEOUT=1s",
	}})
	addr := c.Gates[0].TCPAddr
	dialFrom := func(t *testing.T, local string) net.Conn {
		t.Helper()
		d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
		nc, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nc.Close() })
		return nc
	}

	t.Run("v1 from a trusted balancer", func(t *testing.T) {
		nc := dialFrom(t, "127.0.0.1")
		if _, err := nc.Write([]byte("PROXY TCP4 203.0.113.7 127.0.0.1 40001 8100\r\n")); err != nil {
			t.Fatal(err)
		}
		newRawConn(nc).auth(t, c, 9201, "proxied-v1")
		if ip := logicSawAuth(t, c, "proxied-v1"); ip != "203.0.113.7" {
			t.Fatalf("logic saw real_ip %q, want 203.0.113.7", ip)
		}
	})

	t.Run("v2 from a trusted balancer", func(t *testing.T) {
		nc := dialFrom(t, "127.0.0.1")
		hdr := []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x21\x00\x24")
		hdr = append(hdr, net.ParseIP("2001:db8::7").To16()...)
		hdr = append(hdr, net.ParseIP("2001:db8::1").To16()...)
		hdr = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(hdr, 40002), 8100)
		if _, err := nc.Write(hdr); err != nil {
			t.Fatal(err)
		}
		newRawConn(nc).auth(t, c, 9202, "proxied-v2")
		if ip := logicSawAuth(t, c, "proxied-v2"); ip != "2001:db8::7" {
			t.Fatalf("logic saw real_ip %q, want 2001:db8::7", ip)
		}
	})

	t.Run("untrusted peer is closed", func(t *testing.T) {
		nc := dialFrom(t, "127.0.0.9")
		_, _ = nc.Write([]byte("PROXY TCP4 203.0.113.66 127.0.0.1 40003 8100\r\n"))
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := nc.Read(make([]byte, 64))
		var ne net.Error
		if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
			t.Fatalf("connection from an untrusted peer still open: %v", err)
		}
	})

	t.Run("no header within the deadline is closed", func(t *testing.T) {
		nc := dialFrom(t, "127.0.0.1")
		start := time.Now()
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := nc.Read(make([]byte, 64))
		var ne net.Error
		if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
			t.Fatalf("connection without a header still open: %v", err)
		}
		if took := time.Since(start); took < 900*time.Millisecond {
			t.Fatalf("closed after %v, before the 1 s deadline", took)
		}
	})
}
