package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/sparkim/spark/pkg/frame"
)

// wsEcho is a WebSocket server that, for each binary message it reads,
// records it, pings the client and sends the message back as is: the
// client answers the ping while it reads.
func wsEcho(t *testing.T, got chan<- []byte, pongs chan<- struct{}) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ws" {
			http.NotFound(w, r)
			return
		}
		nc, _, _, err := ws.UpgradeHTTP(r, w)
		if err != nil {
			return
		}
		defer nc.Close()
		for {
			hdr, err := ws.ReadHeader(nc)
			if err != nil {
				return
			}
			payload := make([]byte, hdr.Length)
			if _, err := io.ReadFull(nc, payload); err != nil {
				return
			}
			if hdr.Masked {
				ws.Cipher(payload, hdr.Mask, 0)
			}
			switch hdr.OpCode {
			case ws.OpPong:
				pongs <- struct{}{}
				continue
			case ws.OpBinary:
			default:
				return
			}
			got <- payload
			_ = ws.WriteFrame(nc, ws.NewPingFrame([]byte("p")))
			_ = wsutil.WriteServerBinary(nc, payload)
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestWSDialer(t *testing.T) {
	one := frame.Encode(frame.Header{Command: 1, RequestID: 7}, []byte("hello"))
	two := frame.Encode(frame.Header{Command: 2, RequestID: 8}, nil)
	for _, tc := range []struct {
		name     string
		write    []byte
		messages [][]byte // what the server receives, one per message
		wantErr  bool
	}{
		{"one frame is one message", one, [][]byte{one}, false},
		{"two frames in one write are two messages", append(append([]byte{}, one...), two...), [][]byte{one, two}, false},
		{"part of a frame is refused", one[:len(one)-1], nil, true},
		{"a frame and a part are refused after the frame", append(append([]byte{}, two...), one[:3]...), [][]byte{two}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, pongs := make(chan []byte, 4), make(chan struct{}, 4)
			addr := wsEcho(t, got, pongs)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			nc, err := WSDialer{}.DialContext(ctx, "tcp", addr)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer nc.Close()
			n, err := nc.Write(tc.write)
			if tc.wantErr != (err != nil) || (!tc.wantErr && n != len(tc.write)) {
				t.Fatalf("Write = %d, %v; want error %v", n, err, tc.wantErr)
			}
			if tc.wantErr && !errors.Is(err, errNotWholeFrames) {
				t.Fatalf("Write error %v, want errNotWholeFrames", err)
			}
			var echoed []byte
			for _, want := range tc.messages {
				select {
				case m := <-got:
					if !bytes.Equal(m, want) {
						t.Fatalf("server got %x, want %x", m, want)
					}
				case <-ctx.Done():
					t.Fatal("server got no message")
				}
				echoed = append(echoed, want...)
			}
			back := make([]byte, len(echoed))
			_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(nc, back); err != nil || !bytes.Equal(back, echoed) {
				t.Fatalf("read back %x (%v), want %x", back, err, echoed)
			}
			for range tc.messages {
				select {
				case <-pongs:
				case <-ctx.Done():
					t.Fatal("the client answered no ping")
				}
			}
		})
	}
}

// A Conn over DialWS talks to the server as over TCP: its request goes
// out as one message and the echo comes back as a frame.
func TestDialWSCarriesConn(t *testing.T) {
	got, pongs := make(chan []byte, 4), make(chan struct{}, 4)
	addr := wsEcho(t, got, pongs)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, Options{Dial: func(ctx context.Context, _, addr string) (net.Conn, error) {
		return DialWS(ctx, "ws://"+addr+"/ws", nil)
	}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	// A HEARTBEAT echoed is answered by itself: the same request id.
	if _, err := c.Heartbeat(ctx); err != nil {
		t.Fatalf("heartbeat over WebSocket: %v", err)
	}
	if m := <-got; len(m) != frame.HeaderSize {
		t.Fatalf("server got a %d-byte message, want one header-only frame", len(m))
	}
}

func TestDialWSRefusesOtherPaths(t *testing.T) {
	addr := wsEcho(t, make(chan []byte, 1), make(chan struct{}, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := DialWS(ctx, "ws://"+addr+"/other", nil); err == nil {
		t.Fatal("dial of a path without a WebSocket succeeded")
	}
}
