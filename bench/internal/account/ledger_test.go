package account

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// The four classes, each message in exactly one: cutoff at 60 s, grace
// until 75 s.
func TestClassify(t *testing.T) {
	l := New()
	for id := int64(1); id <= 1000; id++ {
		l.Acked(id, uint64(id%7), 100+id%7)
	}
	for id := int64(1); id <= 1000; id++ {
		switch {
		case id <= 600: // in time (the boundary itself is in time)
			l.Pushed(id, uint64(id%7), at(float64(id)/10))
		case id <= 800: // late, within grace (75 s is still within)
			l.Pushed(id, uint64(id%7), at(60).Add(time.Duration(id-600)*75*time.Millisecond))
		case id <= 950: // only by sync
			l.Synced(id, uint64(id%7))
		case id <= 960: // pushed after grace but found by sync: sync only
			l.Pushed(id, uint64(id%7), at(80))
			l.Synced(id, uint64(id%7))
		case id <= 970: // pushed after grace, not in sync: lost
			l.Pushed(id, uint64(id%7), at(90))
		default: // nowhere: lost
		}
	}
	r := l.Classify(at(60), at(75))
	if r.Acked != 1000 || r.InTime != 600 || r.Late != 200 || r.SyncOnly != 160 || r.Lost != 40 || r.AfterGrace != 10 {
		t.Fatalf("got %+v", r)
	}
	if r.InTime+r.Late+r.SyncOnly+r.Lost != r.Acked || r.Delivered() != 960 {
		t.Fatalf("classes do not partition the acks: %+v", r)
	}
	if r.OK() {
		t.Fatal("40 lost reported OK")
	}
	if len(r.LostIDs) != 20 || r.LostIDs[0] != 961 {
		t.Fatalf("lost ids %v", r.LostIDs)
	}
	if r.Synced != 160 || r.AlsoPushed != 10 || r.SyncDuplicates != 0 || r.PushedTwice != 0 || r.Misrouted != 0 {
		t.Fatalf("side counts %+v", r)
	}
}

// What NotPushed hands to the sync check, and what the check then finds.
func TestNotPushedThenSync(t *testing.T) {
	l := New()
	for id := int64(1); id <= 10; id++ {
		l.Acked(id, uint64(id%2), 50+id%2)
	}
	for _, id := range []int64{1, 2, 3, 4} {
		l.Pushed(id, uint64(id%2), at(1))
	}
	l.Pushed(5, 1, at(4)) // after the grace period: still to be checked by sync
	g := l.NotPushed(at(3))
	if len(g) != 2 || g[0].Recipient != 0 || g[0].Conversation != 50 || len(g[0].IDs) != 3 || g[0].IDs[0] != 6 ||
		g[1].Recipient != 1 || g[1].Conversation != 51 || len(g[1].IDs) != 3 || g[1].IDs[0] != 5 || g[1].IDs[2] != 9 {
		t.Fatalf("gaps %+v", g)
	}
	// The check fetches from before the first missing id, so it returns
	// pushed messages too: they are "also pushed", not duplicates.
	for id := int64(3); id <= 10; id++ {
		l.Synced(id, uint64(id%2))
	}
	r := l.Classify(at(2), at(3))
	if !r.OK() || r.InTime != 4 || r.SyncOnly != 6 || r.Lost != 0 || r.AlsoPushed != 3 || r.AfterGrace != 1 || r.SyncDuplicates != 0 {
		t.Fatalf("got %+v", r)
	}
	if n, a := l.PushedCount(); n != 5 || a != 10 {
		t.Fatalf("pushed count %d of %d", n, a)
	}
}

// A push repeating a message the device already fetched by sync is by
// design (the sync scenario's former "duplicates 157"); a message twice in
// the sync answers is a failure; the same push twice is reported only.
func TestPushAfterSyncIsNotADuplicate(t *testing.T) {
	l := New()
	for id := int64(1); id <= 100; id++ {
		l.Acked(id, 9, 1)
		l.Synced(id, 9)
	}
	for id := int64(1); id <= 30; id++ {
		l.Pushed(id, 9, at(5)) // deliver's backlog reaches the device after it synced
	}
	l.Pushed(7, 9, at(6)) // a redelivered job pushes again
	s := l.CheckSync()
	if !s.OK() || s.Synced != 100 || s.Missing != 0 || s.SyncDuplicates != 0 || s.AlsoPushed != 30 || s.PushedTwice != 1 {
		t.Fatalf("got %+v", s)
	}
	r := l.Classify(time.Time{}, time.Time{})
	if !r.OK() || r.PushedTwice != 1 || r.AlsoPushed != 30 || r.Lost != 0 {
		t.Fatalf("classify %+v", r)
	}

	l.Synced(42, 9) // the same message in two sync answers
	if s := l.CheckSync(); s.OK() || s.SyncDuplicates != 1 {
		t.Fatalf("a duplicate within sync answers passes: %+v", s)
	}
	if r := l.Classify(time.Time{}, time.Time{}); r.OK() || r.SyncDuplicates != 1 {
		t.Fatalf("classify passes a sync duplicate: %+v", r)
	}
}

// The sync check is strict: a message only pushed is missing from sync.
func TestCheckSyncMissing(t *testing.T) {
	l := New()
	l.Acked(1, 1, 1)
	l.Acked(2, 1, 1)
	l.Synced(1, 1)
	l.Pushed(2, 1, at(0))
	s := l.CheckSync()
	if s.OK() || s.Missing != 1 || s.MissingIDs[0] != 2 || s.Synced != 1 {
		t.Fatalf("got %+v", s)
	}
}

func TestMisroutedAndReceivedBeforeAck(t *testing.T) {
	l := New()
	l.Pushed(1, 2, at(0)) // the push may beat the ack
	l.Acked(1, 2, 1)
	l.Acked(2, 3, 1)
	l.Pushed(2, 4, at(0)) // wrong device
	l.Synced(2, 5)        // wrong device again, by sync
	l.Pushed(99, 2, at(0))
	l.Synced(98, 2)
	r := l.Classify(at(0), at(0))
	if r.InTime != 1 || r.Lost != 1 || r.Misrouted != 2 || r.Unexpected != 2 || r.OK() {
		t.Fatalf("got %+v", r)
	}
}

func TestAllPushedInTime(t *testing.T) {
	l := New()
	for id := int64(1); id <= 100; id++ {
		l.Acked(id, 1, 1)
		l.Pushed(id, 1, at(1))
	}
	if r := l.Classify(at(1), at(2)); !r.OK() || r.InTime != 100 || r.Delivered() != 100 || len(l.NotPushed(time.Time{})) != 0 {
		t.Fatalf("got %+v", r)
	}
}
