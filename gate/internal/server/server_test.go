package server

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

const (
	testSecret = "test-cluster-secret"
	// cmdSilent is a command the fake logic never answers.
	cmdSilent uint16 = 99
	// safety bounds every blocking step of a test; nothing measures it.
	safety = 5 * time.Second
)

func TestMain(m *testing.M) {
	if err := TuneNetpoll(); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// fakeLogic answers AUTH with a bind (token "user:<id>"; "bad" fails and
// closes), never answers cmdSilent, and echoes everything else.
type fakeLogic struct {
	logicv1.UnimplementedGatewayServer
	ids *envelope.IDSource

	mu       sync.Mutex
	hellos   []*logicv1.Hello
	connOf   map[string]uint64 // device id → conn id
	requests []*logicv1.Request
	closed   chan *logicv1.Closed
	// streams are the open Connect streams in arrival order.
	streams []*fakeStream
	// rebinds receives every Rebind with the index of its stream.
	rebinds chan streamRebind
}

// fakeStream serialises sends on one server stream: the Connect loop's
// answers and a test's Resync.
type fakeStream struct {
	mu sync.Mutex
	ss logicv1.Gateway_ConnectServer
}

func (fs *fakeStream) send(f *logicv1.LogicFrame) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.ss.Send(f)
}

type streamRebind struct {
	stream int
	rebind *logicv1.Rebind
}

func newFakeLogic() *fakeLogic {
	return &fakeLogic{ids: envelope.NewIDSource(), connOf: map[string]uint64{}, closed: make(chan *logicv1.Closed, 64),
		rebinds: make(chan streamRebind, 1024)}
}

// resync sends Resync on the i-th stream.
func (f *fakeLogic) resync(t *testing.T, i int) {
	t.Helper()
	f.mu.Lock()
	fs := f.streams[i]
	f.mu.Unlock()
	if err := fs.send(&logicv1.LogicFrame{Kind: &logicv1.LogicFrame_Resync{Resync: &logicv1.Resync{}}}); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeLogic) Connect(ss logicv1.Gateway_ConnectServer) error {
	first, err := ss.Recv()
	if err != nil {
		return err
	}
	if first.GetHello() == nil {
		return status.Error(codes.InvalidArgument, "first frame must be Hello")
	}
	fs := &fakeStream{ss: ss}
	f.mu.Lock()
	f.hellos = append(f.hellos, first.GetHello())
	f.streams = append(f.streams, fs)
	idx := len(f.streams) - 1
	f.mu.Unlock()
	for {
		in, err := ss.Recv()
		if err != nil {
			return nil
		}
		if c := in.GetClosed(); c != nil {
			f.closed <- c
			continue
		}
		if rb := in.GetRebind(); rb != nil {
			f.rebinds <- streamRebind{stream: idx, rebind: rb}
			continue
		}
		req := in.GetRequest()
		if req == nil {
			continue
		}
		f.mu.Lock()
		f.requests = append(f.requests, req)
		f.mu.Unlock()
		resp := &logicv1.Response{ConnId: req.ConnId, Command: req.Command, RequestId: req.RequestId, SequenceId: req.SequenceId}
		switch uint16(req.Command) {
		case cmdSilent:
			continue
		case protocol.CmdAuth:
			var a protocol.AuthRequest
			_ = json.Unmarshal(req.Body, &a)
			uid, err := strconv.ParseInt(strings.TrimPrefix(a.Token, "user:"), 10, 64)
			if err != nil || req.Session != nil {
				resp.Body = envelope.Fail(f.ids.Next(), errcode.BadToken, "")
				resp.Close = true
				break
			}
			f.mu.Lock()
			f.connOf[a.DeviceID] = req.ConnId
			f.mu.Unlock()
			resp.Bind = &logicv1.Session{UserId: uid, DeviceId: a.DeviceID, Platform: a.Platform, SinceMs: time.Now().UnixMilli()}
			resp.Body = envelope.OK(f.ids.Next(), []byte(`{"user_id":"`+strconv.FormatInt(uid, 10)+`"}`))
		default:
			if req.Session == nil {
				resp.Body = envelope.Fail(f.ids.Next(), errcode.Internal, "gate forwarded without a session")
				break
			}
			resp.Body = envelope.OK(f.ids.Next(), req.Body)
		}
		if err := fs.send(&logicv1.LogicFrame{Kind: &logicv1.LogicFrame_Response{Response: resp}}); err != nil {
			return err
		}
	}
}

