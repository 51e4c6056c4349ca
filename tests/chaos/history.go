// Package chaos is the chaos runner of issue 12: a bounded mixed load
// (P2P and group sends, reads, recalls, deletes, reconnects and device
// switches) on a cluster of 3 gates, 2 logic and 2 deliver processes while
// a fault scheduler kills and restarts processes and stops Redis and
// MySQL once each. Every client records what it did and saw in a History;
// Check then verifies the history against MySQL (docs/decisions.md 73).
package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Event kinds of a History.
const (
	// KindPhase marks a phase of the run (Detail names it).
	KindPhase = "phase"
	// KindFault is a fault the scheduler injected or undid.
	KindFault = "fault"
	// KindConnect is a device's session signing in (Conn counts them).
	KindConnect = "connect"
	// KindSend is a SEND_MESSAGE about to go out (Target names the user
	// or group; Content is the message's content).
	KindSend = "send"
	// KindAck is the SEND_ACK of a send: Msg and Conv are the server's.
	KindAck = "ack"
	// KindSendFail is a send that ended without SEND_ACK. Definite marks
	// a refusal that says the message was not stored (a 4xxxx code);
	// otherwise the send is uncertain.
	KindSendFail = "send_fail"
	// KindPush is a MESSAGE push a device received.
	KindPush = "push"
	// KindSync is a message a device received in a SYNC_MESSAGES answer.
	KindSync = "sync"
	// KindRecallSeen is a recall a device learned of (RECALL push or
	// mailbox event).
	KindRecallSeen = "recall_seen"
	// KindDeleteSeen is a delete-for-me a device learned of (its own
	// answered DELETE, a DELETE push or mailbox event).
	KindDeleteSeen = "delete_seen"
	// KindRecall, KindDelete and KindRead are the answers to those
	// requests: Result is "ok", "refused" (a 4xxxx code) or "uncertain".
	KindRecall = "recall"
	KindDelete = "delete"
	KindRead   = "read"
	// KindSteady is written at the end of the calm phase for a device
	// whose connection lived through the whole phase: every message sent
	// to its user in the phase must have been pushed to it.
	KindSteady = "steady"
	// KindDeviceEnd is written for a device whose final sync succeeded:
	// its messages must equal MySQL's.
	KindDeviceEnd = "device_end"
	// KindFinalList is a conversation's whole history as SYNC_MESSAGES
	// pages it from 0 to a device at the end: Conn counts the messages
	// and Detail is ListDigest of them, which must equal MySQL's.
	KindFinalList = "final_list"
	// KindInbox is one conversation of a user's final SYNC_INBOX from
	// cursor "0": its last_msg_id, unread and preview as the server says.
	KindInbox = "inbox"
	// KindInboxDone is written once a user's final SYNC_INBOX completed.
	KindInboxDone = "inbox_done"
)

// Results of KindRecall, KindDelete and KindRead.
const (
	ResultOK        = "ok"
	ResultRefused   = "refused"
	ResultUncertain = "uncertain"
)

// Event is one line of a History. Only the fields of its Kind are set.
type Event struct {
	// T is the wall clock in Unix milliseconds.
	T      int64  `json:"t"`
	Kind   string `json:"k"`
	Device string `json:"dev,omitempty"`
	User   int64  `json:"u,omitempty"`
	Conn   int    `json:"conn,omitempty"`
	Conv   int64  `json:"conv,omitempty"`
	Msg    int64  `json:"msg,omitempty"`
	Sender int64  `json:"sender,omitempty"`
	CMID   string `json:"cmid,omitempty"`
	// Target is "u<id>" or "g<id>" for a send.
	Target   string `json:"target,omitempty"`
	Content  string `json:"content,omitempty"`
	Status   int    `json:"status,omitempty"`
	Unread   int64  `json:"unread,omitempty"`
	Preview  int64  `json:"preview,omitempty"`
	Recalled bool   `json:"recalled,omitempty"`
	Result   string `json:"result,omitempty"`
	Definite bool   `json:"definite,omitempty"`
	Detail   string `json:"detail,omitempty"`
	Err      string `json:"err,omitempty"`
}

// History records the events of a run, in the order they were recorded,
// and streams them to a JSON-lines file when given one. It is safe for
// concurrent use.
type History struct {
	mu     sync.Mutex
	events []Event
	w      *bufio.Writer
	err    error
}

// NewHistory returns a history; w (may be nil) receives every event as a
// JSON line.
func NewHistory(w io.Writer) *History {
	h := &History{}
	if w != nil {
		h.w = bufio.NewWriterSize(w, 256<<10)
	}
	return h
}

// Add records e, stamping its time when unset.
func (h *History) Add(e Event) {
	if e.T == 0 {
		e.T = time.Now().UnixMilli()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
	if h.w != nil && h.err == nil {
		b, err := json.Marshal(e)
		if err == nil {
			b = append(b, '\n')
			_, err = h.w.Write(b)
		}
		h.err = err
	}
}

// Events returns a copy of the events so far.
func (h *History) Events() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.events...)
}

// Flush writes buffered lines out and reports the first write error.
func (h *History) Flush() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.w != nil && h.err == nil {
		h.err = h.w.Flush()
	}
	if h.err != nil {
		return fmt.Errorf("chaos: write history: %w", h.err)
	}
	return nil
}

// ReadHistory loads a JSON-lines history file written by a History.
func ReadHistory(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("chaos: open history: %w", err)
	}
	defer f.Close()
	var out []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for line := 1; sc.Scan(); line++ {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("chaos: %s line %d: %w", path, line, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("chaos: read %s: %w", path, err)
	}
	return out, nil
}
