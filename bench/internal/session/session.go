// Package session is one load-generator client on a wire.Conn: request
// pairing by RequestID with callbacks run on the loop goroutine, AUTH, and
// the decoding the scenarios need. It keeps no goroutine per connection.
package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/sparkim/spark/bench/internal/wire"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
)

// Reply is an answer to a request.
type Reply struct {
	Header frame.Header
	Code   string          // envelope code, "" for HEARTBEAT (no envelope)
	Data   json.RawMessage // envelope data (copied: outlives the loop buffer)
	RTT    time.Duration
	Err    error // connection closed or timed out before an answer
}

// Callback receives the answer on the loop goroutine; it must not block.
type Callback func(Reply)

type call struct {
	sent time.Time
	cb   Callback
}

// Session is one authenticated (or authenticating) device.
type Session struct {
	Index  int // the scenario's number for this device (ledger key)
	UserID int64
	Device string
	Conn   *wire.Conn

	// OnPush is called on the loop goroutine for every push (RequestID 0).
	OnPush func(s *Session, h frame.Header, body []byte)
	// OnClosed is called once when the connection ends.
	OnClosed func(s *Session, err error)

	mu      sync.Mutex
	nextReq uint64
	pending map[uint64]call
	closed  bool
}

// New returns a session not yet connected.
func New(index int, userID int64, device string) *Session {
	return &Session{Index: index, UserID: userID, Device: device, pending: map[uint64]call{}}
}

// OnFrame implements wire.Handler.
func (s *Session) OnFrame(_ *wire.Conn, h frame.Header, body []byte) {
	now := time.Now()
	if h.RequestID == 0 {
		if h.Command == protocol.CmdMessage {
			// Acknowledge like a real client does: the gate counts PUSH_ACKs.
			_ = s.Conn.Write(frame.Encode(frame.Header{Command: protocol.CmdPushAck, SequenceID: h.SequenceID}, nil))
		}
		if s.OnPush != nil {
			s.OnPush(s, h, body)
		}
		return
	}
	s.mu.Lock()
	c, ok := s.pending[h.RequestID]
	delete(s.pending, h.RequestID)
	s.mu.Unlock()
	if !ok {
		return
	}
	r := Reply{Header: h, RTT: now.Sub(c.sent)}
	if len(body) > 0 {
		var env struct {
			Code string          `json:"code"`
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			r.Err = fmt.Errorf("session: bad envelope: %w", err)
		} else {
			r.Code = env.Code
			r.Data = append(json.RawMessage(nil), env.Data...)
		}
	}
	c.cb(r)
}

// ErrConnClosed is the error of every request pending when the connection ended.
var ErrConnClosed = errors.New("session: connection closed")

// OnClose implements wire.Handler: pending requests fail, OnClosed runs.
func (s *Session) OnClose(_ *wire.Conn, err error) {
	s.mu.Lock()
	s.closed = true
	p := s.pending
	s.pending = map[uint64]call{}
	s.mu.Unlock()
	for _, c := range p {
		c.cb(Reply{Err: ErrConnClosed})
	}
	if s.OnClosed != nil {
		s.OnClosed(s, err)
	}
}

// Request writes cmd with body and calls cb with the answer. The send time
// is taken just before the write.
func (s *Session) Request(cmd uint16, body []byte, cb Callback) error {
	s.mu.Lock()
	if s.closed || s.Conn == nil {
		s.mu.Unlock()
		return ErrConnClosed
	}
	s.nextReq++
	id := s.nextReq
	now := time.Now()
	s.pending[id] = call{sent: now, cb: cb}
	s.mu.Unlock()
	if err := s.Conn.Write(frame.Encode(frame.Header{Command: cmd, RequestID: id}, body)); err != nil {
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
		return fmt.Errorf("session: write: %w", err)
	}
	return nil
}

// Pending is the number of unanswered requests.
func (s *Session) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// ExpireOlder fails every request sent before cutoff (answer lost or too
// late) and returns how many.
func (s *Session) ExpireOlder(cutoff time.Time) int {
	s.mu.Lock()
	var late []call
	for id, c := range s.pending {
		if c.sent.Before(cutoff) {
			late = append(late, c)
			delete(s.pending, id)
		}
	}
	s.mu.Unlock()
	for _, c := range late {
		c.cb(Reply{Err: context.DeadlineExceeded})
	}
	return len(late)
}

// Call is Request that waits for the answer (for set-up phases, from a
// dialing goroutine, never from a loop goroutine).
func (s *Session) Call(ctx context.Context, cmd uint16, body []byte) (Reply, error) {
	ch := make(chan Reply, 1)
	if err := s.Request(cmd, body, func(r Reply) { ch <- r }); err != nil {
		return Reply{}, err
	}
	select {
	case r := <-ch:
		if r.Err != nil {
			return r, r.Err
		}
		return r, nil
	case <-ctx.Done():
		return Reply{}, fmt.Errorf("session: command %d: %w", cmd, ctx.Err())
	}
}

