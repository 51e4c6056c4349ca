package chaos

import (
	"fmt"
	"sort"
	"strings"
)

// Names of the checks, as a Verdict reports them (docs/decisions.md 73).
const (
	CheckAckedStoredOnce  = "acked-stored-once"
	CheckAckConsistent    = "ack-id-consistent"
	CheckRefusedNotStored = "refused-not-stored"
	CheckPhantom          = "phantom-message"
	CheckMsgIDUnique      = "msg-id-unique"
	CheckContent          = "content-consistent"
	CheckDuplicate        = "duplicate-after-dedup"
	CheckOwnPush          = "no-push-to-sending-device"
	CheckDeviceList       = "final-sync-equals-mysql"
	CheckSyncList         = "sync-list-equals-mysql"
	CheckRecallStored     = "recall-stored"
	CheckDeleteStored     = "delete-stored"
	CheckUnread           = "unread-equals-truth"
	CheckConversationList = "conversation-list"
	CheckCalmPush         = "calm-push"
	CheckCoverage         = "coverage"
)

// examplesPerCheck bounds the failures a verdict lists per check.
const examplesPerCheck = 10

// Stats counts what a run did and saw.
type Stats struct {
	Sends, Acked, Uncertain, UncertainStored, Refused int
	Resends                                           int
	Stored                                            int
	Pushes, SyncedMessages                            int
	Recalls, Deletes, Reads                           int
	Connects, Faults                                  int
	DevicesChecked, UsersChecked, SyncListsChecked    int
	CalmAcked, CalmSteadyDevices, CalmPushesExpected  int
}

// Verdict is the checker's answer: PASS when no check failed.
type Verdict struct {
	Pass bool
	// Failures counts failures per check; Examples lists the first few
	// of each.
	Failures map[string]int
	Examples map[string][]string
	Stats    Stats
}

func (v *Verdict) fail(check, format string, args ...any) {
	v.Pass = false
	v.Failures[check]++
	if len(v.Examples[check]) < examplesPerCheck {
		v.Examples[check] = append(v.Examples[check], fmt.Sprintf(format, args...))
	}
}

// String renders the verdict for people: the result, the counts and the
// failures with examples.
func (v Verdict) String() string {
	var b strings.Builder
	if v.Pass {
		b.WriteString("VERDICT: PASS\n")
	} else {
		b.WriteString("VERDICT: FAIL\n")
	}
	s := v.Stats
	fmt.Fprintf(&b, "sends %d: acked %d, uncertain %d (stored %d), refused %d; resends %d; messages in MySQL %d\n",
		s.Sends, s.Acked, s.Uncertain, s.UncertainStored, s.Refused, s.Resends, s.Stored)
	fmt.Fprintf(&b, "pushes %d, synced messages %d, recalls %d, deletes %d, reads %d, sign-ins %d, faults %d\n",
		s.Pushes, s.SyncedMessages, s.Recalls, s.Deletes, s.Reads, s.Connects, s.Faults)
	fmt.Fprintf(&b, "checked %d devices' final lists, %d of their SYNC_MESSAGES histories and %d users' conversation lists; calm phase: %d acked, %d steady devices, %d pushes expected\n",
		s.DevicesChecked, s.SyncListsChecked, s.UsersChecked, s.CalmAcked, s.CalmSteadyDevices, s.CalmPushesExpected)
	names := make([]string, 0, len(v.Failures))
	for n := range v.Failures {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "FAIL %s: %d\n", n, v.Failures[n])
		for _, e := range v.Examples[n] {
			fmt.Fprintf(&b, "  - %s\n", e)
		}
	}
	return b.String()
}

// observation is what a device was told about one message.
type observation struct {
	conv, sender int64
	cmid         string
	content      string
	tombstone    bool
}

// replica is a device as a well-behaved SDK keeps it: every message it
// learned of by push, sync or its own SEND_ACK, de-duplicated by msg_id,
// with recalls and deletes applied however they arrived (both are final,
// so their order against the message's arrival does not matter).
type replica struct {
	user     int64
	msgs     map[int64]observation
	recalled map[int64]bool
	deleted  map[int64]bool
}

type sendKey struct {
	sender, conv int64
	cmid         string
}