func (f *fakeLogic) connID(t *testing.T, device string) uint64 {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.connOf[device]
	if !ok {
		t.Fatalf("logic never saw AUTH from %s", device)
	}
	return id
}

func (f *fakeLogic) lastRequest(cmd uint16) *logicv1.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.requests) - 1; i >= 0; i-- {
		if uint16(f.requests[i].Command) == cmd {
			return f.requests[i]
		}
	}
	return nil
}

func startLogic(t *testing.T) (*fakeLogic, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := newFakeLogic()
	gs := grpc.NewServer(clusterauth.NewGuard(testSecret).ServerOptions()...)
	logicv1.RegisterGatewayServer(gs, fl)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return fl, ln.Addr().String()
}

// testGateConfig is the built-in gate section with local ports, one
// logic and the smaller queues and faster sweeps the tests want.
func testGateConfig(logicAddr string) config.Gate {
	g := config.Default().Gate
	g.ID = "gate-test"
	g.TCPAddr = "127.0.0.1:0"
	g.PushAddr = "127.0.0.1:0"
	g.AdminAddr = "127.0.0.1:0"
	g.LogicAddrs = []string{logicAddr}
	g.StreamsPerLogic = 2
	g.MaxInflight = 64
	g.MaxFrameSize = frame.DefaultMaxFrameSize
	g.WriteTimeout = 2 * time.Second
	g.OutboundQueue = 16
	g.Shards = 4
	g.RequestTimeout = 5 * time.Second
	g.SweepInterval = 20 * time.Millisecond
	// Off unless a test turns them on, as in the zero config the tests
	// used before they started from the defaults.
	g.TLSAddr, g.WSAddr = "", ""
	g.ShutdownKickWindow = 0
	g.MaxConnsPerIP, g.MaxUnauthenticated = 0, 0
	return g
}

func startGate(t *testing.T, cfg config.Gate) *Server {
	t.Helper()
	return startGateDraining(t, cfg, 200*time.Millisecond)
}

// startGateDraining starts a ready gate whose shutdown waits up to drain
// for answers in flight.
func startGateDraining(t *testing.T, cfg config.Gate, drain time.Duration) *Server {
	t.Helper()
	cfg.DrainTimeout = drain
	s, err := New(Options{Gate: cfg, ClusterSecret: testSecret, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

func pushClient(t *testing.T, s *Server) gatev1.PushClient {
	t.Helper()
	cc, err := grpc.NewClient(s.PushAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()), clusterauth.Credentials(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return gatev1.NewPushClient(cc)
}

// client is a raw TCP client speaking the Spark frame.
type client struct {
	t  *testing.T
	nc net.Conn
}

func dial(t *testing.T, s *Server) *client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", s.TCPAddr(), safety)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &client{t: t, nc: nc}
}

func (c *client) raw(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *client) send(cmd uint16, req uint64, seq uint32, body []byte) {
	c.t.Helper()
	c.raw(frame.Encode(frame.Header{Command: cmd, RequestID: req, SequenceID: seq}, body))
}

type answer struct {
	frame.Header
	env envelope.Response
}

func (c *client) read() answer {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(safety))
	hb := make([]byte, frame.HeaderSize)
	if _, err := io.ReadFull(c.nc, hb); err != nil {
		c.t.Fatalf("read header: %v", err)
	}
	h, err := frame.ParseHeader(hb, 0)
	if err != nil {
		c.t.Fatalf("parse header: %v", err)
	}
	body := make([]byte, h.BodyLength)
	if _, err := io.ReadFull(c.nc, body); err != nil {
		c.t.Fatalf("read body: %v", err)
	}
	a := answer{Header: h}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &a.env); err != nil {
			c.t.Fatalf("body is not an envelope: %q", body)
		}
	}
	return a
}

