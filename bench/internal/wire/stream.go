package wire

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"golang.org/x/sys/unix"

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
	nc, err := d.DialContext(ctx, "tcp4", remote.String())
	if err != nil {
		return nil, fmt.Errorf("wire: connect %s: %w", remote, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = nc.Close()
		}
	}()
	if carrier.TLS != nil {
		tc := tls.Client(nc, carrier.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("wire: TLS handshake with %s: %w", remote, err)
		}
		nc = tc
	}
	var rd io.Reader = nc
	if carrier.WSPath != "" {
		scheme := "ws"
		if carrier.TLS != nil {
			scheme = "wss"
		}
		u := &url.URL{Scheme: scheme, Host: remote.String(), Path: carrier.WSPath}
		if dl, has := ctx.Deadline(); has {
			_ = nc.SetDeadline(dl)
		}
		br, _, err := ws.Dialer{}.Upgrade(nc, u)
		if err != nil {
			return nil, fmt.Errorf("wire: WebSocket upgrade %s: %w", u, err)
		}
		_ = nc.SetDeadline(noDeadline)
		if br != nil {
			// Bytes the gate wrote right after its answer were read along
			// with it; they come first.
			rd = io.MultiReader(br, nc)
		}
	}
	c := &Conn{fd: -1, h: h, nc: nc, ws: carrier.WSPath != "", e: e}
	e.mu.Lock()
	if e.streams == nil {
		e.streams = map[*Conn]struct{}{}
	}
	e.streams[c] = struct{}{}
	e.mu.Unlock()
	ok = true
	go c.readStream(rd)
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
// connection; the caller holds wmu. Over WebSocket each frame is its own
// binary message, as the gate requires.
func (c *Conn) writeStream(b []byte) error {
	if !c.ws {
		if _, err := c.nc.Write(b); err != nil {
			return fmt.Errorf("wire: write: %w", err)
		}
		return nil
	}
	for len(b) > 0 {
		_, _, n, err := frame.Decode(b, 0)
		if err != nil || n == 0 {
			return fmt.Errorf("wire: write: not whole frames (%d bytes left): %w", len(b), errors.Join(err, errPartialFrame))
		}
		if err := wsutil.WriteClientBinary(c.nc, b[:n]); err != nil {
			return fmt.Errorf("wire: write: %w", err)
		}
		b = b[n:]
	}
	return nil
}

var errPartialFrame = errors.New("partial frame")

// lockedWriter lets the WebSocket reader answer pings and echo a close
// under the connection's write lock, between whole frames of Write.
type lockedWriter struct{ c *Conn }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.c.wmu.Lock()
	defer w.c.wmu.Unlock()
	if w.c.closed {
		return 0, ErrClosed
	}
	return w.c.nc.Write(p)
}

// readStream is the goroutine of a TLS or WebSocket connection: it decodes
// frames as readOnce does and ends the connection on the first error.
func (c *Conn) readStream(rd io.Reader) {
	if c.ws {
		rw := struct {
			io.Reader
			io.Writer
		}{rd, lockedWriter{c}}
		for {
			msg, op, err := wsutil.ReadServerData(rw)
			if err != nil {
				c.closeWith(fmt.Errorf("wire: read: %w", err), true)
				return
			}
			if op != ws.OpBinary {
				c.closeWith(fmt.Errorf("wire: WebSocket message with opcode %v", op), true)
				return
			}
			h, body, n, err := frame.Decode(msg, 0)
			if err == nil && n != len(msg) {
				err = fmt.Errorf("message of %d bytes is not one frame", len(msg))
			}
			if err != nil {
				c.closeWith(fmt.Errorf("wire: %w", err), true)
				return
			}
			c.h.OnFrame(c, h, body)
		}
	}
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

// noDeadline clears a deadline set for a handshake.
var noDeadline time.Time
