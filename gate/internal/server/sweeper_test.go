package server

import (
	"testing"
	"time"

	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

func TestSweeper(t *testing.T) {
	const auth, idle = 100 * time.Millisecond, 300 * time.Millisecond
	start := time.Unix(1700000000, 0)
	cases := []struct {
		name       string
		authed     bool
		age        time.Duration // since connect
		quiet      time.Duration // since the last inbound frame
		wantClosed bool
		reason     closeReason
	}{
		{"fresh unauthenticated", false, 50 * time.Millisecond, 50 * time.Millisecond, false, closePeer},
		{"unauthenticated past auth timeout", false, 150 * time.Millisecond, 10 * time.Millisecond, true, closeAuthTimeout},
		{"authenticated and active", true, time.Hour, 100 * time.Millisecond, false, closePeer},
		{"authenticated but idle", true, time.Hour, 400 * time.Millisecond, true, closeIdleTimeout},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb := NewTable(4)
			sock := newNopSocket()
			c := newConn(1, sock, "127.0.0.1", start)
			if tc.authed && !c.bind(&logicv1.Session{UserId: 1, DeviceId: "d"}) {
				t.Fatal("bind failed")
			}
			now := start.Add(tc.age)
			c.touch(now.Add(-tc.quiet))
			tb.Add(c)
			sw := NewSweeper(tb, auth, idle, 0)
			closed := sw.Sweep(now)
			if (closed == 1) != tc.wantClosed || sock.isClosed() != tc.wantClosed {
				t.Fatalf("closed=%d socket closed=%v, want %v", closed, sock.isClosed(), tc.wantClosed)
			}
			if r, _ := c.reason(); tc.wantClosed && r != tc.reason {
				t.Fatalf("reason %v, want %v", r, tc.reason)
			}
		})
	}
}