// expect reads one frame and checks its command, ids and code.
func (c *client) expect(cmd uint16, req uint64, seq uint32, code errcode.Code) answer {
	c.t.Helper()
	a := c.read()
	if a.Command != cmd || a.RequestID != req || a.SequenceID != seq {
		c.t.Fatalf("got cmd=%d req=%d seq=%d code=%q, want cmd=%d req=%d seq=%d", a.Command, a.RequestID, a.SequenceID, a.env.Code, cmd, req, seq)
	}
	if a.env.Code != code {
		c.t.Fatalf("cmd %d: code %q (%s), want %q", cmd, a.env.Code, a.env.Msg, code)
	}
	return a
}

func (c *client) expectHeartbeat(req uint64, seq uint32) {
	c.t.Helper()
	a := c.read()
	if a.Command != protocol.CmdHeartbeat || a.RequestID != req || a.SequenceID != seq || a.BodyLength != 0 {
		c.t.Fatalf("heartbeat answer %+v", a.Header)
	}
}

// expectClosed reads until the gate closes the connection.
func (c *client) expectClosed() {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(safety))
	buf := make([]byte, 4096)
	for {
		_, err := c.nc.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatal("connection still open")
		}
		return
	}
}

func (c *client) auth(uid int64, device string) {
	c.t.Helper()
	c.send(protocol.CmdAuth, 1, 1, []byte(`{"token":"user:`+strconv.FormatInt(uid, 10)+`","device_id":"`+device+`","platform":"test"}`))
	c.expect(protocol.CmdAuth, 1, 1, errcode.OK)
}

func TestHelloCarriesGateIdentity(t *testing.T) {
	fl, addr := startLogic(t)
	s := startGate(t, testGateConfig(addr))
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if len(fl.hellos) == 0 || fl.hellos[0].GateId != "gate-test" || fl.hellos[0].PushAddr != s.PushAddr() {
		t.Fatalf("hellos %v", fl.hellos)
	}
}

func TestSessionStateMachine(t *testing.T) {
	fl, addr := startLogic(t)
	s := startGate(t, testGateConfig(addr))
	c := dial(t, s)

	c.send(protocol.CmdHeartbeat, 10, 20, nil)
	c.expectHeartbeat(10, 20)

	c.send(protocol.CmdSendMessage, 11, 21, []byte(`{}`))
	c.expect(protocol.CmdSendMessage, 11, 21, errcode.NotAuthed)
	c.send(protocol.CmdPushAck, 12, 22, nil)
	c.expect(protocol.CmdPushAck, 12, 22, errcode.NotAuthed)

	c.auth(42, "dev-a")
	if r := fl.lastRequest(protocol.CmdAuth); r.Session != nil || r.RealIp != "127.0.0.1" {
		t.Fatalf("AUTH forwarded with session %v real_ip %q", r.Session, r.RealIp)
	}

	c.send(protocol.CmdHeartbeat, 13, 23, nil)
	c.expectHeartbeat(13, 23)

	c.send(protocol.CmdGenerateMsgID, 14, 24, []byte(`{"x":1}`))
	a := c.expect(protocol.CmdGenerateMsgID, 14, 24, errcode.OK)
	if string(a.env.Data) != `{"x":1}` {
		t.Fatalf("echo data %s", a.env.Data)
	}
	if r := fl.lastRequest(protocol.CmdGenerateMsgID); r.Session.GetUserId() != 42 || r.Session.GetDeviceId() != "dev-a" {
		t.Fatalf("forwarded session %v", r.Session)
	}

	// Unknown commands go to logic too.
	c.send(200, 15, 25, []byte(`{}`))
	c.expect(200, 15, 25, errcode.OK)

	c.send(protocol.CmdAuth, 16, 26, []byte(`{}`))
	c.expect(protocol.CmdAuth, 16, 26, errcode.InvalidArgument)

	// PUSH_ACK is consumed: the next answer is the heartbeat's.
	c.send(protocol.CmdPushAck, 0, 1, nil)
	c.send(protocol.CmdHeartbeat, 17, 27, nil)
	c.expectHeartbeat(17, 27)
	if fl.lastRequest(protocol.CmdPushAck) != nil {
		t.Fatal("PUSH_ACK was forwarded")
	}
}

