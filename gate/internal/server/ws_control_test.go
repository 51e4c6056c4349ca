package server

import (
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
)

// queuedControl is the number of control-frame bytes waiting for the
// holder of the write lock.
func queuedControl(tc *wsTransport) int {
	tc.cmu.Lock()
	defer tc.cmu.Unlock()
	return len(tc.ctrl)
}

// returnsWhileLocked runs f, which must return while the test holds the
// write lock: a control frame never waits for the flusher.
func returnsWhileLocked(t *testing.T, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(safety):
		t.Fatalf("%s waited for the write lock", what)
	}
}

// A control frame queued while the flusher holds the write lock (wmu) is
// neither written then nor waited for by its queuer; the holder writes it
// when it releases the lock (unlockWrite), and awaitControl, which a
// closing connection calls before closing the socket, returns only once
// it is written.
func TestWSControlFrameQueuedBehindTheWriteLockIsWrittenAtUnlock(t *testing.T) {
	fl, s := wsGate(t, nil)
	cases := []struct {
		name string
		// queue queues the frames while the test holds the write lock and
		// must not wait for it.
		queue func(t *testing.T, tc *wsTransport, wc *wsNetConn)
		want  []ws.Frame
		// closeAfter closes the connection as soon as awaitControl
		// returns, as closeWS does.
		closeAfter bool
	}{
		{
			name: "pongs for client pings, queued by the event loop",
			queue: func(t *testing.T, tc *wsTransport, wc *wsNetConn) {
				// Two pings: the event loop handles the second only after
				// writeControl returned for the first, so two queued
				// pongs show the loop was not held by the lock.
				for _, p := range []string{"p1", "p2"} {
					if err := wsutil.WriteClientMessage(wc.Conn, ws.OpPing, []byte(p)); err != nil {
						t.Fatal(err)
					}
				}
			},
			want: []ws.Frame{ws.NewPongFrame([]byte("p1")), ws.NewPongFrame([]byte("p2"))},
		},
		{
			name: "pong queued by writeControl",
			queue: func(t *testing.T, tc *wsTransport, _ *wsNetConn) {
				returnsWhileLocked(t, "writeControl(pong)", func() error {
					return tc.writeControl(ws.NewPongFrame([]byte("direct")))
				})
			},
			want: []ws.Frame{ws.NewPongFrame([]byte("direct"))},
		},
		{
			name: "close queued by writeControl, then the socket closes",
			queue: func(t *testing.T, tc *wsTransport, _ *wsNetConn) {
				returnsWhileLocked(t, "writeControl(close)", func() error {
					return tc.writeControl(ws.NewCloseFrame(ws.NewCloseFrameBody(ws.StatusGoingAway, "bye")))
				})
			},
			want:       []ws.Frame{ws.NewCloseFrame(ws.NewCloseFrameBody(ws.StatusGoingAway, "bye"))},
			closeAfter: true,
		},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, wc := mustDialWS(t, s)
			dev := fmt.Sprintf("dev-ws-ctl-%d", i)
			c.auth(int64(700+i), dev)
			sc := s.table.Get(fl.connID(t, dev))
			if sc == nil {
				t.Fatalf("no session for %s", dev)
			}
			conn, ok := sc.tr.(*wsTransport)
			if !ok {
				t.Fatalf("transport %T is not a WebSocket connection", sc.tr)
			}
			want := 0
			for _, f := range tc.want {
				b, err := ws.CompileFrame(f)
				if err != nil {
					t.Fatal(err)
				}
				want += len(b)
			}

			// Hold the lock as the flusher does during a write.
			conn.wmu.Lock()
			locked := true
			defer func() {
				if locked {
					conn.unlockWrite()
				}
			}()
			tc.queue(t, conn, wc)
			deadline := time.Now().Add(safety)
			for queuedControl(conn) < want {
				if time.Now().After(deadline) {
					t.Fatalf("%d control bytes queued, want %d", queuedControl(conn), want)
				}
				time.Sleep(time.Millisecond)
			}
			if got := queuedControl(conn); got != want {
				t.Fatalf("%d control bytes queued, want %d", got, want)
			}
			awaited := make(chan struct{})
			go func() {
				conn.awaitControl(safety)
				close(awaited)
			}()

			_ = wc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if n, err := wc.rd.Read(make([]byte, 1)); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("the client read %d bytes (%v) while the write lock was held", n, err)
			}
			select {
			case <-awaited:
				t.Fatal("awaitControl returned before the queued frames were written")
			default:
			}

			locked = false
			conn.unlockWrite()
			select {
			case <-awaited:
			case <-time.After(safety):
				t.Fatal("awaitControl still waiting after unlockWrite")
			}
			if n := queuedControl(conn); n != 0 {
				t.Fatalf("%d control bytes still queued after unlockWrite", n)
			}
			if tc.closeAfter {
				sc.Close(closeTest)
			}

			_ = wc.SetReadDeadline(time.Now().Add(safety))
			for _, w := range tc.want {
				f, err := ws.ReadFrame(wc.rd)
				if err != nil {
					t.Fatalf("reading %v frame: %v", w.Header.OpCode, err)
				}
				if f.Header.OpCode != w.Header.OpCode || string(f.Payload) != string(w.Payload) {
					t.Fatalf("got %v %q, want %v %q", f.Header.OpCode, f.Payload, w.Header.OpCode, w.Payload)
				}
			}
			if tc.closeAfter {
				if _, err := wc.rd.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
					t.Fatalf("socket after the close frame: %v, want EOF", err)
				}
			}
		})
	}
}
