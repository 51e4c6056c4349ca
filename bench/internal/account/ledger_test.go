package account

import "testing"

func TestOneMissingOneDuplicated(t *testing.T) {
	l := New()
	for id := int64(1); id <= 1000; id++ {
		l.Acked(id, uint64(id%7))
	}
	for id := int64(1); id <= 1000; id++ {
		if id == 500 {
			continue // lost
		}
		l.Received(id, uint64(id%7))
		if id == 700 {
			l.Received(id, uint64(id%7)) // duplicated
		}
	}
	l.Received(5000, 1) // never acked
	r := l.Check()
	if r.Acked != 1000 || r.Lost != 1 || r.Duplicates != 1 || r.Delivered != 999 || r.Unexpected != 1 || r.Misrouted != 0 {
		t.Fatalf("got %+v", r)
	}
	if len(r.LostIDs) != 1 || r.LostIDs[0] != 500 {
		t.Fatalf("lost ids %v", r.LostIDs)
	}
	if r.OK() {
		t.Fatal("a ledger with a loss reports OK")
	}
	if m := l.Missing(); len(m) != 1 || len(m[500%7]) != 1 {
		t.Fatalf("missing %v", m)
	}
	l.Received(500, 500%7) // recovered by sync
	if r := l.Check(); r.Lost != 0 || r.Duplicates != 1 {
		t.Fatalf("after recovery %+v", r)
	}
}

func TestMisroutedAndReceivedBeforeAck(t *testing.T) {
	l := New()
	l.Received(1, 2) // the push may beat the ack
	l.Acked(1, 2)
	l.Acked(2, 3)
	l.Received(2, 4) // wrong device
	r := l.Check()
	if r.Delivered != 1 || r.Lost != 1 || r.Misrouted != 1 || r.Unexpected != 0 {
		t.Fatalf("got %+v", r)
	}
}

func TestAllDelivered(t *testing.T) {
	l := New()
	for id := int64(1); id <= 100; id++ {
		l.Acked(id, 1)
		l.Received(id, 1)
	}
	if r := l.Check(); !r.OK() || r.Delivered != 100 {
		t.Fatalf("got %+v", r)
	}
}