func TestGzipBodyIsInflated(t *testing.T) {
	fl, addr := startLogic(t)
	s := startGate(t, testGateConfig(addr))
	c := dial(t, s)
	c.auth(7, "dev-z")
	plain := []byte(`{"text":"` + strings.Repeat("hello ", 200) + `"}`)
	zipped, ok := frame.Compress(plain)
	if !ok {
		t.Fatal("body did not compress")
	}
	c.raw(frame.Encode(frame.Header{Command: protocol.CmdReadMessage, Flags: frame.FlagGzip, RequestID: 5, SequenceID: 5}, zipped))
	c.expect(protocol.CmdReadMessage, 5, 5, errcode.OK)
	if r := fl.lastRequest(protocol.CmdReadMessage); string(r.Body) != string(plain) {
		t.Fatalf("logic got %d bytes, want the inflated %d", len(r.Body), len(plain))
	}
}

func TestFramingErrorsClose(t *testing.T) {
	_, addr := startLogic(t)
	s := startGate(t, testGateConfig(addr))
	hdr := func(h frame.Header) []byte {
		b := make([]byte, frame.HeaderSize)
		frame.PutHeader(b, h)
		return b
	}
	cases := []struct {
		name string
		send func(c *client)
	}{
		{"bad magic", func(c *client) {
			b := hdr(frame.Header{Command: 2})
			b[0] = 'X'
			c.raw(b)
		}},
		{"bad magic before the header is complete", func(c *client) { c.raw([]byte("GET / HTTP/1.1")) }},
		{"bad version", func(c *client) {
			b := hdr(frame.Header{Command: 2})
			b[2] = 9
			c.raw(b)
		}},
		{"oversize length, body never sent", func(c *client) {
			b := hdr(frame.Header{Command: 4})
			binary.BigEndian.PutUint32(b[19:23], frame.DefaultMaxFrameSize) // + header > limit
			c.raw(b)
		}},
		{"gzip garbage answered then closed", func(c *client) {
			c.raw(frame.Encode(frame.Header{Command: protocol.CmdAuth, Flags: frame.FlagGzip, RequestID: 3, SequenceID: 4}, []byte("not gzip at all")))
			c.expect(protocol.CmdAuth, 3, 4, errcode.InvalidArgument)
		}},
		{"failed AUTH closed by logic", func(c *client) {
			c.send(protocol.CmdAuth, 5, 6, []byte(`{"token":"bad","device_id":"d"}`))
			c.expect(protocol.CmdAuth, 5, 6, errcode.BadToken)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, s)
			c.t = t
			tc.send(c)
			c.expectClosed()
		})
	}
}

func TestSplitFramesAreReassembled(t *testing.T) {
	_, addr := startLogic(t)
	s := startGate(t, testGateConfig(addr))
	c := dial(t, s)
	c.auth(9, "dev-s")
	body := []byte(`{"pad":"` + strings.Repeat("x", 3000) + `"}`)
	var stream []byte
	for i := uint64(1); i <= 3; i++ {
		stream = append(stream, frame.Encode(frame.Header{Command: protocol.CmdGenerateMsgID, RequestID: 100 + i, SequenceID: uint32(i)}, body)...)
	}
	stream = append(stream, frame.Encode(frame.Header{Command: protocol.CmdHeartbeat, RequestID: 200}, nil)...)
	// Uneven chunks split headers and bodies at every kind of boundary.
	for off, i := 0, 0; off < len(stream); i++ {
		n := min([]int{1, 7, 22, 1500, 5}[i%5], len(stream)-off)
		c.raw(stream[off : off+n])
		off += n
		time.Sleep(time.Millisecond)
	}
	got := map[uint64]bool{}
	for range 4 {
		a := c.read()
		got[a.RequestID] = true
	}
	for _, id := range []uint64{101, 102, 103, 200} {
		if !got[id] {
			t.Fatalf("no answer to request %d: %v", id, got)
		}
	}
}

