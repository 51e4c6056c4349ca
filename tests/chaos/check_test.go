package chaos

import (
	"slices"
	"testing"
)

const (
	contentA = `{"t":1,"text":"a"}`
	contentB = `{"t":1,"text":"b"}`
)

// scenario is a small history that passes every check: users 1 and 2
// talk in P2P conversation 10, one device each, both connected through
// the calm phase; user 1 has not read, user 2 read up to 100.
func scenario() ([]Event, Truth) {
	tr := NewTruth()
	tr.Messages[100] = StoredMessage{ID: 100, Conv: 10, Sender: 1, CMID: "c1", Content: canonical(contentA), Status: 1}
	tr.Messages[101] = StoredMessage{ID: 101, Conv: 10, Sender: 2, CMID: "c2", Content: canonical(contentB), Status: 1}
	tr.ConvLast[10] = 101
	tr.Members[10] = map[int64]Member{1: {}, 2: {LastRead: 100}}
	ev := []Event{
		{T: 1000, Kind: KindPhase, Detail: PhaseCalmStart},
		{T: 1001, Kind: KindSend, Device: "d1", User: 1, CMID: "c1", Target: "u2", Content: contentA},
		{T: 1002, Kind: KindAck, Device: "d1", User: 1, CMID: "c1", Msg: 100, Conv: 10},
		{T: 1003, Kind: KindPush, Device: "d2", User: 2, Msg: 100, Conv: 10, Sender: 1, CMID: "c1", Content: contentA},
		{T: 1004, Kind: KindSend, Device: "d2", User: 2, CMID: "c2", Target: "u1", Content: contentB},
		{T: 1005, Kind: KindAck, Device: "d2", User: 2, CMID: "c2", Msg: 101, Conv: 10},
		{T: 1006, Kind: KindPush, Device: "d1", User: 1, Msg: 101, Conv: 10, Sender: 2, CMID: "c2", Content: contentB},
		{T: 1900, Kind: KindSteady, Device: "d1", User: 1},
		{T: 1900, Kind: KindSteady, Device: "d2", User: 2},
		{T: 2000, Kind: KindPhase, Detail: PhaseCalmEnd},
		{T: 2001, Kind: KindDeviceEnd, Device: "d1", User: 1},
		{T: 2001, Kind: KindDeviceEnd, Device: "d2", User: 2},
		{T: 2002, Kind: KindInbox, Device: "d1", User: 1, Conv: 10, Msg: 101, Unread: 1, Preview: 101},
		{T: 2002, Kind: KindInboxDone, Device: "d1", User: 1},
		{T: 2003, Kind: KindInbox, Device: "d2", User: 2, Conv: 10, Msg: 101, Unread: 0, Preview: 101},
		{T: 2003, Kind: KindInboxDone, Device: "d2", User: 2},
	}
	return ev, tr
}

// without returns ev minus the events matching drop.
func without(ev []Event, drop func(Event) bool) []Event {
	return slices.DeleteFunc(slices.Clone(ev), drop)
}

// with inserts e before the calm phase's end (with the calm phase's
// time), so it belongs to the run, not the final checks.
func with(ev []Event, e ...Event) []Event {
	i := slices.IndexFunc(ev, func(x Event) bool { return x.Kind == KindPhase && x.Detail == PhaseCalmEnd })
	return slices.Insert(slices.Clone(ev), i, e...)
}

// withServerLists adds, for each device that finished its final sync and
// has no final list of conversation 10 yet, the SYNC_MESSAGES answer a
// correct server gives from tr: the server reads MySQL, so a broken
// truth shows there too.
func withServerLists(ev []Event, tr Truth) []Event {
	has := map[string]bool{}
	for _, e := range ev {
		if e.Kind == KindFinalList {
			has[e.Device] = true
		}
	}
	var add []Event
	for _, e := range ev {
		if e.Kind == KindDeviceEnd && !has[e.Device] {
			want := tr.VisibleList(e.User, 10)
			add = append(add, Event{T: 2001, Kind: KindFinalList, Device: e.Device, User: e.User, Conv: 10, Conn: len(want), Detail: ListDigest(want)})
		}
	}
	return append(ev, add...)
}

