package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/frame"
)

// socket is one accepted netpoll connection and the stages under its
// carrier: the PROXY header when its listener expects one, then TLS on
// the tls and wss listeners. Both carriers embed it; above it they see
// plaintext bytes (read) and write plaintext bytes (write), and whether
// TLS is under them is asked here alone.
type socket struct {
	l  *listener
	nc netpoll.Connection
	// sec is the TLS stage, nil on the tcp and ws listeners.
	sec *tlsLayer
	// realIP is the client's address once known (socket peer, PROXY
	// header or a trusted proxy's HTTP header); the event loop alone
	// touches it.
	realIP string

	// proxyBuf holds a PROXY header that has not fully arrived; awaiting
	// is set until the header is complete, for the header deadline's
	// timer.
	proxyBuf   []byte
	awaiting   atomic.Bool
	proxyTimer stageTimer

	// refused is the session layer's refusal of a connection over one of
	// the gate's caps; refuseTimer closes it if it sends nothing
	// (limits.go). Event loop only.
	refused     *refusal
	refuseTimer *time.Timer

	// c is the session; it is set in the event loop (onPrepare or
	// onRequest) and read by the close callback, hence mu.
	mu     sync.Mutex
	c      *Conn
	closed bool
}

func (sk *socket) sock() *socket { return sk }

// Close implements Transport.
func (sk *socket) Close() error { return sk.nc.Close() }

// Kind implements Transport: the listener's carrier.
func (sk *socket) Kind() string { return string(sk.l.kind) }

// open starts the session of tr, the carrier over this socket, with the
// client's real address, unless the socket closed meanwhile or the
// session layer refuses it (then sk.refused says why); a nil result means
// there is no session.
func (sk *socket) open(tr Transport) *Conn {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	if sk.closed {
		return nil
	}
	sk.c, sk.refused = sk.l.sessions.openSession(tr, sk.realIP)
	return sk.c
}

// beginAtAccept opens the session of a plain TCP connection from
// onPrepare. netpoll cannot write there: a refusal goes out with the first
// bytes, or the connection closes after refuseGrace.
func (sk *socket) beginAtAccept(tr Transport) {
	if sk.open(tr) == nil && sk.refused != nil {
		nc := sk.nc
		sk.refuseTimer = time.AfterFunc(refuseGrace, func() { _ = nc.Close() })
	}
}

// refuse writes the refusal of a connection that got no session through
// its carrier and closes it.
func (sk *socket) refuse(tr Transport) {
	if sk.refuseTimer != nil {
		sk.refuseTimer.Stop()
	}
	log := sk.l.log
	if err := tr.WriteFrames(sk.refused.frame); err != nil {
		log.Debug("refusal frame not written", zap.String("real_ip", sk.realIP), zap.Error(err))
	}
	log.Debug("connection refused, closing", zap.String("real_ip", sk.realIP), zap.String("reason", sk.refused.reason))
	_ = sk.nc.Close()
}

// runStages advances the stages under the carrier with the bytes in r:
// the PROXY header, then the TLS handshake. It reports true once both are
// done and bytes for the carrier may follow; false while a stage waits
// for more bytes or after it failed (then the socket is closing).
func (sk *socket) runStages(r netpoll.Reader) bool {
	if sk.awaiting.Load() {
		realIP, err := sk.readProxyHeader(r)
		if err != nil {
			_ = r.Skip(r.Len())
			sk.proxyReject("bad header", err)
			return false
		}
		if realIP == "" {
			return false
		}
		sk.awaiting.Store(false)
		sk.proxyTimer.stop()
		sk.realIP = realIP
	}
	if sk.sec != nil && !sk.sec.done.Load() {
		if r.Len() == 0 {
			// Exactly the PROXY header so far.
			return false
		}
		if err := sk.handshake(); err != nil {
			sk.l.log.Debug("tls handshake failed, closing", zap.String("real_ip", sk.realIP), zap.Error(err))
			_ = r.Skip(r.Len())
			_ = sk.nc.Close()
			return false
		}
	}
	return true
}

// read hands the plaintext of what netpoll has buffered to t: r itself on
// a plain socket, decrypted records under TLS.
func (sk *socket) read(ctx context.Context, r netpoll.Reader, t carrierConn) error {
	if sk.sec != nil {
		return sk.readTLS(ctx, t)
	}
	if r.Len() == 0 {
		return nil
	}
	return t.carry(ctx, r)
}

// write writes plaintext bytes to the client, through TLS when the socket
// has it. netpoll's Write blocks until the bytes are handed to the kernel
// or the connection's write timeout expires.
func (sk *socket) write(b []byte) error {
	if sk.sec != nil {
		if _, err := sk.sec.tc.Write(b); err != nil {
			return fmt.Errorf("tls: write: %w", err)
		}
		return nil
	}
	if _, err := sk.nc.Write(b); err != nil {
		return fmt.Errorf("tcp: write: %w", err)
	}
	return nil
}

// stopStages stops the deadlines of the PROXY and TLS stages.
func (sk *socket) stopStages() {
	sk.proxyTimer.stop()
	if sk.sec != nil {
		sk.sec.timer.stop()
	}
}

// end runs in netpoll's close callback: it ends the session once.
func (sk *socket) end() {
	sk.mu.Lock()
	sk.closed = true
	c := sk.c
	sk.mu.Unlock()
	sk.stopStages()
	if sk.refuseTimer != nil {
		sk.refuseTimer.Stop()
	}
	if c != nil {
		sk.l.sessions.closeSession(c)
	}
}

// frameLimit implements frameSink for both carriers: the session layer
// decides it.
func (sk *socket) frameLimit() int { return sk.l.sessions.frameLimit(sk.c) }

// onFrame implements frameSink for both carriers.
func (sk *socket) onFrame(ctx context.Context, h frame.Header, body []byte, aliased bool) bool {
	return sk.l.sessions.handleFrame(ctx, sk.c, h, body, aliased)
}
