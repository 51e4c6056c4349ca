package scenario

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sparkim/spark/bench/internal/hist"
)

// groupCMID is the client_msg_id of group send seq: the send time first,
// as every bench client_msg_id ("b<unix ns>-…", read by sentAt), then a
// "g" marker and the send's number in its group run, so a push finds its
// send without waiting for the SEND_ACK that names the msg_id (a push may
// arrive before it).
func groupCMID(sent time.Time, seq int) string {
	return fmt.Sprintf("b%d-g-%d", sent.UnixNano(), seq)
}

// groupSeq reads the send number back from a groupCMID.
func groupSeq(cmid string) (int, bool) {
	if !strings.HasPrefix(cmid, "b") {
		return 0, false
	}
	i := strings.LastIndex(cmid, "-g-")
	if i < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(cmid[i+3:])
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// groupMsg is one group send and who got it.
type groupMsg struct {
	sender  int // device index of the sending device (never pushed to)
	sentAt  time.Time
	ackAt   time.Time // zero until the SEND_ACK
	msgID   int64     // from the SEND_ACK
	pushID  int64     // from the first push
	failed  bool      // answered with an error or never answered
	seen    []uint16  // pushes per device, saturating
	reached int       // devices (other than the sender's) pushed at least once
	last    time.Time // when the last of them got its first push
}

// groupLedger accounts for the sends into one group with D online
// devices, indexed 0..D-1 (session.Index): which device got which message
// how often, and when the last one got it. The promise checked is that
// every acked message reaches every online device except the one that
// sent it (the sender's other devices included) by push, and nothing
// else: a push to the sending device, to a device outside the group, or
// under a msg_id other than the one acked is a failure; a repeated push of
// a msg_id a device already has is counted (clients de-duplicate by
// msg_id, docs/protocol.md §11) but not failed, as in the p2p accounting.
type groupLedger struct {
	devices int

	mu        sync.Mutex
	msgs      []*groupMsg
	echo      int // pushes to the sending device
	misrouted int // pushes to a device index outside 0..D-1, or of an unknown send
	wrongID   int // pushes whose msg_id differs from the first push's or the ack's
	member    *hist.Histogram
}

func newGroupLedger(devices, messages int) *groupLedger {
	return &groupLedger{devices: devices, msgs: make([]*groupMsg, messages), member: hist.New()}
}

// sent registers send seq by device sender at at; call it before the
// write so a push that beats the ack finds it.
func (l *groupLedger) sent(seq, sender int, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq < 0 || seq >= len(l.msgs) {
		return
	}
	l.msgs[seq] = &groupMsg{sender: sender, sentAt: at, seen: make([]uint16, l.devices)}
}

// acked records the SEND_ACK of seq (msgID 0: the send failed).
func (l *groupLedger) acked(seq int, msgID int64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.get(seq)
	if m == nil {
		return
	}
	if msgID == 0 {
		m.failed = true
		return
	}
	m.msgID, m.ackAt = msgID, at
	if m.pushID != 0 && m.pushID != msgID {
		l.wrongID++
	}
}

func (l *groupLedger) get(seq int) *groupMsg {
	if seq < 0 || seq >= len(l.msgs) {
		return nil
	}
	return l.msgs[seq]
}

// pushed records a MESSAGE push of send seq with msgID to device at at.
func (l *groupLedger) pushed(seq, device int, msgID int64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.get(seq)
	if m == nil || device < 0 || device >= l.devices {
		l.misrouted++
		return
	}
	if device == m.sender {
		l.echo++
		return
	}
	switch {
	case m.pushID == 0:
		m.pushID = msgID
		if m.msgID != 0 && m.msgID != msgID {
			l.wrongID++
		}
	case m.pushID != msgID:
		l.wrongID++
		return
	}
	if m.seen[device] < ^uint16(0) {
		m.seen[device]++
	}
	if m.seen[device] > 1 {
		return
	}
	m.reached++
	if at.After(m.last) {
		m.last = at
	}
	l.member.RecordDuration(max(at.Sub(m.sentAt), 0))
}

// waiting is the number of acked sends some online device has not got yet.
func (l *groupLedger) waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if m != nil && !m.ackAt.IsZero() && m.reached < l.devices-1 {
			n++
		}
	}
	return n
}

// groupTally is what a group run's ledger found.
type groupTally struct {
	Sent     int `json:"sent"`
	Acked    int `json:"acked"`
	Failed   int `json:"failed"`    // error answers and no answer
	Expected int `json:"expected"`  // acked × (online devices − 1)
	Reached  int `json:"reached"`   // (message, device) pairs pushed at least once
	Complete int `json:"complete"`  // acked messages every online device got
	Repeated int `json:"repeated"`  // pushes of a msg_id the device already had
	Echo     int `json:"echo"`      // pushes to the sending device
	WrongID  int `json:"wrong_id"`  // pushes under another msg_id than acked
	Misroute int `json:"misrouted"` // pushes to a device outside the group or of no send
	// BeforeAck counts complete messages whose last push came before the
	// SEND_ACK (their "after the ack" time is 0).
	BeforeAck int `json:"last_push_before_ack"`
	// FirstUnreached names a few (send, device) pairs missing, for the notes.
	FirstUnreached []string `json:"first_unreached,omitempty"`
}

// OK is the correctness verdict: every acked send reached every online
// device but its sender's, nothing was pushed where it does not belong,
// and every send was acked.
func (t groupTally) OK() bool {
	return t.Acked > 0 && t.Acked == t.Sent && t.Reached == t.Expected && t.Echo == 0 && t.WrongID == 0 && t.Misroute == 0
}

// Share is the share of expected (message, online device) pairs reached.
func (t groupTally) Share() float64 {
	if t.Expected == 0 {
		return 0
	}
	return float64(t.Reached) / float64(t.Expected)
}

// tally summarizes the ledger; lastAfterAck gets, for every complete
// message, the time from its SEND_ACK to the last online device's push.
func (l *groupLedger) tally(lastAfterAck *hist.Histogram) groupTally {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := groupTally{Echo: l.echo, WrongID: l.wrongID, Misroute: l.misrouted}
	for seq, m := range l.msgs {
		if m == nil {
			continue
		}
		t.Sent++
		if m.ackAt.IsZero() {
			t.Failed++
			continue
		}
		t.Acked++
		t.Expected += l.devices - 1
		t.Reached += m.reached
		for d, n := range m.seen {
			if n > 1 {
				t.Repeated += int(n) - 1
			}
			if n == 0 && d != m.sender && len(t.FirstUnreached) < 5 {
				t.FirstUnreached = append(t.FirstUnreached, fmt.Sprintf("send %d (msg %d) device %d", seq, m.msgID, d))
			}
		}
		if m.reached < l.devices-1 {
			continue
		}
		t.Complete++
		d := m.last.Sub(m.ackAt)
		if d < 0 {
			t.BeforeAck++
			d = 0
		}
		if lastAfterAck != nil {
			lastAfterAck.RecordDuration(d)
		}
	}
	return t
}

// memberLatency is a copy of the send-to-push times of every first push.
func (l *groupLedger) memberLatency() *hist.Histogram {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := hist.New()
	h.Merge(l.member)
	return h
}