func TestBusyWhenInflightFull(t *testing.T) {
	_, addr := startLogic(t)
	cfg := testGateConfig(addr)
	cfg.StreamsPerLogic = 1
	cfg.MaxInflight = 2
	cfg.RequestTimeout = 500 * time.Millisecond
	s := startGate(t, cfg)
	c := dial(t, s)
	c.auth(1, "dev-b")

	c.send(cmdSilent, 1001, 1, nil)
	c.send(cmdSilent, 1002, 2, nil)
	c.send(cmdSilent, 1003, 3, nil)
	// The third cannot be in flight: the gate answers it at once, ahead of
	// the timeouts of the first two.
	c.expect(cmdSilent, 1003, 3, errcode.Busy)
	c.send(protocol.CmdHeartbeat, 1004, 4, nil)
	c.expectHeartbeat(1004, 4)

	// Unanswered requests time out with 50301, oldest first.
	c.expect(cmdSilent, 1001, 1, errcode.Busy)
	c.expect(cmdSilent, 1002, 2, errcode.Busy)

	// Slots are free again.
	c.send(protocol.CmdGenerateMsgID, 1005, 5, []byte(`{}`))
	c.expect(protocol.CmdGenerateMsgID, 1005, 5, errcode.OK)
}

func TestBusyWhenLogicDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := newFakeLogic()
	gs := grpc.NewServer(clusterauth.NewGuard(testSecret).ServerOptions()...)
	logicv1.RegisterGatewayServer(gs, fl)
	go func() { _ = gs.Serve(ln) }()

	cfg := testGateConfig(ln.Addr().String())
	cfg.StreamsPerLogic = 1
	s := startGate(t, cfg)
	c := dial(t, s)
	c.auth(3, "dev-d")
	c.send(cmdSilent, 1, 1, nil)
	// Wait until the request reached logic, then break the stream.
	deadline := time.Now().Add(safety)
	for fl.lastRequest(cmdSilent) == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	gs.Stop()
	c.expect(cmdSilent, 1, 1, errcode.Busy)
	for s.Ready() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	c.send(protocol.CmdGenerateMsgID, 2, 2, []byte(`{}`))
	c.expect(protocol.CmdGenerateMsgID, 2, 2, errcode.Busy)
	c.send(protocol.CmdHeartbeat, 3, 3, nil)
	c.expectHeartbeat(3, 3)
}

