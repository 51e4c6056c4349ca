package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/gobwas/ws"
	"go.uber.org/zap"
)

// WebSocket on netpoll (docs/decisions.md 62):
// the event loop must never wait for bytes, so nothing here reads through
// a blocking reader. The HTTP upgrade request is collected from the
// connection's bytes (netpoll's buffer on ws, decrypted plaintext on wss;
// moved to the connection's own buffer while incomplete) up to its blank
// line and handed, exactly those bytes, to gobwas/ws's Upgrader, which
// writes the 101 or the refusal. Afterwards each WebSocket frame is cut
// from the bytes by hand (header length from its first bytes, then
// ws.ReadHeader on a complete header); a partial frame moves to the
// connection's own buffer, so OnRequest always consumes every byte. One
// binary message carries exactly one Spark frame, handed to the session
// like the stream decoder does; pings, closes and protocol errors are
// answered by the carrier and never reach the session. This file is the
// carrier's life; the upgrade is wsupgrade.go, reading frames wsread.go,
// writing messages and control frames wswrite.go.

const (
	// wsPath is the only path that upgrades; others get 404.
	wsPath = "/ws"
	// wsMaxRequest bounds the HTTP upgrade request; past it 431.
	wsMaxRequest = 8 << 10
	// wsUpgradeTimeout bounds PROXY header plus upgrade request from
	// accept; the session's AUTH deadline starts after the upgrade.
	wsUpgradeTimeout = 10 * time.Second
	// wsMaxHeader is the longest WebSocket frame header (RFC 6455 5.2).
	wsMaxHeader = 14
	// wsCloseWait bounds how long a closing connection waits for its
	// close frame to be written (awaitControl).
	wsCloseWait = 100 * time.Millisecond
)

// wsCloseError asks the transport to send a close frame with code and
// close the connection.
type wsCloseError struct {
	code   ws.StatusCode
	reason string
}

func (e *wsCloseError) Error() string { return fmt.Sprintf("ws: %d %s", e.code, e.reason) }

// wsTransport is the WebSocket carrier of the ws and wss listeners: after
// the HTTP upgrade, one Spark frame per binary message each way.
type wsTransport struct {
	socket
	// upgraded is set once the 101 is written; timer closes the
	// connection if it has not been by the deadline.
	upgraded atomic.Bool
	timer    stageTimer
	// req holds an upgrade request that has not fully arrived.
	req []byte
	// pending holds a WebSocket frame that has not fully arrived; msg a
	// fragmented binary message being reassembled. Event loop only.
	pending []byte
	msg     []byte
	inMsg   bool
	// wmu serialises the session's flusher and the event loop's pongs
	// and close frames: netpoll refuses concurrent writes, and frames
	// must not interleave.
	wmu sync.Mutex
	// ctrl holds control frames (pongs, a close) the event loop queued;
	// whoever holds wmu writes them (see writeControl), under cmu.
	cmu  sync.Mutex
	ctrl []byte
}

// newWSTransport starts the upgrade deadline, counted from accept so a
// slow PROXY header or a trickled request cannot extend it.
func newWSTransport(l *listener, nc netpoll.Connection) *wsTransport {
	t := &wsTransport{socket: socket{l: l, nc: nc}}
	t.timer.arm(wsUpgradeTimeout, func() {
		if !t.upgraded.Load() {
			l.log.Debug("ws upgrade timeout, closing", zap.String("peer", remoteIP(nc.RemoteAddr())))
			_ = nc.Close()
		}
	})
	return t
}

// begin implements carrierConn: the session opens after the upgrade.
func (t *wsTransport) begin() bool { return true }

// stopTimers implements carrierConn.
func (t *wsTransport) stopTimers() {
	t.timer.stop()
	t.stopStages()
}

// onClosed implements carrierConn.
func (t *wsTransport) onClosed(netpoll.Connection) error {
	t.timer.stop()
	t.end()
	return nil
}

// carry implements carrierConn: the upgrade first (the session starts
// once it is answered), then WebSocket messages.
func (t *wsTransport) carry(ctx context.Context, src byteSource) error {
	if t.c == nil {
		if t.upgraded.Load() {
			return errNoSession
		}
		done, err := t.upgradeWS(src)
		if err != nil || !done {
			return err
		}
		if t.open(t) == nil {
			if t.refused != nil {
				t.refuse(t)
				return errDecodeStopped
			}
			return errNoSession
		}
	}
	return t.feedWS(ctx, src)
}

// readFailed implements carrierConn.
func (t *wsTransport) readFailed(err error) {
	var wsErr *wsCloseError
	if errors.As(err, &wsErr) {
		t.closeWS(wsErr)
		return
	}
	t.c.Close(closeReadFailed)
}