func TestCheckFailsExactlyTheBrokenInvariant(t *testing.T) {
	cases := []struct {
		name    string
		breakIt func(ev []Event, tr Truth) ([]Event, Truth)
		want    []string // the checks that must fail; none other may
	}{
		{"a consistent history passes", func(ev []Event, tr Truth) ([]Event, Truth) { return ev, tr }, nil},
		{"an acked message missing from MySQL", func(ev []Event, tr Truth) ([]Event, Truth) {
			delete(tr.Messages, 100)
			return ev, tr
		}, []string{CheckAckedStoredOnce, CheckMsgIDUnique, CheckDeviceList}},
		{"an uncertain send that was not stored passes", func(ev []Event, tr Truth) ([]Event, Truth) {
			return with(ev,
				Event{T: 1500, Kind: KindSend, Device: "d1", User: 1, CMID: "c3", Target: "u2", Content: contentA},
				Event{T: 1501, Kind: KindSendFail, Device: "d1", User: 1, CMID: "c3", Err: "timeout"}), tr
		}, nil},
		{"an uncertain send that was stored must reach every device", func(ev []Event, tr Truth) ([]Event, Truth) {
			tr.Messages[99] = StoredMessage{ID: 99, Conv: 10, Sender: 1, CMID: "c3", Content: canonical(contentA), Status: 1}
			return with(ev,
				Event{T: 900, Kind: KindSend, Device: "d1", User: 1, CMID: "c3", Target: "u2", Content: contentA},
				Event{T: 901, Kind: KindSendFail, Device: "d1", User: 1, CMID: "c3", Err: "connection lost"}), tr
		}, []string{CheckDeviceList}},
		{"a refused send that was stored", func(ev []Event, tr Truth) ([]Event, Truth) {
			tr.Messages[99] = StoredMessage{ID: 99, Conv: 10, Sender: 1, CMID: "c3", Content: canonical(contentA), Status: 1}
			return with(ev,
				Event{T: 900, Kind: KindSend, Device: "d1", User: 1, CMID: "c3", Target: "u2", Content: contentA},
				Event{T: 901, Kind: KindSendFail, Device: "d1", User: 1, CMID: "c3", Definite: true, Err: "40301"},
				Event{T: 902, Kind: KindSync, Device: "d1", User: 1, Msg: 99, Conv: 10, Sender: 1, CMID: "c3", Content: contentA},
				Event{T: 903, Kind: KindSync, Device: "d2", User: 2, Msg: 99, Conv: 10, Sender: 1, CMID: "c3", Content: contentA}), tr
		}, []string{CheckRefusedNotStored}},
		{"a resend acked under a second msg_id", func(ev []Event, tr Truth) ([]Event, Truth) {
			return with(ev,
				Event{T: 1500, Kind: KindSend, Device: "d1", User: 1, CMID: "c1", Target: "u2", Content: contentA},
				Event{T: 1501, Kind: KindAck, Device: "d1", User: 1, CMID: "c1", Msg: 105, Conv: 10}), tr
		}, []string{CheckAckConsistent, CheckMsgIDUnique, CheckDuplicate, CheckDeviceList, CheckCalmPush}},
		{"a row in MySQL no client sent", func(ev []Event, tr Truth) ([]Event, Truth) {
			tr.Messages[50] = StoredMessage{ID: 50, Conv: 10, Sender: 2, CMID: "ghost", Content: canonical(contentB), Status: 1}
			return ev, tr
		}, []string{CheckPhantom, CheckDeviceList, CheckUnread}},
		{"two contents under one msg_id", func(ev []Event, tr Truth) ([]Event, Truth) {
			return with(ev, Event{T: 1500, Kind: KindSync, Device: "d2", User: 2, Msg: 100, Conv: 10, Sender: 1, CMID: "c1", Content: contentB}), tr
		}, []string{CheckContent}},
		{"a message pushed to the device that sent it", func(ev []Event, tr Truth) ([]Event, Truth) {
			return with(ev, Event{T: 1500, Kind: KindPush, Device: "d1", User: 1, Msg: 100, Conv: 10, Sender: 1, CMID: "c1", Content: contentA}), tr
		}, []string{CheckOwnPush}},
		{"a recall that never reached a device", func(ev []Event, tr Truth) ([]Event, Truth) {
			m := tr.Messages[100]
			m.Status = 2
			tr.Messages[100] = m
			ev = with(ev,
				Event{T: 1500, Kind: KindRecall, Device: "d1", User: 1, Conv: 10, Msg: 100, Result: ResultOK},
				Event{T: 1500, Kind: KindRecallSeen, Device: "d1", User: 1, Conv: 10, Msg: 100})
			for i := range ev {
				if ev[i].Kind == KindInbox && ev[i].User == 1 {
					ev[i].Unread = 1
				}
			}
			return ev, tr
		}, []string{CheckDeviceList}},
		{"a recall answered ok but not stored", func(ev []Event, tr Truth) ([]Event, Truth) {
			return with(ev, Event{T: 1500, Kind: KindRecall, Device: "d1", User: 1, Conv: 10, Msg: 100, Result: ResultOK}), tr
		}, []string{CheckRecallStored}},
		{"a deleted message still on a device", func(ev []Event, tr Truth) ([]Event, Truth) {
			tr.Deleted[2] = map[int64]bool{100: true}
			return ev, tr
		}, []string{CheckDeviceList}},
		{"a delete applied everywhere passes", func(ev []Event, tr Truth) ([]Event, Truth) {
			tr.Deleted[1] = map[int64]bool{101: true}
			ev = with(ev,
				Event{T: 1500, Kind: KindDelete, Device: "d1", User: 1, Conv: 10, Msg: 101, Result: ResultOK},
				Event{T: 1500, Kind: KindDeleteSeen, Device: "d1", User: 1, Conv: 10, Msg: 101})
			for i := range ev {
				if ev[i].Kind == KindInbox && ev[i].User == 1 {
					ev[i].Unread, ev[i].Preview = 0, 100
				}
			}
			return ev, tr
		}, nil},
		{"an unread count off by one", func(ev []Event, tr Truth) ([]Event, Truth) {
			for i := range ev {
				if ev[i].Kind == KindInbox && ev[i].User == 1 {
					ev[i].Unread = 0
				}
			}
			return ev, tr
		}, []string{CheckUnread}},
		{"a muted conversation counts no unread", func(ev []Event, tr Truth) ([]Event, Truth) {
			tr.Members[10][1] = Member{Muted: true}
			for i := range ev {
				if ev[i].Kind == KindInbox && ev[i].User == 1 {
					ev[i].Unread = 0
				}
			}
			return ev, tr
		}, nil},
		{"a stale last message in the list", func(ev []Event, tr Truth) ([]Event, Truth) {
			for i := range ev {
				if ev[i].Kind == KindInbox && ev[i].User == 2 {
					ev[i].Msg, ev[i].Preview = 100, 100
				}
			}
			return ev, tr
		}, []string{CheckConversationList}},
		{"a calm-phase message never pushed to a connected device", func(ev []Event, tr Truth) ([]Event, Truth) {
			return without(ev, func(e Event) bool { return e.Kind == KindPush && e.Msg == 101 }), tr
		}, []string{CheckCalmPush, CheckDeviceList}},
		{"a message missing only on a device that was not connected throughout passes the push check", func(ev []Event, tr Truth) ([]Event, Truth) {
			ev = without(ev, func(e Event) bool {
				return (e.Kind == KindPush && e.Msg == 101) || (e.Kind == KindSteady && e.Device == "d1")
			})
			return with(ev, Event{T: 1950, Kind: KindSync, Device: "d1", User: 1, Msg: 101, Conv: 10, Sender: 2, CMID: "c2", Content: contentB}), tr
		}, nil},
		{"a sync answer in the wrong order", func(ev []Event, tr Truth) ([]Event, Truth) {
			l := tr.VisibleList(1, 10)
			l[0], l[1] = l[1], l[0]
			return append(ev, Event{T: 2001, Kind: KindFinalList, Device: "d1", User: 1, Conv: 10, Conn: len(l), Detail: ListDigest(l)}), tr
		}, []string{CheckSyncList}},
		{"a sync answer that still holds a deleted message", func(ev []Event, tr Truth) ([]Event, Truth) {
			l := tr.VisibleList(1, 10)
			tr.Deleted[1] = map[int64]bool{101: true}
			ev = with(ev,
				Event{T: 1500, Kind: KindDelete, Device: "d1", User: 1, Conv: 10, Msg: 101, Result: ResultOK},
				Event{T: 1500, Kind: KindDeleteSeen, Device: "d1", User: 1, Conv: 10, Msg: 101})
			for i := range ev {
				if ev[i].Kind == KindInbox && ev[i].User == 1 {
					ev[i].Unread, ev[i].Preview = 0, 100
				}
			}
			return append(ev, Event{T: 2001, Kind: KindFinalList, Device: "d1", User: 1, Conv: 10, Conn: len(l), Detail: ListDigest(l)}), tr
		}, []string{CheckSyncList}},
		{"a msg_id MySQL does not hold", func(ev []Event, tr Truth) ([]Event, Truth) {
			return with(ev, Event{T: 1500, Kind: KindPush, Device: "d2", User: 2, Msg: 777, Conv: 10, Sender: 1, CMID: "c9", Content: contentA}), tr
		}, []string{CheckMsgIDUnique, CheckDeviceList}},
		{"a device that cannot finish its final sync", func(ev []Event, tr Truth) ([]Event, Truth) {
			return append(ev, Event{T: 2004, Kind: KindDeviceEnd, Device: "d3", User: 1, Err: "client: request timed out"}), tr
		}, []string{CheckCoverage}},
		{"a run that checked nothing", func(ev []Event, tr Truth) ([]Event, Truth) {
			return nil, tr
		}, []string{CheckCoverage, CheckPhantom}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev, tr := scenario()
			ev, tr = tc.breakIt(ev, tr)
			ev = withServerLists(ev, tr)
			v := Check(ev, tr)
			if v.Pass != (len(tc.want) == 0) {
				t.Fatalf("Pass = %v, want %v:\n%s", v.Pass, len(tc.want) == 0, v)
			}
			for _, c := range tc.want {
				if v.Failures[c] == 0 {
					t.Errorf("check %s did not fail:\n%s", c, v)
				}
			}
			for c := range v.Failures {
				if !slices.Contains(tc.want, c) {
					t.Errorf("check %s failed too:\n%s", c, v)
				}
			}
		})
	}
}

func TestTruthUnreadCountsOthersNormalUndeletedMessagesAfterTheReadMark(t *testing.T) {
	tr := NewTruth()
	add := func(id, sender int64, status int) {
		tr.Messages[id] = StoredMessage{ID: id, Conv: 7, Sender: sender, CMID: "m", Status: status}
	}
	add(1, 2, 1)
	add(2, 2, 1)
	add(3, 1, 1) // own
	add(4, 2, 2) // recalled
	add(5, 2, 1) // deleted by user 1
	add(6, 2, 1)
	tr.ConvLast[7] = 6
	tr.Deleted[1] = map[int64]bool{5: true}
	cases := []struct {
		name     string
		lastRead int64
		muted    bool
		want     int64
	}{
		{"nothing read", 0, false, 3},
		{"read up to 2", 2, false, 1},
		{"read everything", 6, false, 0},
		{"muted", 0, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr.Members[7] = map[int64]Member{1: {LastRead: tc.lastRead, Muted: tc.muted}}
			if got := tr.Unread(1, 7); got != tc.want {
				t.Fatalf("Unread = %d, want %d", got, tc.want)
			}
		})
	}
}
