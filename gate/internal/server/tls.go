package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"
)

// TLS on netpoll (docs/decisions.md 60):
// crypto/tls runs over npConn, a thin net.Conn over the netpoll connection.
// The handshake runs in the connection's first OnRequest with npConn in
// blocking mode (a tls.Conn's handshake error is sticky, so it cannot be
// resumed when bytes run out), bounded by gate.tls_max_handshakes and a
// deadline from accept. Afterwards npConn is non-blocking: its Read hands
// over only what netpoll has already buffered, else errWouldBlock, which
// crypto/tls treats as temporary and retryable, keeping a partial record
// in its own buffer. So OnRequest reads plaintext until it would block,
// hands it to the carrier above (the byte stream or WebSocket, exactly as
// on a plain socket), and returns with
// netpoll's buffer empty; the next bytes re-trigger it. The split-record
// test guards this reliance on crypto/tls against a Go upgrade.

const (
	// tlsPlainBuf is one TLS record's largest plaintext.
	tlsPlainBuf = 16 << 10
)

// errWouldBlock is npConn's answer when netpoll has no buffered bytes after
// the handshake. It is a net.Error that is both Timeout and Temporary, the
// kind crypto/tls does not make sticky.
var errWouldBlock = wouldBlockError{}

type wouldBlockError struct{}

func (wouldBlockError) Error() string   { return "tls: no buffered bytes yet" }
func (wouldBlockError) Timeout() bool   { return true }
func (wouldBlockError) Temporary() bool { return true }

// npConn is the net.Conn crypto/tls reads and writes: writes go straight
// to netpoll (with its write timeout); reads come from netpoll's buffer.
type npConn struct {
	netpoll.Connection
	nonblock atomic.Bool
}

// Read copies what netpoll has buffered. Before the handshake is done it
// waits for at least one byte, bounded by the handshake timer, which
// closes the connection and so ends the wait; there is no read timeout as
// well, since netpoll would keep a timer per connection for it. Afterwards
// it never waits.
func (c *npConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r := c.Reader()
	n := r.Len()
	if n == 0 {
		if c.nonblock.Load() {
			return 0, errWouldBlock
		}
		if _, err := r.Peek(1); err != nil {
			return 0, fmt.Errorf("tls: wait for bytes: %w", err)
		}
		n = r.Len()
	}
	n = min(n, len(p))
	b, err := r.Next(n)
	if err != nil {
		return 0, fmt.Errorf("tls: read: %w", err)
	}
	copy(p, b)
	// The bytes are copied: netpoll may reuse its buffer.
	_ = r.Release()
	return n, nil
}

// Write hands p to netpoll. During the handshake it writes p in pieces.
// netpoll sizes a new output node to the write (at least LinkBufferCap,
// rounded up to a power of two) and keeps the node holding the last bytes
// written until later writes fill it, so the server's first flight (about
// 2 KiB with a hybrid key share and one small certificate, more with a
// chain) written at once pinned a 2 or 4 KiB node for most of an idle
// connection's life. Pieces of a power of two bytes fill their nodes
// exactly, and the last piece, at most LinkBufferCap, leaves the smallest
// node behind; a flight costs a few writes instead of one, once per
// connection. After the handshake a record goes in one write: an idle
// connection's records are small, and splitting them would cost a syscall
// each.
func (c *npConn) Write(p []byte) (int, error) {
	if c.nonblock.Load() {
		return c.Connection.Write(p)
	}
	written := 0
	for len(p) > 0 {
		k := len(p)
		if k > netpoll.LinkBufferCap {
			k = 1 << (bits.Len(uint(k)) - 1)
		}
		n, err := c.Connection.Write(p[:k])
		written += n
		if err != nil {
			return written, fmt.Errorf("tls: write: %w", err)
		}
		p = p[k:]
	}
	return written, nil
}

