package server

import (
	"strings"
	"testing"

	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
)

// TuneNetpoll keeps netpoll's nodes far smaller than the largest frame, so
// a frame of about max_frame_size spans many of them both ways: it must
// arrive whole from one write and from many small ones, and the answer
// (the fake logic echoes the body in its envelope) must reach the client
// whole, with the connection usable afterwards.
func TestLargestFramesSpanSmallNetpollNodes(t *testing.T) {
	fl, addr := startLogic(t)
	s := startGate(t, testGateConfig(addr))
	c := dial(t, s)
	c.auth(61, "dev-big")

	// Room for the answer's envelope around the echoed body.
	pad := frame.DefaultMaxFrameSize - frame.HeaderSize - len(`{"pad":""}`) - 128
	body := []byte(`{"pad":"` + strings.Repeat("x", pad) + `"}`)
	// One write of the whole frame, then writes of 300 bytes.
	for i, chunk := range []int{frame.HeaderSize + len(body), 300} {
		req := uint64(2 + i)
		f := frame.Encode(frame.Header{Command: protocol.CmdGenerateMsgID, RequestID: req, SequenceID: uint32(req)}, body)
		for off := 0; off < len(f); off += chunk {
			c.raw(f[off:min(off+chunk, len(f))])
		}
		a := c.expect(protocol.CmdGenerateMsgID, req, uint32(req), errcode.OK)
		if string(a.env.Data) != string(body) {
			t.Fatalf("write in pieces of %d: answer carries %d bytes of data, want %d", chunk, len(a.env.Data), len(body))
		}
		if got := len(fl.lastRequest(protocol.CmdGenerateMsgID).Body); got != len(body) {
			t.Fatalf("write in pieces of %d: logic got a body of %d bytes, want %d", chunk, got, len(body))
		}
	}
	c.send(protocol.CmdHeartbeat, 4, 4, nil)
	c.expectHeartbeat(4, 4)
}
