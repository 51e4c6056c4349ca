package wire

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/frame"
)

// Carrier is how a connection carries Spark frames to a gate. The zero
// value is plain TCP on the epoll loops; TLS, WebSocket or both use a
// goroutine per connection instead (crypto/tls and the WebSocket framing
// want a blocking net.Conn), which costs the load generator memory but
// changes nothing on the gate's side, whose memory is what is measured.
type Carrier struct {
	// TLS, when set, runs a TLS client handshake with this configuration
	// right after the TCP connect.
	TLS *tls.Config
	// WSPath, when set, upgrades the connection to WebSocket on this path
	// (e.g. "/ws"); every Spark frame is then one binary message.
	WSPath string
}

// Plain reports whether the carrier is plain TCP.
func (c Carrier) Plain() bool { return c.TLS == nil && c.WSPath == "" }

// String names the carrier as the report does: tcp, tls, ws or wss.
func (c Carrier) String() string {
	switch {
	case c.TLS != nil && c.WSPath != "":
		return "wss"
	case c.TLS != nil:
		return "tls"
	case c.WSPath != "":
		return "ws"
	}
	return "tcp"
}

// DialCarrier connects to remote from local over carrier and returns a
// connection whose frames reach h exactly as a plain one's do (OnFrame,
// then OnClose once). The handshakes (TLS, WebSocket upgrade) are done
// before it returns, bounded by ctx.
func (e *Engine) DialCarrier(ctx context.Context, local netip.Addr, remote netip.AddrPort, carrier Carrier, h Handler) (*Conn, error) {
	if carrier.Plain() {
		return e.Dial(ctx, local, remote, h)
	}
	d := net.Dialer{Control: bindNoPort}
	if local.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: local.AsSlice()}
	}
	var nc net.Conn
	if carrier.WSPath != "" {
		// The client library's WebSocket carrier: TLS inside when set,
		// one frame per binary message, pings answered.
		wd := client.WSDialer{Path: carrier.WSPath, TLS: carrier.TLS, NetDial: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp4", addr)
		}}
		wc, err := wd.DialContext(ctx, "tcp4", remote.String())
		if err != nil {
			return nil, fmt.Errorf("wire: %w", err)
		}
		nc = wc
	} else {
		tc, err := d.DialContext(ctx, "tcp4", remote.String())
		if err != nil {
			return nil, fmt.Errorf("wire: connect %s: %w", remote, err)
		}
		tlc := tls.Client(tc, carrier.TLS)
		if err := tlc.HandshakeContext(ctx); err != nil {
			_ = tc.Close()
			return nil, fmt.Errorf("wire: TLS handshake with %s: %w", remote, err)
		}
		nc = tlc
	}
	c := &Conn{fd: -1, h: h, nc: nc, e: e}
	e.mu.Lock()
	if e.streams == nil {
		e.streams = map[*Conn]struct{}{}
	}
	e.streams[c] = struct{}{}
	e.mu.Unlock()
	go c.readStream(nc)
	return c, nil
}

// bindNoPort sets IP_BIND_ADDRESS_NO_PORT before the dialer binds the
// source address, as Dial does: without it bind() reserves a port per
// source address for every destination and runs out at ~28k sockets.
func bindNoPort(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

// writeStream writes b (one or more whole frames) to a goroutine
// connection; the caller holds wmu. Over WebSocket the carrier sends each
// frame as its own binary message, as the gate requires.
func (c *Conn) writeStream(b []byte) error {
	if _, err := c.nc.Write(b); err != nil {
		return fmt.Errorf("wire: write: %w", err)
	}
	return nil
}

// readStream is the goroutine of a TLS or WebSocket connection: it decodes
// frames as readOnce does and ends the connection on the first error.
// A WebSocket's messages arrive as the bytes of their frames.
func (c *Conn) readStream(rd io.Reader) {
	br := bufio.NewReaderSize(rd, 4096)
	var hdr [frame.HeaderSize]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			c.closeWith(fmt.Errorf("wire: read: %w", err), true)
			return
		}
		h, err := frame.ParseHeader(hdr[:], 0)
		if err != nil {
			c.closeWith(fmt.Errorf("wire: %w", err), true)
			return
		}
		body := make([]byte, h.BodyLength)
		if _, err := io.ReadFull(br, body); err != nil {
			c.closeWith(fmt.Errorf("wire: read: %w", err), true)
			return
		}
		c.h.OnFrame(c, h, body)
	}
}
