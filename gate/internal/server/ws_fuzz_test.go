package server

import (
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/sparkim/spark/pkg/frame"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// FuzzParseWSHeader feeds arbitrary bytes to the WebSocket frame header
// parser the event loop runs on client input: it must never panic, and a
// header it accepts must be complete, masked, within the frame limit and
// of a length that cannot overflow the payload arithmetic.
func FuzzParseWSHeader(f *testing.F) {
	for _, seed := range [][]byte{
		{0x82, 0x85, 1, 2, 3, 4},                      // masked binary, 5 bytes
		{0x82, 0x05},                                  // unmasked
		{0x81, 0x80, 0, 0, 0, 0},                      // text
		{0x89, 0x80, 0, 0, 0, 0},                      // ping
		{0x82, 0xfe, 0x01, 0x00, 1, 2, 3, 4},          // 16-bit length
		{0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2}, // 64-bit length with the top bit set
		{0x02, 0x80, 0, 0, 0, 0},                      // fragment
	} {
		f.Add(seed)
	}
	// An authenticated session's limit, the larger one.
	s := &sessions{maxFrame: frame.DefaultMaxFrameSize}
	c := newConn(1, newNopSocket(), "", time.Now())
	c.bind(&logicv1.Session{UserId: 1, DeviceId: "fuzz"})
	t := &wsTransport{socket: socket{l: &listener{sessions: s}, c: c}}
	f.Fuzz(func(tt *testing.T, b []byte) {
		hl := wsHeaderLen(b)
		if hl == 0 || hl > len(b) {
			return // not complete yet: the loop waits for more bytes
		}
		h, n, err := t.parseWSHeader(b)
		if err != nil {
			return
		}
		if n != hl || !h.Masked || h.Length < 0 || h.Length > int64(frame.DefaultMaxFrameSize) || h.OpCode == ws.OpText {
			tt.Fatalf("accepted header %+v (len %d of %d) from % x", h, n, hl, b)
		}
	})
}
