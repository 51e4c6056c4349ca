package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
)

// scriptedGate accepts connections and runs script on each, with the
// number of connections it accepted before.
type scriptedGate struct {
	ln       net.Listener
	accepted atomic.Int32
}

func startScriptedGate(t *testing.T, script func(g *gateConn, n int)) *scriptedGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	g := &scriptedGate{ln: ln}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(g.accepted.Add(1)) - 1
			go func() {
				defer func() { _ = nc.Close() }()
				script(&gateConn{nc: nc, br: bufio.NewReader(nc), ids: envelope.NewIDSource()}, n)
			}()
		}
	}()
	return g
}

func (g *scriptedGate) addr() string { return g.ln.Addr().String() }

// gateConn is the server side of one scripted connection; its reads end
// the script (by error) when the client has gone.
type gateConn struct {
	nc  net.Conn
	br  *bufio.Reader
	ids *envelope.IDSource
}

func (g *gateConn) read() (frame.Header, []byte, error) {
	_ = g.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [frame.HeaderSize]byte
	if _, err := io.ReadFull(g.br, hdr[:]); err != nil {
		return frame.Header{}, nil, err
	}
	h, err := frame.ParseHeader(hdr[:], 0)
	if err != nil {
		return h, nil, err
	}
	body := make([]byte, h.BodyLength)
	_, err = io.ReadFull(g.br, body)
	return h, body, err
}

// expect reads frames, skipping PUSH_ACKs, until one of command cmd.
func (g *gateConn) expect(cmd uint16) (frame.Header, []byte, error) {
	for {
		h, body, err := g.read()
		if err != nil || h.Command == cmd {
			return h, body, err
		}
		if h.Command != protocol.CmdPushAck {
			return h, body, errors.New("unexpected command")
		}
	}
}

func (g *gateConn) answer(req frame.Header, cmd uint16, data string) {
	_, _ = g.nc.Write(frame.Encode(frame.Header{Command: cmd, RequestID: req.RequestID, SequenceID: req.SequenceID}, envelope.OK(g.ids.Next(), []byte(data))))
}

func (g *gateConn) kick(reason string) {
	_, _ = g.nc.Write(frame.Encode(frame.Header{Command: protocol.CmdKick, SequenceID: 1}, envelope.OK(g.ids.Next(), []byte(`{"reason":"`+reason+`"}`))))
}

// authAndSync answers AUTH and one SYNC_INBOX, returning the inbox
// request's body.
func (g *gateConn) authAndSync() ([]byte, error) {
	h, _, err := g.expect(protocol.CmdAuth)
	if err != nil {
		return nil, err
	}
	g.answer(h, protocol.CmdAuth, `{"user_id":"7"}`)
	h, body, err := g.expect(protocol.CmdSyncInbox)
	if err != nil {
		return nil, err
	}
	g.answer(h, protocol.CmdSyncInboxFinish, `{"conversations":[],"events":[],"dialog_cursor":"c5","mailbox_seq":"5"}`)
	return body, nil
}