func TestPush(t *testing.T) {
	fl, addr := startLogic(t)
	s := startGate(t, testGateConfig(addr))
	pc := pushClient(t, s)
	c := dial(t, s)
	c.auth(42, "dev-p")
	id := fl.connID(t, "dev-p")
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()

	body := envelope.OK("AAAAAAAAAAA", []byte(`{"msg_id":"1"}`))
	target := &gatev1.Target{ConnId: id, UserId: 42, DeviceId: "dev-p"}
	for i := 0; i < 3; i++ {
		r, err := pc.Push(ctx, &gatev1.PushRequest{Targets: []*gatev1.Target{target}, Command: uint32(protocol.CmdMessage), Body: body})
		if err != nil || r.Delivered != 1 || len(r.Missing)+len(r.Dropped) != 0 {
			t.Fatalf("push %d: %v %v", i, r, err)
		}
	}
	var last uint32
	for i := 0; i < 3; i++ {
		a := c.read()
		if a.Command != protocol.CmdMessage || a.RequestID != 0 || a.SequenceID <= last || string(a.env.Data) != `{"msg_id":"1"}` {
			t.Fatalf("push frame %+v data %s after seq %d", a.Header, a.env.Data, last)
		}
		last = a.SequenceID
	}

	cases := []struct {
		name   string
		target *gatev1.Target
	}{
		{"wrong user", &gatev1.Target{ConnId: id, UserId: 43, DeviceId: "dev-p"}},
		{"wrong device", &gatev1.Target{ConnId: id, UserId: 42, DeviceId: "dev-q"}},
		{"no such conn", &gatev1.Target{ConnId: id + 1000, UserId: 42, DeviceId: "dev-p"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := pc.Push(ctx, &gatev1.PushRequest{Targets: []*gatev1.Target{tc.target}, Command: uint32(protocol.CmdMessage), Body: body})
			if err != nil || r.Delivered != 0 || len(r.Missing) != 1 || r.Missing[0].ConnId != tc.target.ConnId {
				t.Fatalf("reply %v err %v", r, err)
			}
		})
	}

	b, err := pc.Broadcast(ctx, &gatev1.BroadcastRequest{Command: 16, Body: body})
	if err != nil || b.Delivered != 1 {
		t.Fatalf("broadcast %v %v", b, err)
	}
	if a := c.read(); a.Command != 16 || a.RequestID != 0 || a.SequenceID <= last {
		t.Fatalf("broadcast frame %+v", a.Header)
	}
	st, err := pc.Stats(ctx, &gatev1.StatsRequest{})
	if err != nil || st.GateId != "gate-test" || st.Authenticated != 1 || st.Connections != 1 {
		t.Fatalf("stats %v %v", st, err)
	}

	// Without the cluster secret nothing can push.
	cc, err := grpc.NewClient(s.PushAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := gatev1.NewPushClient(cc).Push(ctx, &gatev1.PushRequest{Command: 6}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("push without secret: %v", err)
	}
}

func TestKick(t *testing.T) {
	fl, addr := startLogic(t)
	s := startGate(t, testGateConfig(addr))
	pc := pushClient(t, s)
	c := dial(t, s)
	c.auth(5, "dev-k")
	id := fl.connID(t, "dev-k")
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()
	target := &gatev1.Target{ConnId: id, UserId: 5, DeviceId: "dev-k"}

	if r, err := pc.Kick(ctx, &gatev1.KickRequest{Targets: []*gatev1.Target{{ConnId: id, UserId: 6, DeviceId: "dev-k"}}, Reason: "x"}); err != nil || r.Kicked != 0 {
		t.Fatalf("kick of another user: %v %v", r, err)
	}
	r, err := pc.Kick(ctx, &gatev1.KickRequest{Targets: []*gatev1.Target{target}, Reason: "logged in on another connection"})
	if err != nil || r.Kicked != 1 {
		t.Fatalf("kick: %v %v", r, err)
	}
	if p, err := pc.Push(ctx, &gatev1.PushRequest{Targets: []*gatev1.Target{target}, Command: 6, Body: []byte(`{}`)}); err != nil || len(p.Missing) != 1 {
		t.Fatalf("push after kick: %v %v", p, err)
	}
	a := c.read()
	var data struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(a.env.Data, &data)
	if a.Command != protocol.CmdKick || a.RequestID != 0 || data.Reason != "logged in on another connection" {
		t.Fatalf("kick frame %+v data %s", a.Header, a.env.Data)
	}
	c.expectClosed()
	select {
	case cl := <-fl.closed:
		if cl.ConnId != id || cl.Session.GetUserId() != 5 || !strings.Contains(cl.Reason, "kicked") {
			t.Fatalf("closed %v", cl)
		}
	case <-time.After(safety):
		t.Fatal("logic never got Closed")
	}
}

func TestTimeoutsClose(t *testing.T) {
	fl, addr := startLogic(t)
	cases := []struct {
		name   string
		auth   time.Duration
		idle   time.Duration
		authed bool
	}{
		{"idle authenticated connection", 10 * time.Second, 200 * time.Millisecond, true},
		{"never authenticated", 200 * time.Millisecond, 10 * time.Second, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testGateConfig(addr)
			cfg.AuthTimeout, cfg.IdleTimeout = tc.auth, tc.idle
			s := startGate(t, cfg)
			c := dial(t, s)
			if tc.authed {
				c.auth(8, "dev-i")
			}
			c.send(protocol.CmdHeartbeat, 1, 1, nil)
			c.expectHeartbeat(1, 1)
			c.expectClosed()
			if tc.authed {
				select {
				case cl := <-fl.closed:
					if cl.Reason != "idle timeout" {
						t.Fatalf("closed reason %q", cl.Reason)
					}
				case <-time.After(safety):
					t.Fatal("logic never got Closed")
				}
			}
		})
	}
}