// Close closes the connection.
func (s *Session) Close() {
	if s.Conn != nil {
		s.Conn.Close()
	}
}

// Connect dials remote from local over plain TCP and authenticates with
// token; it returns how long dial+AUTH took.
func (s *Session) Connect(ctx context.Context, e *wire.Engine, local netip.Addr, remote netip.AddrPort, token string) (time.Duration, error) {
	return s.ConnectVia(ctx, e, local, remote, wire.Carrier{}, token)
}

// ConnectVia is Connect over carrier (TLS, WebSocket); the time returned
// includes its handshakes.
func (s *Session) ConnectVia(ctx context.Context, e *wire.Engine, local netip.Addr, remote netip.AddrPort, carrier wire.Carrier, token string) (time.Duration, error) {
	start := time.Now()
	s.mu.Lock()
	s.closed = false
	s.pending = map[uint64]call{}
	s.mu.Unlock()
	c, err := e.DialCarrier(ctx, local, remote, carrier, s)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.Conn = c
	s.mu.Unlock()
	body, _ := json.Marshal(protocol.AuthRequest{Token: token, DeviceID: s.Device, Platform: "bench", AppVersion: "imbench"})
	r, err := s.Call(ctx, protocol.CmdAuth, body)
	if err != nil {
		c.Close()
		return 0, fmt.Errorf("session: auth user %d: %w", s.UserID, err)
	}
	if r.Code != "0" {
		c.Close()
		return 0, fmt.Errorf("session: auth user %d: code %s", s.UserID, r.Code)
	}
	return time.Since(start), nil
}

// SyncInbox pages SYNC_INBOX from a fresh cursor to the last page and
// returns the conversations seen (the last state of each).
func (s *Session) SyncInbox(ctx context.Context) (map[int64]protocol.Conversation, error) {
	cursor, seq := "0", "0"
	out := map[int64]protocol.Conversation{}
	for pages := 0; pages < 10000; pages++ {
		body, _ := json.Marshal(map[string]any{"dialog_cursor": cursor, "mailbox_seq": seq, "limit": 200})
		r, err := s.Call(ctx, protocol.CmdSyncInbox, body)
		if err != nil {
			return nil, err
		}
		if r.Code != "0" {
			return nil, fmt.Errorf("session: SYNC_INBOX: code %s", r.Code)
		}
		var p protocol.SyncInboxReply
		if err := json.Unmarshal(r.Data, &p); err != nil {
			return nil, fmt.Errorf("session: SYNC_INBOX data: %w", err)
		}
		for _, c := range p.Conversations {
			out[int64(c.ConversationID)] = c
		}
		if p.DialogCursor != "" {
			cursor = p.DialogCursor
		}
		seq = p.MailboxSeq.String()
		if r.Header.Command == protocol.CmdSyncInboxFinish {
			return out, nil
		}
		if r.Header.Command != protocol.CmdSyncInbox {
			return nil, fmt.Errorf("session: SYNC_INBOX answered with command %d", r.Header.Command)
		}
	}
	return nil, errors.New("session: SYNC_INBOX does not finish")
}

// SyncMessages pages SYNC_MESSAGES of one conversation after lastMsgID to
// the last page.
func (s *Session) SyncMessages(ctx context.Context, conversationID, lastMsgID int64) ([]protocol.Message, error) {
	var out []protocol.Message
	for pages := 0; pages < 100000; pages++ {
		body, _ := json.Marshal(map[string]any{"conversation_id": fmt.Sprint(conversationID), "last_msg_id": fmt.Sprint(lastMsgID), "limit": 200})
		r, err := s.Call(ctx, protocol.CmdSyncMessages, body)
		if err != nil {
			return nil, err
		}
		if r.Code != "0" {
			return nil, fmt.Errorf("session: SYNC_MESSAGES: code %s", r.Code)
		}
		var p protocol.SyncMessagesReply
		if err := json.Unmarshal(r.Data, &p); err != nil {
			return nil, fmt.Errorf("session: SYNC_MESSAGES data: %w", err)
		}
		out = append(out, p.Messages...)
		if int64(p.NextMsgID) > lastMsgID {
			lastMsgID = int64(p.NextMsgID)
		}
		if r.Header.Command == protocol.CmdSyncMessagesDone {
			return out, nil
		}
		if r.Header.Command != protocol.CmdSyncMessages || len(p.Messages) == 0 && int64(p.NextMsgID) == 0 {
			return nil, fmt.Errorf("session: SYNC_MESSAGES answered with command %d and no progress", r.Header.Command)
		}
	}
	return nil, errors.New("session: SYNC_MESSAGES does not finish")
}