// Check verifies a run's history against MySQL's final state. The checks
// and their definitions are docs/decisions.md 73.
func Check(events []Event, truth Truth) Verdict {
	truth = truth.indexed()
	v := Verdict{Pass: true, Failures: map[string]int{}, Examples: map[string][]string{}}
	s := &v.Stats

	// Stored rows by their idempotency key.
	stored := map[sendKey][]StoredMessage{}
	byCMID := map[[2]any][]StoredMessage{} // (sender, cmid): the send does not name the conversation of a P2P message
	for _, m := range truth.Messages {
		stored[sendKey{m.Sender, m.Conv, m.CMID}] = append(stored[sendKey{m.Sender, m.Conv, m.CMID}], m)
		byCMID[[2]any{m.Sender, m.CMID}] = append(byCMID[[2]any{m.Sender, m.CMID}], m)
	}
	s.Stored = len(truth.Messages)
	for k, ms := range stored {
		if len(ms) > 1 {
			v.fail(CheckAckedStoredOnce, "client_msg_id %s of user %d stored %d times in conversation %d", k.cmid, k.sender, len(ms), k.conv)
		}
	}

	type sendInfo struct {
		user                   int64
		device, content        string
		acked, refused, anyErr bool
		ackIDs                 map[int64]bool
		// devices sent it; after a device switch an outbox resend may
		// come from another device than the first attempt.
		devices map[string]bool
		ackConv int64
		t       int64
	}
	sends := map[[2]any]*sendInfo{} // (user, cmid)
	devUser := map[string]int64{}
	reps := map[string]*replica{}
	rep := func(dev string, uid int64) *replica {
		r := reps[dev]
		if r == nil {
			r = &replica{user: uid, msgs: map[int64]observation{}, recalled: map[int64]bool{}, deleted: map[int64]bool{}}
			reps[dev] = r
		}
		return r
	}
	// seenIDs is every msg_id any client saw, with what it was told first.
	seenIDs := map[int64]observation{}
	observe := func(dev string, uid, msg int64, o observation, how string) {
		if msg <= 0 {
			v.fail(CheckMsgIDUnique, "device %s got a %s with msg_id %d", dev, how, msg)
			return
		}
		r := rep(dev, uid)
		stm, ok := truth.Messages[msg]
		switch {
		case !ok:
			v.fail(CheckMsgIDUnique, "device %s got msg_id %d by %s, which MySQL does not hold", dev, msg, how)
		case stm.Conv != o.conv || stm.Sender != o.sender || stm.CMID != o.cmid:
			v.fail(CheckMsgIDUnique, "device %s got msg_id %d by %s as conversation %d sender %d client_msg_id %s; MySQL has %d/%d/%s",
				dev, msg, how, o.conv, o.sender, o.cmid, stm.Conv, stm.Sender, stm.CMID)
		case !o.tombstone && o.content != stm.Content:
			v.fail(CheckContent, "device %s got msg_id %d by %s with content %s; MySQL has %s", dev, msg, how, o.content, stm.Content)
		}
		if prev, ok := seenIDs[msg]; ok && (prev.conv != o.conv || prev.sender != o.sender || prev.cmid != o.cmid) {
			v.fail(CheckMsgIDUnique, "msg_id %d seen as %d/%d/%s and as %d/%d/%s", msg, prev.conv, prev.sender, prev.cmid, o.conv, o.sender, o.cmid)
		} else if !ok {
			seenIDs[msg] = o
		}
		if prev, ok := r.msgs[msg]; ok {
			if !prev.tombstone && !o.tombstone && prev.content != o.content {
				v.fail(CheckContent, "device %s saw two contents under msg_id %d: %s and %s", dev, msg, prev.content, o.content)
			}
			if o.tombstone {
				prev.tombstone = true
				r.msgs[msg] = prev
			}
			return
		}
		r.msgs[msg] = o
	}

	var calmStart, calmEnd int64
	steady := map[string]bool{}
	ended := map[string]bool{}
	inbox := map[int64]map[int64]Event{}
	finalLists := map[string]map[int64]Event{}
	inboxDone := map[int64]bool{}
	var pushes []Event
	type ackRef struct {
		dev, cmid string
		user      int64
		msg, conv int64
		sentAt    int64
		// oneDevice: every attempt came from dev, so dev is the
		// sending device the server knows.
		oneDevice bool
	}
	var acks []ackRef

	for _, e := range events {
		if e.Device != "" && e.User != 0 {
			devUser[e.Device] = e.User
		}
		switch e.Kind {
		case KindPhase:
			switch e.Detail {
			case PhaseCalmStart:
				calmStart = e.T
			case PhaseCalmEnd:
				calmEnd = e.T
			}
		case KindFault:
			if !strings.HasPrefix(e.Detail, "restart") && !strings.HasSuffix(e.Detail, " start") {
				s.Faults++
			}
		case KindConnect:
			s.Connects++
		case KindSend:
			k := [2]any{e.User, e.CMID}
			si := sends[k]
			if si == nil {
				si = &sendInfo{user: e.User, device: e.Device, content: canonical(e.Content), ackIDs: map[int64]bool{}, devices: map[string]bool{}, t: e.T}
				sends[k] = si
				s.Sends++
			} else {
				s.Resends++
			}
			si.devices[e.Device] = true
		case KindAck:
			si := sends[[2]any{e.User, e.CMID}]
			if si == nil {
				v.fail(CheckAckConsistent, "device %s got a SEND_ACK for client_msg_id %s it never sent", e.Device, e.CMID)
				continue
			}
			si.acked = true
			si.ackIDs[e.Msg] = true
			si.ackConv = e.Conv
			acks = append(acks, ackRef{dev: e.Device, cmid: e.CMID, user: e.User, msg: e.Msg, conv: e.Conv, sentAt: si.t, oneDevice: len(si.devices) == 1})
			observe(e.Device, e.User, e.Msg, observation{conv: e.Conv, sender: e.User, cmid: e.CMID, content: si.content}, "its own SEND_ACK")
		case KindSendFail:
			si := sends[[2]any{e.User, e.CMID}]
			if si == nil {
				continue
			}
			si.anyErr = true
			if e.Definite {
				si.refused = true
			}
		case KindPush:
			s.Pushes++
			pushes = append(pushes, e)
			observe(e.Device, e.User, e.Msg, observation{conv: e.Conv, sender: e.Sender, cmid: e.CMID, content: canonical(e.Content)}, "push")
		case KindSync:
			s.SyncedMessages++
			observe(e.Device, e.User, e.Msg, observation{conv: e.Conv, sender: e.Sender, cmid: e.CMID, content: canonical(e.Content), tombstone: e.Status == 2}, "sync")
		case KindRecallSeen:
			rep(e.Device, e.User).recalled[e.Msg] = true
		case KindDeleteSeen:
			rep(e.Device, e.User).deleted[e.Msg] = true
		case KindRecall:
			if e.Result == ResultOK {
				s.Recalls++
				if m, ok := truth.Messages[e.Msg]; !ok || m.Status == 1 {
					v.fail(CheckRecallStored, "device %s recalled msg_id %d (answered ok) but MySQL holds it as normal or not at all", e.Device, e.Msg)
				}
			}
		case KindDelete:
			if e.Result == ResultOK {
				s.Deletes++
				if !truth.Deleted[e.User][e.Msg] {
					v.fail(CheckDeleteStored, "user %d deleted msg_id %d (answered ok) but MySQL has no deletion", e.User, e.Msg)
				}
			}
		case KindRead:
			if e.Result == ResultOK {
				s.Reads++
			}
		case KindSteady:
			steady[e.Device] = true
		case KindDeviceEnd:
			if e.Err != "" {
				v.fail(CheckCoverage, "device %s could not finish its final sync: %s", e.Device, e.Err)
				continue
			}
			ended[e.Device] = true
		case KindInbox:
			if inbox[e.User] == nil {
				inbox[e.User] = map[int64]Event{}
			}
			inbox[e.User][e.Conv] = e
		case KindInboxDone:
			if e.Err != "" {
				v.fail(CheckCoverage, "user %d: the final SYNC_INBOX failed: %s", e.User, e.Err)
				continue
			}
			inboxDone[e.User] = true
		case KindFinalList:
			if finalLists[e.Device] == nil {
				finalLists[e.Device] = map[int64]Event{}
			}
			finalLists[e.Device][e.Conv] = e
		}
	}

	// Sends: acked ones stored exactly once under the acked id, refused
	// ones not at all, uncertain ones either way; no row without a send.
	for k, si := range sends {
		rows := byCMID[k]
		switch {
		case si.acked:
			s.Acked++
			if len(si.ackIDs) > 1 {
				v.fail(CheckAckConsistent, "client_msg_id %s of user %d acked under %d msg_ids", k[1], si.user, len(si.ackIDs))
			}
			if len(rows) != 1 {
				v.fail(CheckAckedStoredOnce, "acked client_msg_id %s of user %d is stored %d times", k[1], si.user, len(rows))
				continue
			}
			if !si.ackIDs[rows[0].ID] || rows[0].Conv != si.ackConv {
				v.fail(CheckAckedStoredOnce, "acked client_msg_id %s of user %d: SEND_ACK said msg_id %v conversation %d, MySQL has %d in %d",
					k[1], si.user, keys(si.ackIDs), si.ackConv, rows[0].ID, rows[0].Conv)
			}
			if rows[0].Content != si.content {
				v.fail(CheckContent, "acked msg_id %d stored with content %s, sent %s", rows[0].ID, rows[0].Content, si.content)
			}
		case si.refused:
			s.Refused++
			if len(rows) > 0 {
				v.fail(CheckRefusedNotStored, "client_msg_id %s of user %d was refused but MySQL holds it as msg_id %d", k[1], si.user, rows[0].ID)
			}
		default:
			s.Uncertain++
			if len(rows) > 0 {
				s.UncertainStored++
			}
			if len(rows) > 1 {
				v.fail(CheckAckedStoredOnce, "uncertain client_msg_id %s of user %d is stored %d times", k[1], si.user, len(rows))
			}
		}
	}
	for _, m := range truth.Messages {
		if sends[[2]any{m.Sender, m.CMID}] == nil {
			v.fail(CheckPhantom, "MySQL holds msg_id %d (user %d, client_msg_id %s) that no client sent", m.ID, m.Sender, m.CMID)
		}
	}

	// The sending device never gets its own MESSAGE.
	sentBy := map[int64]string{}
	for _, a := range acks {
		if a.oneDevice && len(sends[[2]any{a.user, a.cmid}].devices) == 1 {
			sentBy[a.msg] = a.dev
		}
	}
	for _, p := range pushes {
		if sentBy[p.Msg] == p.Device {
			v.fail(CheckOwnPush, "device %s got a push of msg_id %d, which it sent itself", p.Device, p.Msg)
		}
	}

	// Members per user, for the final lists.
	convsOf := map[int64][]int64{}
	for cid, ms := range truth.Members {
		for uid := range ms {
			convsOf[uid] = append(convsOf[uid], cid)
		}
	}
	for uid := range convsOf {
		sort.Slice(convsOf[uid], func(i, j int) bool { return convsOf[uid][i] < convsOf[uid][j] })
	}

	// Each device whose final sync finished holds exactly MySQL's
	// messages of each of its user's conversations, in id order.
	devs := make([]string, 0, len(ended))
	for d := range ended {
		devs = append(devs, d)
	}
	sort.Strings(devs)
	for _, dev := range devs {
		uid := devUser[dev]
		r := rep(dev, uid)
		s.DevicesChecked++
		byKey := map[sendKey]int64{}
		have := map[int64][]int64{}
		for id, o := range r.msgs {
			if r.deleted[id] {
				continue
			}
			k := sendKey{o.sender, o.conv, o.cmid}
			if other, ok := byKey[k]; ok {
				v.fail(CheckDuplicate, "device %s holds msg_ids %d and %d for one message (user %d, client_msg_id %s)", dev, other, id, o.sender, o.cmid)
			}
			byKey[k] = id
			if truth.Members[o.conv] == nil || !hasMember(truth.Members[o.conv], uid) {
				v.fail(CheckDeviceList, "device %s of user %d holds msg_id %d of conversation %d, which the user is not in", dev, uid, id, o.conv)
				continue
			}
			have[o.conv] = append(have[o.conv], id)
		}
		for _, cid := range convsOf[uid] {
			want := truth.Visible(uid, cid)
			got := have[cid]
			sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
			if d := diffList(r, want, got); d != "" {
				v.fail(CheckDeviceList, "device %s of user %d, conversation %d: %s", dev, uid, cid, d)
			}
		}
	}

	// Each device's SYNC_MESSAGES pages from 0 of every conversation
	// of its user, at the end: MySQL's messages without the user's
	// deletions, in id order, recalled ones as tombstones.
	for _, dev := range devs {
		uid := devUser[dev]
		for _, cid := range convsOf[uid] {
			want := truth.VisibleList(uid, cid)
			e, ok := finalLists[dev][cid]
			if !ok {
				if len(want) > 0 {
					v.fail(CheckSyncList, "device %s of user %d: no final SYNC_MESSAGES of conversation %d (%d messages)", dev, uid, cid, len(want))
				}
				continue
			}
			if e.Err != "" {
				v.fail(CheckSyncList, "device %s, conversation %d: %s", dev, cid, e.Err)
				continue
			}
			s.SyncListsChecked++
			if d := ListDigest(want); e.Detail != d || e.Conn != len(want) {
				v.fail(CheckSyncList, "device %s, conversation %d: SYNC_MESSAGES from 0 gave %d messages (digest %s), MySQL %d (digest %s)", dev, cid, e.Conn, e.Detail, len(want), d)
			}
		}
	}

	// Each user's conversation list from cursor "0": every conversation
	// with a message, its newest id, preview and unread equal MySQL's.
	users := make([]int64, 0, len(inboxDone))
	for u := range inboxDone {
		users = append(users, u)
	}
	sort.Slice(users, func(i, j int) bool { return users[i] < users[j] })
	for _, uid := range users {
		s.UsersChecked++
		for _, cid := range convsOf[uid] {
			last := truth.ConvLast[cid]
			e, ok := inbox[uid][cid]
			if !ok {
				if last > 0 {
					v.fail(CheckConversationList, "user %d: conversation %d (last msg_id %d) missing from the list", uid, cid, last)
				}
				continue
			}
			if e.Msg != last {
				v.fail(CheckConversationList, "user %d, conversation %d: list says last msg_id %d, MySQL %d", uid, cid, e.Msg, last)
			}
			if want := truth.Unread(uid, cid); e.Unread != want {
				v.fail(CheckUnread, "user %d, conversation %d: unread %d, recomputed from MySQL %d (last_read %d)", uid, cid, e.Unread, want, truth.Members[cid][uid].LastRead)
			}
			if want, recalled := truth.NewestVisible(uid, cid); want != 0 && (e.Preview != want || e.Recalled != recalled) {
				v.fail(CheckConversationList, "user %d, conversation %d: preview msg_id %d recalled %v, MySQL's newest visible %d recalled %v", uid, cid, e.Preview, e.Recalled, want, recalled)
			}
		}
	}

	// Calm phase: with every process up and no fault, every message acked
	// in it reaches every device of its recipients that stayed connected
	// (the sending device excepted) by push.
	if calmStart > 0 && calmEnd > 0 {
		pushed := map[string]map[int64]bool{}
		for _, p := range pushes {
			if pushed[p.Device] == nil {
				pushed[p.Device] = map[int64]bool{}
			}
			pushed[p.Device][p.Msg] = true
		}
		s.CalmSteadyDevices = len(steady)
		steadyDevs := make([]string, 0, len(steady))
		for d := range steady {
			steadyDevs = append(steadyDevs, d)
		}
		sort.Strings(steadyDevs)
		for _, a := range acks {
			if a.sentAt < calmStart || a.sentAt > calmEnd {
				continue
			}
			s.CalmAcked++
			members := truth.Members[a.conv]
			for _, d := range steadyDevs {
				if d == a.dev || !hasMember(members, devUser[d]) {
					continue
				}
				s.CalmPushesExpected++
				if !pushed[d][a.msg] {
					v.fail(CheckCalmPush, "msg_id %d (conversation %d, acked in the calm phase) never pushed to device %s of user %d, connected throughout", a.msg, a.conv, d, devUser[d])
				}
			}
		}
	}

	// A run that checked nothing proves nothing.
	if s.Acked == 0 {
		v.fail(CheckCoverage, "no send was acked")
	}
	if s.DevicesChecked == 0 {
		v.fail(CheckCoverage, "no device finished its final sync")
	}
	if s.UsersChecked == 0 {
		v.fail(CheckCoverage, "no user's conversation list was read at the end")
	}
	return v
}

