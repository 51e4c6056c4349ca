package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/token"
)

// fakeServer speaks frames on one accepted connection.
type fakeServer struct {
	t    *testing.T
	ln   net.Listener
	conn net.Conn
	br   *bufio.Reader
	ids  *envelope.IDSource
	wmu  sync.Mutex
}

func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return &fakeServer{t: t, ln: ln, ids: envelope.NewIDSource()}
}

// dial connects a client and accepts its connection.
func (s *fakeServer) dial(opts Options) *Conn {
	s.t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := s.ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := Dial(context.Background(), s.ln.Addr().String(), opts)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = c.Close() })
	s.conn = <-accepted
	s.br = bufio.NewReader(s.conn)
	s.t.Cleanup(func() { _ = s.conn.Close() })
	return c
}

type inFrame struct {
	h    frame.Header
	body []byte
}

func (s *fakeServer) read() inFrame {
	s.t.Helper()
	_ = s.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [frame.HeaderSize]byte
	if _, err := io.ReadFull(s.br, hdr[:]); err != nil {
		s.t.Fatalf("server read: %v", err)
	}
	h, err := frame.ParseHeader(hdr[:], 0)
	if err != nil {
		s.t.Fatal(err)
	}
	body := make([]byte, h.BodyLength)
	if _, err := io.ReadFull(s.br, body); err != nil {
		s.t.Fatal(err)
	}
	return inFrame{h, body}
}

func (s *fakeServer) write(h frame.Header, body []byte) {
	s.t.Helper()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := s.conn.Write(frame.Encode(h, body)); err != nil {
		s.t.Errorf("server write: %v", err)
	}
}

func (s *fakeServer) answer(req inFrame, cmd uint16, body []byte) {
	s.write(frame.Header{Command: cmd, RequestID: req.h.RequestID, SequenceID: req.h.SequenceID}, body)
}

func TestRequestPairingWithPushesInterleaved(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{})
	ctx := context.Background()

	type result struct {
		r   Reply
		err error
	}
	r1, r2 := make(chan result, 1), make(chan result, 1)
	go func() { r, err := c.Request(ctx, protocol.CmdGenerateMsgID, nil); r1 <- result{r, err} }()
	a := s.read()
	go func() {
		r, err := c.Request(ctx, protocol.CmdSyncInbox, map[string]any{"limit": 5})
		r2 <- result{r, err}
	}()
	b := s.read()
	if a.h.RequestID == 0 || b.h.RequestID == 0 || a.h.RequestID == b.h.RequestID {
		t.Fatalf("request ids %d, %d: want distinct and non-zero", a.h.RequestID, b.h.RequestID)
	}
	if a.h.RequestID != 1 || b.h.RequestID != 2 {
		t.Fatalf("request ids %d, %d: want 1 and 2", a.h.RequestID, b.h.RequestID)
	}
	if string(b.body) != `{"limit":5}` {
		t.Fatalf("body %q", b.body)
	}

	// Answer out of order with pushes in between.
	s.write(frame.Header{Command: protocol.CmdMessage, SequenceID: 77}, envelope.OK(s.ids.Next(), []byte(`{"msg_id":"9","conversation_id":"3","sender_id":"5","message_type":1,"content":{"t":1,"text":"hey"}}`)))
	s.answer(b, protocol.CmdSyncInboxFinish, envelope.OK(s.ids.Next(), []byte(`{"dialog_cursor":"1"}`)))
	s.write(frame.Header{Command: protocol.CmdKick}, envelope.OK(s.ids.Next(), []byte(`{"reason":"bye"}`)))
	s.answer(a, protocol.CmdGenerateMsgID, envelope.OK(s.ids.Next(), []byte(`{"msg_id":"123"}`)))

	got2 := <-r2
	if got2.err != nil || got2.r.Command != protocol.CmdSyncInboxFinish || string(got2.r.Envelope.Data) != `{"dialog_cursor":"1"}` {
		t.Fatalf("second reply %+v %v", got2.r, got2.err)
	}
	got1 := <-r1
	var id protocol.MsgIDReply
	if got1.err != nil || got1.r.Err() != nil || got1.r.Decode(&id) != nil || id.MsgID != 123 {
		t.Fatalf("first reply %+v %v", got1.r, got1.err)
	}

	p := recv(t, c.Pushes(), "the MESSAGE push")
	m, err := p.Message()
	if err != nil || p.Command != protocol.CmdMessage || m.MsgID != 9 || m.SenderID != 5 || !p.IsPush() {
		t.Fatalf("push %+v %+v %v", p, m, err)
	}
	k := recv(t, c.Pushes(), "the KICK push")
	if k.Command != protocol.CmdKick {
		t.Fatalf("second push command %d", k.Command)
	}

	// The MESSAGE push was acknowledged with its SequenceID.
	ack := s.read()
	if ack.h.Command != protocol.CmdPushAck || ack.h.SequenceID != 77 || len(ack.body) != 0 {
		t.Fatalf("push ack %+v %q", ack.h, ack.body)
	}
}

