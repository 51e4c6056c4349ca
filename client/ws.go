package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/sparkim/spark/pkg/frame"
)

// WSDialer opens the gate's WebSocket endpoint (ws://host/ws, wss:// inside
// TLS) and returns it as the byte stream Conn reads and writes, so Dial,
// New and Session work over WebSocket as over TCP: every Spark frame
// written is sent as its own binary message, and the gate's binary
// messages, each exactly one frame, are read back in order. Pings are
// answered and a close echoed under the same write lock as the frames.
type WSDialer struct {
	// Path is the endpoint's path; "" is "/ws".
	Path string
	// TLS, when set, dials wss:// with this configuration.
	TLS *tls.Config
	// Header is sent with the upgrade request (e.g. Origin, or a
	// forwarded-for header behind a test proxy).
	Header http.Header
	// NetDial replaces the TCP dialer (e.g. to bind a source address).
	NetDial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// DialWS opens the WebSocket at url ("ws://host:port/ws" or "wss://…",
// then with tlsConf) as the byte stream Conn uses; see WSDialer.
func DialWS(ctx context.Context, url string, tlsConf *tls.Config) (net.Conn, error) {
	return WSDialer{TLS: tlsConf}.DialURL(ctx, url)
}

// DialContext dials addr's WebSocket endpoint (d.Path, ws:// or, with
// d.TLS, wss://); it fits Options.Dial, whose network it ignores.
func (d WSDialer) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	u := url.URL{Scheme: "ws", Host: addr, Path: d.Path}
	if d.TLS != nil {
		u.Scheme = "wss"
	}
	if u.Path == "" {
		u.Path = "/ws"
	}
	return d.DialURL(ctx, u.String())
}

// DialURL opens the WebSocket at url, the handshake bounded by ctx.
func (d WSDialer) DialURL(ctx context.Context, url string) (net.Conn, error) {
	wd := ws.Dialer{TLSConfig: d.TLS, NetDial: d.NetDial}
	if d.Header != nil {
		wd.Header = ws.HandshakeHeaderHTTP(d.Header)
	}
	nc, br, _, err := wd.Dial(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("client: websocket %s: %w", url, err)
	}
	var rd io.Reader = nc
	if br != nil {
		// Bytes the gate wrote right after its answer were read along
		// with it; they come first.
		rd = io.MultiReader(br, nc)
	}
	return &wsConn{Conn: nc, rd: rd}, nil
}

// errNotWholeFrames refuses a write that is not whole Spark frames: over
// WebSocket each frame must be its own message.
var errNotWholeFrames = errors.New("client: websocket write is not whole frames")

// wsConn is a WebSocket as a byte stream of Spark frames.
type wsConn struct {
	net.Conn
	rd  io.Reader
	wmu sync.Mutex
	// buf is the rest of the message Read is handing out; one reader.
	buf []byte
}

// Write sends each whole frame of p as one binary message.
func (c *wsConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	written := 0
	for written < len(p) {
		b := p[written:]
		_, _, n, err := frame.Decode(b, len(b))
		if err != nil {
			return written, fmt.Errorf("%w (%d bytes left): %w", errNotWholeFrames, len(b), err)
		}
		if n == 0 {
			return written, fmt.Errorf("%w (%d bytes left, an incomplete frame)", errNotWholeFrames, len(b))
		}
		if err := wsutil.WriteClientBinary(c.Conn, b[:n]); err != nil {
			return written, err
		}
		written += n
	}
	return written, nil
}

// Read returns the bytes of the gate's binary messages in order.
func (c *wsConn) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		msg, op, err := wsutil.ReadServerData(struct {
			io.Reader
			io.Writer
		}{c.rd, lockedWriter{c}})
		if err != nil {
			return 0, err
		}
		if op != ws.OpBinary {
			return 0, fmt.Errorf("client: websocket message with opcode %v", op)
		}
		if _, _, n, err := frame.Decode(msg, len(msg)); err != nil || n != len(msg) {
			return 0, fmt.Errorf("client: websocket message of %d bytes is not one frame (%d bytes, %v)", len(msg), n, err)
		}
		c.buf = msg
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// lockedWriter lets Read answer pings and echo a close between whole
// frames of Write.
type lockedWriter struct{ c *wsConn }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.c.wmu.Lock()
	defer w.c.wmu.Unlock()
	return w.c.Conn.Write(p)
}

// NetConn returns the connection under the WebSocket (a *tls.Conn for
// wss://), e.g. to read its TLS state.
func (c *wsConn) NetConn() net.Conn { return c.Conn }