// tlsLayer is the TLS state of one socket on the tls or wss listener.
type tlsLayer struct {
	raw *npConn
	tc  *tls.Conn
	// done is set once the handshake succeeded; timer closes the
	// connection if it has not by the deadline.
	done  atomic.Bool
	timer stageTimer
}

// plainBufs lends OnRequest a buffer for one record's plaintext, so an idle
// TLS connection holds none of its own.
var plainBufs = sync.Pool{New: func() any { b := make([]byte, tlsPlainBuf); return &b }}

// sliceSource is a byteSource over decrypted bytes that the decoder must
// consume before the buffer is reused.
type sliceSource struct{ b []byte }

func (s *sliceSource) Len() int { return len(s.b) }

func (s *sliceSource) Peek(n int) ([]byte, error) {
	if n > len(s.b) {
		return nil, io.ErrUnexpectedEOF
	}
	return s.b[:n], nil
}

func (s *sliceSource) Next(n int) ([]byte, error) {
	if n > len(s.b) {
		return nil, io.ErrUnexpectedEOF
	}
	b := s.b[:n]
	s.b = s.b[n:]
	return b, nil
}

// newTLSConfig is the listener's configuration: TLS 1.2 at least, the
// certificate taken from the store at each handshake so reloads apply to
// new connections only.
func newTLSConfig(certs *certStore) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: certs.getCertificate,
	}
}

// tlsStage is the TLS stage the tls and wss listeners share: the
// configuration, the handshakes in progress (gate.tls_max_handshakes) and
// the handshake deadline.
type tlsStage struct {
	conf    *tls.Config
	slots   chan struct{}
	timeout time.Duration
}

// armTLS prepares the TLS stage of an accepted socket and its handshake
// deadline, counted from accept so a slow PROXY header or a trickled
// ClientHello cannot extend it.
func (sk *socket) armTLS() {
	l, nc := sk.l, sk.nc
	raw := &npConn{Connection: nc}
	sec := &tlsLayer{raw: raw, tc: tls.Server(raw, l.tls.conf)}
	sk.sec = sec
	sec.timer.arm(l.tls.timeout, func() {
		if !sec.done.Load() {
			l.metrics.TLSHandshakeFailures.Add(1)
			l.log.Debug("tls handshake timeout, closing", zap.String("peer", remoteIP(nc.RemoteAddr())))
			_ = nc.Close()
		}
	})
}

// handshake runs the server handshake in blocking mode within a slot of
// gate.tls_max_handshakes; with every slot taken the connection is refused
// at once rather than holding another goroutine.
func (sk *socket) handshake() error {
	l := sk.l
	select {
	case l.tls.slots <- struct{}{}:
	default:
		l.metrics.TLSHandshakeRejects.Add(1)
		return errors.New("tls: too many handshakes in progress")
	}
	// Handshake, not HandshakeContext: a cancellable context costs a
	// watcher goroutine per handshake; the timer from armTLS bounds it.
	err := sk.sec.tc.Handshake()
	<-l.tls.slots
	if err != nil {
		l.metrics.TLSHandshakeFailures.Add(1)
		return fmt.Errorf("tls: handshake: %w", err)
	}
	sk.sec.done.Store(true)
	sk.sec.timer.stop()
	sk.sec.raw.nonblock.Store(true)
	return nil
}

// readTLS decrypts every record netpoll has delivered and hands the
// plaintext to the carrier, until crypto/tls would have to wait. It
// returns nil then, or the carrier's or the connection's error.
func (sk *socket) readTLS(ctx context.Context, t carrierConn) error {
	bp := plainBufs.Get().(*[]byte)
	defer plainBufs.Put(bp)
	buf := *bp
	for {
		n, err := sk.sec.tc.Read(buf)
		if n > 0 {
			src := sliceSource{b: buf[:n]}
			if ferr := t.carry(ctx, &src); ferr != nil {
				return ferr
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, errWouldBlock):
			return nil
		default:
			return fmt.Errorf("tls: read: %w", err)
		}
	}
}