func TestNoAutoPushAck(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{NoAutoPushAck: true})
	s.write(frame.Header{Command: protocol.CmdMessage, SequenceID: 5}, envelope.OK("x", nil))
	recv(t, c.Pushes(), "the push")
	go func() { _, _ = c.Heartbeat(context.Background()) }()
	if f := s.read(); f.h.Command != protocol.CmdHeartbeat {
		t.Fatalf("got command %d before the heartbeat: PUSH_ACK sent despite NoAutoPushAck", f.h.Command)
	}
}

func TestHeartbeatAndGzip(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{})
	go func() {
		hb := s.read()
		s.answer(hb, protocol.CmdHeartbeat, nil)
		big := envelope.OK("r", []byte(`{"text":"`+strings.Repeat("z", 4000)+`"}`))
		z, ok := frame.Compress(big)
		if !ok {
			t.Error("not compressed")
		}
		s.write(frame.Header{Command: 16, Flags: frame.FlagGzip}, z)
	}()
	if rtt, err := c.Heartbeat(context.Background()); err != nil || rtt <= 0 {
		t.Fatalf("heartbeat %v %v", rtt, err)
	}
	p := recv(t, c.Pushes(), "the push")
	env, err := p.Envelope()
	if err != nil || !strings.Contains(string(env.Data), "zzzz") || p.Flags&frame.FlagGzip != 0 {
		t.Fatalf("gzip push not inflated: %v", err)
	}
}

func TestSendRetriesSameClientMsgIDOnBusy(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{SendBackoff: 10 * time.Millisecond})
	done := make(chan struct{})
	var seen []protocol.SendRequest
	var reqIDs []uint64
	go func() {
		defer close(done)
		for i := 0; i < 3; i++ {
			f := s.read()
			var req protocol.SendRequest
			if err := json.Unmarshal(f.body, &req); err != nil {
				t.Error(err)
				return
			}
			seen = append(seen, req)
			reqIDs = append(reqIDs, f.h.RequestID)
			if i < 2 {
				s.answer(f, protocol.CmdSendMessage, envelope.Fail(s.ids.Next(), errcode.Busy, ""))
				continue
			}
			s.answer(f, protocol.CmdSendAck, envelope.OK(s.ids.Next(), []byte(`{"msg_id":"42","client_msg_id":"`+req.ClientMsgID+`","conversation_id":"7","server_time":1}`)))
		}
	}()
	ack, err := c.SendText(context.Background(), 1002, "hi")
	recv(t, done, "the fake server to finish")
	if err != nil {
		t.Fatal(err)
	}
	if ack.MsgID != 42 || ack.ConversationID != 7 {
		t.Fatalf("ack %+v", ack)
	}
	if len(seen) != 3 || seen[0].ClientMsgID == "" || seen[0].ClientMsgID != seen[1].ClientMsgID || seen[1].ClientMsgID != seen[2].ClientMsgID {
		t.Fatalf("client_msg_ids %+v", seen)
	}
	if seen[0].ToUserID != 1002 || string(seen[0].Content) != `{"t":1,"text":"hi"}` || seen[0].MessageType != 1 {
		t.Fatalf("request %+v", seen[0])
	}
	if reqIDs[0] == reqIDs[1] || reqIDs[1] == reqIDs[2] {
		t.Fatalf("retries reused RequestIDs %v", reqIDs)
	}
}

func TestSendRetriesOnTimeout(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{RequestTimeout: 100 * time.Millisecond, SendBackoff: 10 * time.Millisecond})
	go func() {
		first := s.read() // lost answer
		second := s.read()
		if string(first.body) != string(second.body) {
			t.Errorf("retry body differs: %s vs %s", first.body, second.body)
		}
		s.answer(second, protocol.CmdSendAck, envelope.OK("r", []byte(`{"msg_id":"1","conversation_id":"2"}`)))
	}()
	ack, err := c.Send(context.Background(), protocol.SendRequest{ToUserID: 2, ClientMsgID: "c-1", MessageType: 1, Content: json.RawMessage(`{"t":1,"text":"x"}`)})
	if err != nil || ack.MsgID != 1 {
		t.Fatalf("ack %+v err %v", ack, err)
	}
}

func TestSendReturnsCodeError(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{SendBackoff: time.Millisecond})
	go func() {
		f := s.read()
		s.answer(f, protocol.CmdSendMessage, envelope.Fail("r", errcode.Forbidden, "blocked"))
	}()
	_, err := c.SendText(context.Background(), 2, "x")
	var ce *CodeError
	if !errors.As(err, &ce) || ce.Code != errcode.Forbidden || ce.Msg != "blocked" {
		t.Fatalf("err %v", err)
	}
}