func newTestRunner(t *testing.T) *SyncRunner {
	t.Helper()
	r, err := NewSyncRunner(context.Background(), FileStateStore{Path: filepath.Join(t.TempDir(), "s.json")}, 7, "d", SyncRunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func drain(s *Session) {
	go func() {
		for range s.Pushes() {
		}
	}()
}

func TestSessionReconnectsToTheNextGateAfterServerShutdownKickSyncsAndResendsWithTheSameClientMsgID(t *testing.T) {
	kickedAt := make(chan time.Time, 1)
	firstSend := make(chan string, 1)
	a := startScriptedGate(t, func(g *gateConn, _ int) {
		if _, err := g.authAndSync(); err != nil {
			return
		}
		// A send reaches the stopping gate, which kicks before answering.
		_, body, err := g.expect(protocol.CmdSendMessage)
		if err != nil {
			return
		}
		var req protocol.SendRequest
		_ = json.Unmarshal(body, &req)
		firstSend <- req.ClientMsgID
		kickedAt <- time.Now()
		g.kick(KickServerShutdown)
	})
	type second struct {
		at          time.Time
		syncBody    string
		clientMsgID string
	}
	got := make(chan second, 1)
	b := startScriptedGate(t, func(g *gateConn, _ int) {
		at := time.Now()
		sync, err := g.authAndSync()
		if err != nil {
			return
		}
		h, body, err := g.expect(protocol.CmdSendMessage)
		if err != nil {
			return
		}
		var req protocol.SendRequest
		_ = json.Unmarshal(body, &req)
		g.answer(h, protocol.CmdSendAck, `{"msg_id":"42","client_msg_id":"`+req.ClientMsgID+`","conversation_id":"3","server_time":1}`)
		got <- second{at: at, syncBody: string(sync), clientMsgID: req.ClientMsgID}
		_, _, _ = g.read() // hold the connection until the session closes
	})

	const minDelay = 200 * time.Millisecond
	syncs := make(chan error, 64)
	s, err := StartSession(SessionOptions{
		Addrs: []string{a.addr(), b.addr()}, Token: "t", DeviceID: "d", Platform: "test",
		Runner: newTestRunner(t), OnSync: func(_ SyncResult, err error) {
			select {
			case syncs <- err:
			default: // more syncs than the test reads: a failure below says so
			}
		},
		ReconnectMin: minDelay, ReconnectMax: time.Second, Random: func() float64 { return 0.5 },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	drain(s)
	// The send goes after the first connection's sync, so it reaches the
	// stopping gate (which expects AUTH, SYNC_INBOX, then SEND).
	if err := recv(t, syncs, "the first sync's result"); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := s.Send(ctx, protocol.SendRequest{ToUserID: 8, MessageType: 1, Content: json.RawMessage(`{"text":"hi"}`)})
	if err != nil {
		t.Fatalf("send across the kick: %v", err)
	}
	if ack.MsgID != 42 {
		t.Fatalf("ack %+v", ack)
	}
	sec := recv(t, got, "the send on the next gate")
	if first := recv(t, firstSend, "the send on the stopping gate"); first == "" || first != sec.clientMsgID {
		t.Fatalf("client_msg_id %q on the stopping gate, %q on the next: want the same", first, sec.clientMsgID)
	}
	// Equal jitter with random 0.5: three quarters of the first delay.
	if wait := sec.at.Sub(recv(t, kickedAt, "the KICK")); wait < minDelay/2 {
		t.Fatalf("reconnected %v after the KICK, want a backoff of at least %v", wait, minDelay/2)
	}
	// The usual sync, from the cursors the first connection's sync saved.
	var req syncInboxRequest
	if err := json.Unmarshal([]byte(sec.syncBody), &req); err != nil || req.DialogCursor != "c5" || req.MailboxSeq != "5" {
		t.Fatalf("sync after the reconnect sent %s", sec.syncBody)
	}
	if err := recv(t, syncs, "the sync after the reconnect"); err != nil {
		t.Fatalf("sync after the reconnect: %v", err)
	}
	if s.Connects() != 2 || s.Addr() != b.addr() || s.Err() != nil {
		t.Fatalf("connects %d addr %s err %v", s.Connects(), s.Addr(), s.Err())
	}
}

func TestSessionStopsAfterAKickForAnotherReason(t *testing.T) {
	a := startScriptedGate(t, func(g *gateConn, _ int) {
		if _, err := g.authAndSync(); err != nil {
			return
		}
		g.kick("logged in on another connection")
		_, _, _ = g.read()
	})
	b := startScriptedGate(t, func(g *gateConn, _ int) {
		_, _ = g.authAndSync()
		_, _, _ = g.read()
	})
	s, err := StartSession(SessionOptions{
		Addrs: []string{a.addr(), b.addr()}, Token: "t", DeviceID: "d",
		Runner: newTestRunner(t), ReconnectMin: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	drain(s)
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("session still running after the KICK")
	}
	var ke *KickError
	if !errors.As(s.Err(), &ke) || ke.Reason != "logged in on another connection" {
		t.Fatalf("session ended with %v, want the KickError", s.Err())
	}
	time.Sleep(50 * time.Millisecond) // a reconnect would have dialed by now
	if n := b.accepted.Load(); n != 0 || s.Connects() != 1 {
		t.Fatalf("reconnected after the KICK: gate b accepted %d, connects %d", n, s.Connects())
	}
	if _, err := s.Conn(context.Background()); !errors.As(err, &ke) {
		t.Fatalf("Conn after the KICK: %v", err)
	}
}

func TestBackoffDelayIsJitteredAndCapped(t *testing.T) {
	lo, hi := 100*time.Millisecond, 400*time.Millisecond
	for _, tc := range []struct {
		n      int
		random float64
		want   time.Duration
	}{
		{0, 0, 50 * time.Millisecond},
		{0, 0.999999, 99999950 * time.Nanosecond},
		{1, 0, 100 * time.Millisecond},
		{5, 0.5, 300 * time.Millisecond},
	} {
		if got := backoffDelay(tc.n, lo, hi, func() float64 { return tc.random }); got.Round(time.Microsecond) != tc.want.Round(time.Microsecond) {
			t.Errorf("backoffDelay(%d, random %v) = %v, want %v", tc.n, tc.random, got, tc.want)
		}
	}
}

// TestSessionUpstreamGoesAgainWithTheSameUpstreamIDAfterADrop: a frame
// whose connection drops before the answer is sent again on the next
// connection with the same upstream_id, and the answer of that one is
// returned.
func TestSessionUpstreamGoesAgainWithTheSameUpstreamIDAfterADrop(t *testing.T) {
	ids := make(chan string, 2)
	// The session publishes a connection before its sync ends, so the
	// frame may come before or after SYNC_INBOX.
	g := startScriptedGate(t, func(g *gateConn, n int) {
		for {
			h, body, err := g.read()
			if err != nil {
				return
			}
			switch h.Command {
			case protocol.CmdAuth:
				g.answer(h, protocol.CmdAuth, `{"user_id":"7"}`)
			case protocol.CmdSyncInbox:
				g.answer(h, protocol.CmdSyncInboxFinish, `{"conversations":[],"events":[],"dialog_cursor":"c5","mailbox_seq":"5"}`)
			case protocol.CmdUpstream:
				var req protocol.UpstreamRequest
				_ = json.Unmarshal(body, &req)
				ids <- req.UpstreamID
				if n == 0 {
					return // the connection drops before the answer
				}
				g.answer(h, protocol.CmdUpstream, `{"id":"77","duplicate":true}`)
			}
		}
	})
	s, err := StartSession(SessionOptions{
		Addrs: []string{g.addr()}, Token: "t", DeviceID: "d", Platform: "test", Runner: newTestRunner(t),
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond, Random: func() float64 { return 0.5 },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	drain(s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := s.Upstream(ctx, "orders", "body", "")
	if err != nil || r.ID != 77 || !r.Duplicate {
		t.Fatalf("upstream across the drop: %+v, %v", r, err)
	}
	first, second := recv(t, ids, "the first upstream_id"), recv(t, ids, "the second upstream_id")
	if first == "" || first != second {
		t.Fatalf("upstream_ids %q then %q, want one non-empty id", first, second)
	}
}