func hasMember(ms map[int64]Member, uid int64) bool {
	_, ok := ms[uid]
	return ok
}

// diffList compares a device's ids of one conversation with MySQL's
// visible messages and describes the first differences ("" when equal).
func diffList(r *replica, want []StoredMessage, got []int64) string {
	var missing, extra, status []string
	wantIDs := map[int64]StoredMessage{}
	for _, m := range want {
		wantIDs[m.ID] = m
	}
	gotIDs := map[int64]bool{}
	for _, id := range got {
		gotIDs[id] = true
		m, ok := wantIDs[id]
		if !ok {
			extra = append(extra, fmt.Sprint(id))
			continue
		}
		recalled := r.recalled[id] || r.msgs[id].tombstone
		if recalled != (m.Status != 1) {
			status = append(status, fmt.Sprintf("%d recalled=%v MySQL status %d", id, recalled, m.Status))
		}
	}
	for _, m := range want {
		if !gotIDs[m.ID] {
			missing = append(missing, fmt.Sprint(m.ID))
		}
	}
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, fmt.Sprintf("missing %d %v", len(missing), first(missing)))
	}
	if len(extra) > 0 {
		parts = append(parts, fmt.Sprintf("extra (deleted for the user or unknown) %d %v", len(extra), first(extra)))
	}
	if len(status) > 0 {
		parts = append(parts, fmt.Sprintf("recall state differs %d %v", len(status), first(status)))
	}
	return strings.Join(parts, "; ")
}

func first(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}

func keys(m map[int64]bool) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