// A 40302 carries the business server's code and reason into the
// CodeError, and Send does not retry it.
func TestSendRejectedCarriesBusinessCodeAndReason(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{SendBackoff: time.Millisecond})
	go func() {
		f := s.read()
		s.answer(f, protocol.CmdSendMessage, envelope.FromError("r", errcode.Reject(7001, "no links")))
	}()
	_, err := c.SendText(context.Background(), 2, "http://spam")
	var ce *CodeError
	if !errors.As(err, &ce) || ce.Code != errcode.Rejected || ce.Rejection == nil ||
		ce.Rejection.RejectCode != 7001 || ce.Rejection.RejectReason != "no links" {
		t.Fatalf("err %v (%+v)", err, ce)
	}
}

// A 42901 carries the server's retry-after hint into the CodeError; other
// codes have none.
func TestCodeErrorRetryAfter(t *testing.T) {
	tests := []struct {
		name string
		body []byte
		want time.Duration
	}{
		{"rate limited with a hint", envelope.FailRetry("r", errcode.RateLimited, "slow down", 1500*time.Millisecond), 1500 * time.Millisecond},
		{"rate limited without", envelope.Fail("r", errcode.RateLimited, ""), 0},
		{"other code", envelope.Fail("r", errcode.Forbidden, "no"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeServer(t)
			c := s.dial(Options{})
			go func() {
				f := s.read()
				s.answer(f, protocol.CmdSyncInbox, tt.body)
			}()
			_, err := c.call(context.Background(), protocol.CmdSyncInbox, nil, nil)
			var ce *CodeError
			if !errors.As(err, &ce) || ce.RetryAfter != tt.want {
				t.Fatalf("err %v (retry after %v), want retry after %v", err, ce, tt.want)
			}
		})
	}
}

func TestSendGivesUpAfterAttempts(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{SendAttempts: 2, SendBackoff: time.Millisecond})
	go func() {
		for range 2 {
			f := s.read()
			s.answer(f, protocol.CmdSendMessage, envelope.Fail("r", errcode.Busy, ""))
		}
	}()
	_, err := c.SendText(context.Background(), 2, "x")
	var ce *CodeError
	if !errors.As(err, &ce) || ce.Code != errcode.Busy {
		t.Fatalf("err %v", err)
	}
}

func TestDoneWhenServerCloses(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{})
	res := make(chan error, 1)
	go func() { _, err := c.Request(context.Background(), protocol.CmdGenerateMsgID, nil); res <- err }()
	s.read()
	if c.Err() != nil {
		t.Fatalf("Err before close: %v", c.Err())
	}
	_ = s.conn.Close()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not fire")
	}
	if !errors.Is(c.Err(), io.EOF) {
		t.Fatalf("Err = %v, want EOF", c.Err())
	}
	if err := recv(t, res, "the pending request's error"); !errors.Is(err, ErrClosed) {
		t.Fatalf("pending request err %v", err)
	}
	select {
	case _, ok := <-c.Pushes():
		if ok {
			t.Fatal("Pushes not closed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Pushes not closed after the connection closed")
	}
	if _, err := c.Request(context.Background(), protocol.CmdHeartbeat, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("request after close: %v", err)
	}
}

func TestBadFrameClosesConnection(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{})
	_, _ = s.conn.Write([]byte("garbage that is not a frame"))
	recv(t, c.Done(), "the connection to close")
	if !errors.Is(c.Err(), frame.ErrBadMagic) {
		t.Fatalf("Err = %v", c.Err())
	}
}

func TestCloseAndWriteRaw(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{})
	if err := c.WriteRaw([]byte{0x53, 0x50}); err != nil {
		t.Fatal(err)
	}
	var two [2]byte
	if _, err := io.ReadFull(s.br, two[:]); err != nil || two != [2]byte{0x53, 0x50} {
		t.Fatalf("raw bytes %v %v", two, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(c.Err(), ErrClosed) {
		t.Fatalf("Err after Close = %v", c.Err())
	}
}

func TestDropPushesWhenFull(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{PushBuffer: 1, DropPushesWhenFull: true, NoAutoPushAck: true})
	for range 3 {
		s.write(frame.Header{Command: 16}, envelope.OK("r", nil))
	}
	go func() { f := s.read(); s.answer(f, protocol.CmdHeartbeat, nil) }()
	// The answer comes after the pushes, so once it is in, they were handled.
	if _, err := c.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.DroppedPushes() != 2 {
		t.Fatalf("dropped %d, want 2", c.DroppedPushes())
	}
}

func TestDevToken(t *testing.T) {
	tok, err := DevToken("s3cret", 1001, "cli-1001", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := token.Verify([]byte("s3cret"), tok, time.Now())
	if err != nil || cl.UserID != 1001 || cl.DeviceID != "cli-1001" {
		t.Fatalf("claims %+v %v", cl, err)
	}
}

// recv receives from ch within 5 s, or fails the test naming what it
// waited for: no wait in a test is unbounded.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}