func TestShutdownClosesConnections(t *testing.T) {
	fl, addr := startLogic(t)
	s := startGate(t, testGateConfig(addr))
	c := dial(t, s)
	c.auth(11, "dev-x")
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.Ready() == nil {
		t.Fatal("ready after shutdown")
	}
	c.expectClosed()
	select {
	case cl := <-fl.closed:
		if cl.Session.GetUserId() != 11 {
			t.Fatalf("closed %v", cl)
		}
	case <-time.After(safety):
		t.Fatal("logic never got Closed")
	}
}

func TestSlowReaderDropsThenCloses(t *testing.T) {
	// The queue fills only if OutboundQueue+1 pushes reach the gate
	// within the write timeout of the stuck write; on a loaded machine
	// one push round trip can take longer than that, and the connection
	// rightly closes before any drop. Such an attempt is repeated with
	// the timeout doubled: a gate that never drops fails at every one.
	for timeout := 200 * time.Millisecond; ; timeout *= 2 {
		dropped, pc := slowReaderPushes(t, timeout)
		if dropped > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), safety)
			defer cancel()
			st, err := pc.Stats(ctx, &gatev1.StatsRequest{})
			if err != nil || st.PushesDropped == 0 {
				t.Fatalf("stats %v %v", st, err)
			}
			return
		}
		if timeout >= 6400*time.Millisecond {
			t.Fatalf("queue never reported a drop before the close, with write timeouts up to %v", timeout)
		}
		t.Logf("no drop before the close with a %v write timeout: pushes came slower than that; again with twice it", timeout)
	}
}

