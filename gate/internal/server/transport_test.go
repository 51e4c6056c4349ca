package server

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gobwas/ws"

	"github.com/sparkim/spark/pkg/frame"
)

// A batch hands out exactly the frames added to it, each whole, and their
// bytes back to back.
func TestFrameBatch(t *testing.T) {
	cases := []struct {
		name   string
		bodies []string
	}{
		{"one empty frame", []string{""}},
		{"several", []string{"a", "", strings.Repeat("b", 300)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := getBatch()
			defer putBatch(b)
			var want []byte
			for i, body := range tc.bodies {
				h := frame.Header{Command: uint16(i + 1), RequestID: uint64(i)}
				b.add(h, []byte(body))
				want = append(want, frame.Encode(h, []byte(body))...)
			}
			if b.len() != len(tc.bodies) {
				t.Fatalf("len %d, want %d", b.len(), len(tc.bodies))
			}
			if !bytes.Equal(b.bytes(), want) {
				t.Fatal("bytes are not the frames back to back")
			}
			for i, body := range tc.bodies {
				h, got, n, err := frame.Decode(b.frame(i), 0)
				if err != nil || n != len(b.frame(i)) || int(h.Command) != i+1 || string(got) != body {
					t.Fatalf("frame %d: %+v %q (%d of %d bytes, %v)", i, h, got, n, len(b.frame(i)), err)
				}
			}
		})
	}
}

// The binary-message header a server writes is the one gobwas/ws reads, at
// each length encoding's edges.
func TestAppendBinaryHeader(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 127, 0xffff, 0x10000, 1 << 20} {
		b := appendBinaryHeader(nil, n)
		h, err := ws.ReadHeader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("length %d: %v", n, err)
		}
		if !h.Fin || h.OpCode != ws.OpBinary || h.Masked || h.Rsv != 0 || h.Length != int64(n) || len(b) != ws.HeaderSize(h) {
			t.Fatalf("length %d: read back %+v from % x", n, h, b)
		}
	}
}
