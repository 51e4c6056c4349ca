package e2e

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/tests/framework"
)

// Gates terminate TLS themselves: a client AUTHs over TLS on each of two
// gates and they exchange a message both ways; plain TCP on the same gate
// still works for deployments that terminate TLS in front; a wss client
// exchanges messages with a TLS one.
func TestGateTLS(t *testing.T) {
	t.Parallel()
	ca := framework.NewTestCA(t)
	certs := ca.IssueServer(t, t.TempDir(), 10)
	c := framework.NewCluster(t, framework.Options{Gates: 2, GateTLS: &certs})

	loginTLS := func(gate int, uid int64, device string) *client.Conn {
		t.Helper()
		ctx := ctxT(t, 10*time.Second)
		var state tls.ConnectionState
		conn, err := client.Dial(ctx, c.Gates[gate].TLSAddr, client.Options{
			Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
				d := &tls.Dialer{Config: ca.ClientConfig()}
				nc, err := d.DialContext(ctx, network, addr)
				if err == nil {
					state = nc.(*tls.Conn).ConnectionState()
				}
				return nc, err
			},
		})
		if err != nil {
			t.Fatalf("tls dial %s: %v", c.Gates[gate].ID, err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		if state.Version < tls.VersionTLS12 || state.PeerCertificates[0].SerialNumber.Int64() != 10 {
			t.Fatalf("tls state: version %x, serial %v", state.Version, state.PeerCertificates[0].SerialNumber)
		}
		if _, err := conn.Auth(ctx, c.Token(uid, device), device, "test", "1.0.0"); err != nil {
			t.Fatalf("auth over tls: %v", err)
		}
		return conn
	}

	alice := loginTLS(0, 8101, "tls-alice")
	bob := loginTLS(1, 8102, "tls-bob")
	ctx := ctxT(t, 10*time.Second)
	ack, err := alice.Send(ctx, sendTo(8102, "tls-1", text(t, "over tls")))
	if err != nil {
		t.Fatal(err)
	}
	m, err := nextMessage(bob, 10*time.Second)
	if err != nil || m.MsgID != ack.MsgID {
		t.Fatalf("bob got %+v, %v; want msg %v", m, err, ack.MsgID)
	}
	back, err := bob.Send(ctx, sendTo(8101, "tls-2", text(t, "back over tls")))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := nextMessage(alice, 10*time.Second); err != nil || m.MsgID != back.MsgID {
		t.Fatalf("alice got %+v, %v; want msg %v", m, err, back.MsgID)
	}

	plain := c.Login(t, 0, 8103, "plain-carol")
	if _, err := plain.Heartbeat(ctx); err != nil {
		t.Fatalf("plain tcp beside tls: %v", err)
	}

	// WebSocket inside TLS, as browsers on https pages must use it.
	dave, err := client.Dial(ctx, c.Gates[1].WSSAddr, client.Options{
		Dial: client.WSDialer{TLS: ca.ClientConfig()}.DialContext,
	})
	if err != nil {
		t.Fatalf("wss dial: %v", err)
	}
	t.Cleanup(func() { _ = dave.Close() })
	if _, err := dave.Auth(ctx, c.Token(8104, "wss-dave"), "wss-dave", "web", "1.0.0"); err != nil {
		t.Fatalf("auth over wss: %v", err)
	}
	ack, err = alice.Send(ctx, sendTo(8104, "tls-3", text(t, "to wss")))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := nextMessage(dave, 10*time.Second); err != nil || m.MsgID != ack.MsgID {
		t.Fatalf("dave got %+v, %v; want msg %v", m, err, ack.MsgID)
	}
	back, err = dave.Send(ctx, sendTo(8101, "wss-1", text(t, "back over wss")))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := nextMessage(alice, 10*time.Second); err != nil || m.MsgID != back.MsgID {
		t.Fatalf("alice got %+v, %v; want msg %v", m, err, back.MsgID)
	}
}
