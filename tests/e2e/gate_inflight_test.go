package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/tests/framework"
)

// rawConn speaks Spark frames over any net.Conn without the client
// library's request pairing, for tests that pipeline or prefix the stream.
type rawConn struct {
	nc net.Conn
	br *bufio.Reader
}

func newRawConn(nc net.Conn) *rawConn { return &rawConn{nc: nc, br: bufio.NewReader(nc)} }

// read returns the next frame's header and envelope.
func (r *rawConn) read(timeout time.Duration) (frame.Header, envelope.Response, error) {
	_ = r.nc.SetReadDeadline(time.Now().Add(timeout))
	hb := make([]byte, frame.HeaderSize)
	if _, err := io.ReadFull(r.br, hb); err != nil {
		return frame.Header{}, envelope.Response{}, fmt.Errorf("read header: %w", err)
	}
	h, err := frame.ParseHeader(hb, 0)
	if err != nil {
		return h, envelope.Response{}, fmt.Errorf("parse header: %w", err)
	}
	body := make([]byte, h.BodyLength)
	if _, err := io.ReadFull(r.br, body); err != nil {
		return h, envelope.Response{}, fmt.Errorf("read body: %w", err)
	}
	var env envelope.Response
	if len(body) > 0 {
		if err := json.Unmarshal(body, &env); err != nil {
			return h, env, fmt.Errorf("body %q: %w", body, err)
		}
	}
	return h, env, nil
}

// auth sends AUTH and checks its answer.
func (r *rawConn) auth(t *testing.T, c *framework.Cluster, userID int64, device string) {
	t.Helper()
	body, err := json.Marshal(protocol.AuthRequest{Token: c.Token(userID, device), DeviceID: device, Platform: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.nc.Write(frame.Encode(frame.Header{Command: protocol.CmdAuth, RequestID: 1, SequenceID: 1}, body)); err != nil {
		t.Fatal(err)
	}
	h, env, err := r.read(10 * time.Second)
	if err != nil || h.Command != protocol.CmdAuth || env.Code != errcode.OK {
		t.Fatalf("auth: %+v %+v %v", h, env, err)
	}
}

// A connection pipelining thousands of requests through the real gate gets
// 50301 for its own excess over gate.max_inflight_per_conn at once, while
// another connection on the same logic stream is served normally.
func TestGateInflightPerConnection(t *testing.T) {
	const perConn, burst = 4, 2000
	c := framework.NewCluster(t, framework.Options{Gates: 1, GateEnv: []string{
		"IM_GATE_STREAMS_PER_LOGIC=1", // one stream: both connections share its slots
		fmt.Sprintf("IM_GATE_MAX_INFLIGHT_PER_CONN=%d", perConn),
		"IM_GATE_OUTBOUND_QUEUE=4096", // room for every answer of the burst
	}})
	ctx := ctxT(t, 2*time.Minute)

	nc, err := net.DialTimeout("tcp", c.Gates[0].TCPAddr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	greedy := newRawConn(nc)
	greedy.auth(t, c, 9101, "greedy")
	other := c.Login(t, 0, 9102, "other")

	var stream []byte
	for i := uint64(1); i <= burst; i++ {
		stream = frame.Append(stream, frame.Header{Command: protocol.CmdGenerateMsgID, RequestID: 100 + i, SequenceID: uint32(i)}, []byte(`{}`))
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := nc.Write(stream)
		wrote <- err
	}()
	served := make(chan error, 1)
	go func() {
		for i := 0; i < 50; i++ {
			if _, err := other.GenerateMsgID(ctx); err != nil {
				served <- fmt.Errorf("other connection, request %d: %w", i, err)
				return
			}
		}
		served <- nil
	}()

	ok, busy := 0, 0
	seen := make(map[uint64]bool, burst)
	for range burst {
		h, env, err := greedy.read(30 * time.Second)
		if err != nil {
			t.Fatalf("after %d ok, %d busy: %v", ok, busy, err)
		}
		if h.Command != protocol.CmdGenerateMsgID || seen[h.RequestID] || h.RequestID <= 100 || h.RequestID > 100+burst {
			t.Fatalf("unexpected answer %+v", h)
		}
		seen[h.RequestID] = true
		switch env.Code {
		case errcode.OK:
			ok++
		case errcode.Busy:
			busy++
		default:
			t.Fatalf("request %d: code %q %s", h.RequestID, env.Code, env.Msg)
		}
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	t.Logf("burst of %d: %d served, %d answered 50301", burst, ok, busy)
	if ok < perConn || busy == 0 {
		t.Fatalf("%d served and %d busy: the cap of %d did not apply", ok, busy, perConn)
	}

	// The burst is over; the greedy connection is served again.
	if _, err := nc.Write(frame.Encode(frame.Header{Command: protocol.CmdGenerateMsgID, RequestID: 9, SequenceID: 9}, []byte(`{}`))); err != nil {
		t.Fatal(err)
	}
	h, env, err := greedy.read(10 * time.Second)
	if err != nil || h.RequestID != 9 || env.Code != errcode.OK {
		t.Fatalf("after the burst: %+v %+v %v", h, env, err)
	}
}