// slowReaderPushes pushes to a client that never reads until the gate
// closes it, and returns how many pushes the gate dropped.
func slowReaderPushes(t *testing.T, writeTimeout time.Duration) (int, gatev1.PushClient) {
	t.Helper()
	fl, addr := startLogic(t)
	cfg := testGateConfig(addr)
	cfg.WriteTimeout = writeTimeout
	cfg.OutboundQueue = 4
	s := startGate(t, cfg)
	pc := pushClient(t, s)
	c := dial(t, s)
	_ = c.nc.(*net.TCPConn).SetReadBuffer(4096)
	c.auth(21, "dev-slow")
	target := &gatev1.Target{ConnId: fl.connID(t, "dev-slow"), UserId: 21, DeviceId: "dev-slow"}
	ctx, cancel := context.WithTimeout(context.Background(), safety+writeTimeout)
	defer cancel()
	body := envelope.OK("AAAAAAAAAAA", []byte(`{"pad":"`+strings.Repeat("p", 60<<10)+`"}`))

	// The client never reads: kernel buffers fill, the queue fills (drops),
	// and the stuck write times out and closes the connection.
	dropped := 0
	for {
		r, err := pc.Push(ctx, &gatev1.PushRequest{Targets: []*gatev1.Target{target}, Command: 6, Body: body})
		if err != nil {
			t.Fatalf("push: %v (dropped %d)", err, dropped)
		}
		dropped += len(r.Dropped)
		if len(r.Missing) == 1 {
			return dropped, pc
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPushBatch(t *testing.T) {
	fl, addr := startLogic(t)
	cfg := testGateConfig(addr)
	cfg.OutboundQueue = 8
	s := startGate(t, cfg)
	pc := pushClient(t, s)
	fast := dial(t, s)
	fast.auth(31, "dev-fast")
	slow := dial(t, s)
	_ = slow.nc.(*net.TCPConn).SetReadBuffer(4096)
	slow.auth(32, "dev-slow")
	ft := &gatev1.Target{ConnId: fl.connID(t, "dev-fast"), UserId: 31, DeviceId: "dev-fast"}
	st := &gatev1.Target{ConnId: fl.connID(t, "dev-slow"), UserId: 32, DeviceId: "dev-slow"}
	gone := &gatev1.Target{ConnId: ft.ConnId + 1000, UserId: 33, DeviceId: "x"}
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()

	// Items 0-5 go to a reading client (and one unknown connection); items
	// 6-69 carry big bodies to a client that never reads, so its queue of 8
	// fills and later items are dropped.
	var items []*gatev1.PushRequest
	for i := 0; i < 6; i++ {
		items = append(items, &gatev1.PushRequest{Targets: []*gatev1.Target{ft, gone}, Command: uint32(protocol.CmdMessage),
			Body: envelope.OK("AAAAAAAAAAA", []byte(`{"n":`+strconv.Itoa(i)+`}`))})
	}
	big := envelope.OK("AAAAAAAAAAA", []byte(`{"pad":"`+strings.Repeat("p", 60<<10)+`"}`))
	for i := 0; i < 64; i++ {
		items = append(items, &gatev1.PushRequest{Targets: []*gatev1.Target{st}, Command: uint32(protocol.CmdMessage), Body: big})
	}
	r, err := pc.PushBatch(ctx, &gatev1.PushBatchRequest{Items: items})
	if err != nil || len(r.Replies) != len(items) {
		t.Fatalf("push batch: %v %v", r, err)
	}
	for i := 0; i < 6; i++ {
		rp := r.Replies[i]
		if rp.Delivered != 1 || len(rp.Dropped) != 0 || len(rp.Missing) != 1 || rp.Missing[0].ConnId != gone.ConnId {
			t.Fatalf("reply %d: %v", i, rp)
		}
	}
	var last uint32
	for i := 0; i < 6; i++ {
		a := fast.read()
		if a.Command != protocol.CmdMessage || a.RequestID != 0 || a.SequenceID <= last || string(a.env.Data) != `{"n":`+strconv.Itoa(i)+`}` {
			t.Fatalf("frame %d: %+v data %s after seq %d (items must be applied in order)", i, a.Header, a.env.Data, last)
		}
		last = a.SequenceID
	}
	if rp := r.Replies[6]; rp.Delivered != 1 {
		t.Fatalf("first slow item %v, want delivered", rp)
	}
	dropped := 0
	for i := 6; i < len(items); i++ {
		rp := r.Replies[i]
		if int(rp.Delivered)+len(rp.Dropped) != 1 || len(rp.Missing) != 0 {
			t.Fatalf("reply %d: %v", i, rp)
		}
		if len(rp.Dropped) == 1 && rp.Dropped[0].ConnId != st.ConnId {
			t.Fatalf("reply %d dropped %v", i, rp.Dropped[0])
		}
		dropped += len(rp.Dropped)
	}
	if dropped == 0 {
		t.Fatal("no item reported dropped although the queue was full")
	}

	// A bad command anywhere rejects the batch before anything is queued.
	_, err = pc.PushBatch(ctx, &gatev1.PushBatchRequest{Items: []*gatev1.PushRequest{
		{Targets: []*gatev1.Target{ft}, Command: uint32(protocol.CmdMessage), Body: items[0].Body},
		{Targets: []*gatev1.Target{ft}, Command: 0x10000, Body: items[0].Body},
	}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad command: %v", err)
	}
	if r, err := pc.Push(ctx, &gatev1.PushRequest{Targets: []*gatev1.Target{ft}, Command: 16, Body: items[0].Body}); err != nil || r.Delivered != 1 {
		t.Fatalf("push after rejected batch: %v %v", r, err)
	}
	if a := fast.read(); a.Command != 16 {
		t.Fatalf("frame after a rejected batch is %+v: the batch queued something", a.Header)
	}
}
