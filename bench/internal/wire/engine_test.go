package wire

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/frame"
)

type collect struct {
	mu     sync.Mutex
	seqs   []uint32
	closed chan struct{}
}

func (c *collect) OnFrame(_ *Conn, h frame.Header, body []byte) {
	if len(body) != int(h.SequenceID%300) {
		panic("body length mismatch")
	}
	c.mu.Lock()
	c.seqs = append(c.seqs, h.SequenceID)
	c.mu.Unlock()
}

func (c *collect) OnClose(*Conn, error) { close(c.closed) }

// The server writes frames split at awkward places (1 byte, mid-header,
// mid-body, many frames in one write): every frame must arrive once, in
// order, whatever the split.
func TestFramesSplitAcrossReads(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const n = 500
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		var all []byte
		for i := uint32(1); i <= n; i++ {
			all = frame.Append(all, frame.Header{Command: 6, SequenceID: i}, make([]byte, i%300))
		}
		for off, step := 0, 1; off < len(all); step = step%997 + 7 {
			end := min(off+step, len(all))
			_, _ = c.Write(all[off:end])
			off = end
		}
		time.Sleep(100 * time.Millisecond)
		_ = c.Close()
	}()
	e, err := New(2)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	h := &collect{closed: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.Dial(ctx, netip.MustParseAddr("127.0.0.2"), netip.MustParseAddrPort(ln.Addr().String()), h); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.closed:
	case <-ctx.Done():
		t.Fatal("no close")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.seqs) != n {
		t.Fatalf("got %d frames, want %d", len(h.seqs), n)
	}
	for i, s := range h.seqs {
		if s != uint32(i+1) {
			t.Fatalf("frame %d has sequence %d", i, s)
		}
	}
}
