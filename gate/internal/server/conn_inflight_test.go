package server

import (
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
)

// A connection pipelining thousands of requests gets 50301 at once for its
// own excess over gate.max_inflight_per_conn, while another connection on
// the same stream is served normally, and the slots come back as its
// requests leave (here by timing out).
func TestConnInflightCapKeepsTheStreamForOthers(t *testing.T) {
	fl, addr := startLogic(t)
	cfg := testGateConfig(addr)
	cfg.StreamsPerLogic = 1 // both connections share one stream's slots
	cfg.MaxInflight = 4096
	cfg.MaxInflightPerConn = 64
	cfg.OutboundQueue = 4096 // room for every 50301 answer
	cfg.RequestTimeout = 3 * time.Second
	s := startGate(t, cfg)

	greedy := dial(t, s)
	greedy.auth(1, "dev-greedy")
	other := dial(t, s)
	other.auth(2, "dev-other")

	const n = 5000
	var burst []byte
	for i := uint64(1); i <= n; i++ {
		burst = frame.Append(burst, frame.Header{Command: cmdSilent, RequestID: i, SequenceID: uint32(i)}, nil)
	}
	// Written while the answers are read, so neither side's socket buffer
	// can stall the other.
	wrote := make(chan error, 1)
	go func() {
		_, err := greedy.nc.Write(burst)
		wrote <- err
	}()
	start := time.Now()
	for want := uint64(cfg.MaxInflightPerConn) + 1; want <= n; want++ {
		a := greedy.read()
		if a.Command != cmdSilent || a.RequestID != want || a.env.Code != errcode.Busy {
			t.Fatalf("answer %d: cmd=%d req=%d code=%q, want %d's 50301", want, a.Command, a.RequestID, a.env.Code, want)
		}
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= cfg.RequestTimeout {
		t.Fatalf("the excess was answered after %v, not at once", took)
	}
	if got := s.metrics.ConnInflightRejects.Load(); got != n-64 {
		t.Fatalf("conn_inflight_rejects %d, want %d", got, n-64)
	}

	// The greedy connection holds 64 of the stream's 4,096 slots; the other
	// connection is served.
	for i := uint64(10); i < 20; i++ {
		other.send(protocol.CmdGenerateMsgID, i, uint32(i), []byte(`{}`))
		other.expect(protocol.CmdGenerateMsgID, i, uint32(i), errcode.OK)
	}
	fl.mu.Lock()
	forwarded := 0
	for _, r := range fl.requests {
		if uint16(r.Command) == cmdSilent {
			forwarded++
		}
	}
	fl.mu.Unlock()
	if forwarded != 64 {
		t.Fatalf("logic got %d of the burst, want 64", forwarded)
	}

	// Timed-out requests give their slots back.
	for want := uint64(1); want <= 64; want++ {
		greedy.expect(cmdSilent, want, uint32(want), errcode.Busy)
	}
	greedy.send(protocol.CmdGenerateMsgID, n+1, 1, []byte(`{}`))
	greedy.expect(protocol.CmdGenerateMsgID, n+1, 1, errcode.OK)
}
