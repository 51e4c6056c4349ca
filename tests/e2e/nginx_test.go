package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/tests/framework"
)

// Names the test's Nginx routes by SNI.
const (
	nginxIMName = "im.example.com"
	nginxWSName = "ws.example.com"
)

// nginxFront is a cluster of TLS gates behind a real Nginx running the
// shipped deploy/nginx template.
type nginxFront struct {
	c    *framework.Cluster
	ngx  *framework.Nginx
	ca   *framework.TestCA
	addr string // Nginx's public listener
}

// startNginxFront starts two gates with TLS listeners whose certificate
// names the IM name, taking PROXY headers from 127.0.0.1 (where Nginx
// connects from), and Nginx in front of them with
// deploy/nginx/nginx.conf.template rendered for this test's ports and
// paths.
func startNginxFront(t *testing.T) *nginxFront {
	t.Helper()
	ngx := framework.NewNginx(t)
	ca := framework.NewTestCA(t)
	gateCert := ca.IssueServer(t, t.TempDir(), 41, nginxIMName)
	wsCert := ca.IssueServer(t, t.TempDir(), 42, nginxWSName)
	c := framework.NewCluster(t, framework.Options{Gates: 2, GateTLS: &gateCert, GateEnv: []string{
		"IM_LOG_LEVEL=debug",
		"IM_GATE_PROXY_PROTOCOL=true",
		"IM_GATE_PROXY_TRUSTED_CIDRS=127.0.0.1/32",
		// Nginx's http block proxies WebSocket without a PROXY header
		// and appends the client to X-Forwarded-For.
		"IM_GATE_PROXY_PROTOCOL_LISTENERS=tls",
		"IM_GATE_WS_REAL_IP_HEADER=X-Forwarded-For",
	}})

	addr := "127.0.0.1:" + strconv.Itoa(framework.FreePort(t))
	var gatesTLS, gatesWS []string
	for _, g := range c.Gates {
		gatesTLS = append(gatesTLS, "server "+g.TLSAddr+";")
		gatesWS = append(gatesWS, "server "+g.WSAddr+";")
	}
	conf, err := framework.RenderTemplate("../../deploy/nginx/nginx.conf.template", map[string]string{
		"SPARK_NGINX_USER":         ngx.User,
		"SPARK_NGINX_MODULES_CONF": ngx.ModulesConf,
		"SPARK_NGINX_LOG_DIR":      ngx.LogDir,
		"SPARK_NGINX_TEMP_DIR":     ngx.TempDir,
		"SPARK_LISTEN":             addr,
		"SPARK_IM_SERVER_NAME":     nginxIMName,
		"SPARK_WS_SERVER_NAME":     nginxWSName,
		"SPARK_WS_CERT":            wsCert.CertFile,
		"SPARK_WS_KEY":             wsCert.KeyFile,
		"SPARK_WS_INTERNAL":        "unix:" + ngx.Dir + "/ws.sock",
		"SPARK_GATES_TLS":          strings.Join(gatesTLS, "\n        "),
		"SPARK_GATES_WS":           strings.Join(gatesWS, "\n        "),
	})
	if err != nil {
		t.Fatal(err)
	}
	ngx.Start(conf, addr)
	return &nginxFront{c: c, ngx: ngx, ca: ca, addr: addr}
}

// dialWSS opens wss://SPARK_WS_SERVER_NAME/ws through Nginx from the
// loopback address local, sending header, and returns the WebSocket as a
// byte stream for the client library and Nginx's certificate serial.
func (f *nginxFront) dialWSS(ctx context.Context, local string, header http.Header) (net.Conn, int64, error) {
	d := client.WSDialer{
		NetDial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			nd := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
			return nd.DialContext(ctx, network, f.addr)
		},
		TLS:    &tls.Config{RootCAs: f.ca.Pool, ServerName: nginxWSName, MinVersion: tls.VersionTLS12},
		Header: header,
	}
	_, port, _ := net.SplitHostPort(f.addr)
	s, err := d.DialURL(ctx, "wss://"+nginxWSName+":"+port+"/ws")
	if err != nil {
		return nil, 0, err
	}
	under := s.(interface{ NetConn() net.Conn }).NetConn()
	tc, ok := under.(*tls.Conn)
	if !ok {
		_ = s.Close()
		return nil, 0, fmt.Errorf("wss dial returned a %T", under)
	}
	return s, tc.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

// dialTLS connects to Nginx from the loopback address local and runs a
// TLS handshake with cfg.
func (f *nginxFront) dialTLS(ctx context.Context, local string, cfg *tls.Config) (*tls.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	nc, err := d.DialContext(ctx, "tcp", f.addr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = nc.Close()
		return nil, err
	}
	return tc, nil
}

// loginIM connects through Nginx with SNI = the IM name from local,
// checks that the certificate is the gates' own (Nginx passed TLS
// through), and AUTHs.
func (f *nginxFront) loginIM(t *testing.T, local string, uid int64, device string) *client.Conn {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	cfg := &tls.Config{RootCAs: f.ca.Pool, ServerName: nginxIMName, MinVersion: tls.VersionTLS12}
	var serial int64
	conn, err := client.Dial(ctx, f.addr, client.Options{
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			tc, err := f.dialTLS(ctx, local, cfg)
			if err == nil {
				serial = tc.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
			}
			return tc, err
		},
	})
	if err != nil {
		t.Fatalf("tls through nginx with SNI %s from %s: %v", nginxIMName, local, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if serial != 41 {
		t.Fatalf("certificate serial %d, want the gates' 41: TLS was not passed through", serial)
	}
	if _, err := conn.Auth(ctx, f.c.Token(uid, device), device, "test", "1.0.0"); err != nil {
		t.Fatalf("auth through nginx: %v", err)
	}
	return conn
}

// gateLogsMention reports whether any gate's log has a line with s.
func (f *nginxFront) gateLogsMention(s string) bool {
	for _, g := range f.c.Gates {
		if strings.Contains(g.Logs(), s) {
			return true
		}
	}
	return false
}

// waitGateLog waits for a gate log line holding every one of parts.
func (f *nginxFront) waitGateLog(t *testing.T, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, g := range f.c.Gates {
			for _, line := range strings.Split(g.Logs(), "\n") {
				if containsAll(line, parts) {
					return
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no gate logged a line with %q", parts)
}

// waitNginxLog waits for a line of Nginx's log file name holding every
// one of parts and returns it.
func (f *nginxFront) waitNginxLog(t *testing.T, name string, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(f.ngx.Log(name), "\n") {
			if containsAll(line, parts) {
				return line
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nginx %s has no line with %q:\n%s", name, parts, f.ngx.Log(name))
	return ""
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// must-show 2: through a real Nginx running deploy/nginx's template, TLS
// clients naming the IM name reach a gate with TLS passed through, and
// the gate and logic see each client's own source address (127.0.0.9,
// 127.0.0.11: Nginx connects from 127.0.0.1) from the PROXY header Nginx
// sends; an H5 client opening wss:// on the WebSocket name reaches a gate
// through Nginx's http block (TLS ended in Nginx) and is known by its own
// address too, whatever X-Forwarded-For it sends; a ClientHello naming
// another server, or none, is closed by Nginx without reaching any gate.
func TestNginxFront(t *testing.T) {
	t.Parallel()
	f := startNginxFront(t)

	t.Run("IM name reaches a gate with the client's address", func(t *testing.T) {
		alice := f.loginIM(t, "127.0.0.9", 8301, "ngx-alice")
		bob := f.loginIM(t, "127.0.0.11", 8302, "ngx-bob")
		if ip := logicSawAuth(t, f.c, "ngx-alice"); ip != "127.0.0.9" {
			t.Fatalf("logic saw real_ip %q for alice, want 127.0.0.9", ip)
		}
		if ip := logicSawAuth(t, f.c, "ngx-bob"); ip != "127.0.0.11" {
			t.Fatalf("logic saw real_ip %q for bob, want 127.0.0.11", ip)
		}
		f.waitGateLog(t, `"msg":"authenticated"`, `"device_id":"ngx-alice"`, `"real_ip":"127.0.0.9"`)
		f.waitGateLog(t, `"msg":"authenticated"`, `"device_id":"ngx-bob"`, `"real_ip":"127.0.0.11"`)

		ctx := ctxT(t, 10*time.Second)
		ack, err := alice.Send(ctx, sendTo(8302, "ngx-1", text(t, "through nginx")))
		if err != nil {
			t.Fatal(err)
		}
		if m, err := nextMessage(bob, 10*time.Second); err != nil || m.MsgID != ack.MsgID {
			t.Fatalf("bob got %+v, %v; want msg %v", m, err, ack.MsgID)
		}
		back, err := bob.Send(ctx, sendTo(8301, "ngx-2", text(t, "back through nginx")))
		if err != nil {
			t.Fatal(err)
		}
		if m, err := nextMessage(alice, 10*time.Second); err != nil || m.MsgID != back.MsgID {
			t.Fatalf("alice got %+v, %v; want msg %v", m, err, back.MsgID)
		}

		// Nginx logs a stream session when it ends: alice's went to a
		// gate's TLS listener.
		_ = alice.Close()
		line := f.waitNginxLog(t, "spark-stream.log", "127.0.0.9 ", `sni="`+nginxIMName+`"`, "status=200")
		if !strings.Contains(line, "up="+f.c.Gates[0].TLSAddr) && !strings.Contains(line, "up="+f.c.Gates[1].TLSAddr) {
			t.Fatalf("nginx sent alice to no gate TLS listener: %s", line)
		}
	})

	t.Run("H5 wss through the http block reaches a gate with the client's address", func(t *testing.T) {
		ctx := ctxT(t, 20*time.Second)
		// A client claiming another address: Nginx replaces X-Real-IP
		// and appends the real one to X-Forwarded-For, whose last entry
		// the gate takes.
		forged := http.Header{"X-Forwarded-For": {"203.0.113.66"}, "X-Real-Ip": {"203.0.113.66"}}
		var serial int64
		carol, err := client.Dial(ctx, f.addr, client.Options{
			Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
				nc, s, err := f.dialWSS(ctx, "127.0.0.9", forged)
				serial = s
				return nc, err
			},
		})
		if err != nil {
			t.Fatalf("wss through nginx: %v", err)
		}
		t.Cleanup(func() { _ = carol.Close() })
		if serial != 42 {
			t.Fatalf("certificate serial %d, want Nginx's 42 for %s", serial, nginxWSName)
		}
		if _, err := carol.Auth(ctx, f.c.Token(8303, "ngx-h5-carol"), "ngx-h5-carol", "web", "1.0.0"); err != nil {
			t.Fatalf("auth over wss through nginx: %v", err)
		}
		if ip := logicSawAuth(t, f.c, "ngx-h5-carol"); ip != "127.0.0.9" {
			t.Fatalf("logic saw real_ip %q for the H5 client, want 127.0.0.9", ip)
		}
		f.waitGateLog(t, `"msg":"authenticated"`, `"device_id":"ngx-h5-carol"`, `"real_ip":"127.0.0.9"`)

		dave := f.loginIM(t, "127.0.0.11", 8304, "ngx-dave")
		ack, err := carol.Send(ctx, sendTo(8304, "ngx-h5-1", text(t, "from the browser")))
		if err != nil {
			t.Fatal(err)
		}
		if m, err := nextMessage(dave, 10*time.Second); err != nil || m.MsgID != ack.MsgID {
			t.Fatalf("dave got %+v, %v; want msg %v", m, err, ack.MsgID)
		}
		back, err := dave.Send(ctx, sendTo(8303, "ngx-h5-2", text(t, "to the browser")))
		if err != nil {
			t.Fatal(err)
		}
		if m, err := nextMessage(carol, 10*time.Second); err != nil || m.MsgID != back.MsgID {
			t.Fatalf("carol got %+v, %v; want msg %v", m, err, back.MsgID)
		}

		// Nginx logs the upgrade once the WebSocket ends, with the
		// address it learnt from the stream's PROXY header.
		_ = carol.Close()
		f.waitNginxLog(t, "spark-ws.log", "127.0.0.9 ", `"GET /ws HTTP/1.1" 101`)
		f.waitNginxLog(t, "spark-stream.log", "127.0.0.9 ", `sni="`+nginxWSName+`"`, "status=200", "up=unix:")
	})

	// Each client would complete its handshake with a gate (it verifies
	// nothing), so only Nginx's refusal makes it fail.
	refused := []struct {
		name, local, sni string
	}{
		{"unknown SNI is closed by Nginx", "127.0.0.10", "unknown.example.com"},
		{"no SNI is closed by Nginx", "127.0.0.12", ""},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			tconn, err := f.dialTLS(ctx, tc.local, &tls.Config{ServerName: tc.sni, InsecureSkipVerify: true})
			if err == nil {
				_ = tconn.Close()
				t.Fatalf("handshake with SNI %q from %s succeeded; want the connection closed", tc.sni, tc.local)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("SNI %q: Nginx held the connection instead of closing it: %v", tc.sni, err)
			}
			f.waitNginxLog(t, "spark-stream.log", tc.local+" ", `sni="`+tc.sni+`"`, "status=502", "up=spark_refused")
			if f.gateLogsMention(`"` + tc.local + `"`) {
				t.Fatalf("a gate logged a connection from %s", tc.local)
			}
		})
	}
}
