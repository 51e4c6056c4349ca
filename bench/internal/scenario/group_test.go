package scenario

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sparkim/spark/bench/internal/hist"
)

func TestGroupCMIDRoundTrip(t *testing.T) {
	at := time.Unix(1_700_000_000, 123)
	for _, seq := range []int{0, 1, 99, 123456} {
		cmid := groupCMID(at, seq)
		got, ok := groupSeq(cmid)
		if !ok || got != seq {
			t.Errorf("groupSeq(%q) = %d, %v; want %d", cmid, got, ok, seq)
		}
		if ns, ok := sentAt(cmid); !ok || ns != at.UnixNano() {
			t.Errorf("sentAt(%q) = %d, %v; want the send time", cmid, ns, ok)
		}
	}
}

func TestGroupSeqRejects(t *testing.T) {
	for _, cmid := range []string{
		"",
		"b1700000000000000000-3-7", // a p2p send of traffic
		"b1700000000000000000-p-7", // the p2p baseline
		"x1700000000000000000-g-7", // not a bench id
		"b1700000000000000000-g-",  // no number
		"b1700000000000000000-g--1",
		"b1700000000000000000-g-7x",
	} {
		if n, ok := groupSeq(cmid); ok {
			t.Errorf("groupSeq(%q) = %d, true; want false", cmid, n)
		}
	}
}

// push is one push of a ledger test: send seq to device with msg_id id,
// ms milliseconds after the base time.
type push struct {
	seq, device int
	id          int64
	ms          int
}

func TestGroupLedger(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	// Four devices; send 0 comes from device 0, send 1 from device 2.
	// Both sends are acked at 10 ms with msg_ids 100 and 101.
	all := func(seq int, id int64, sender int, ms ...int) []push {
		var out []push
		k := 0
		for d := 0; d < 4; d++ {
			if d != sender {
				out = append(out, push{seq, d, id, ms[k]})
				k++
			}
		}
		return out
	}
	tests := []struct {
		name    string
		pushes  []push
		unacked bool // send 1 never answered
		want    groupTally
		ok      bool
		lastMs  []int64 // ack → last device per complete message, ms
	}{
		{
			name:   "every device but the sender once",
			pushes: append(all(0, 100, 0, 12, 15, 30), all(1, 101, 2, 11, 20, 14)...),
			want:   groupTally{Sent: 2, Acked: 2, Expected: 6, Reached: 6, Complete: 2},
			ok:     true, lastMs: []int64{10, 20},
		},
		{
			name:   "a device missing",
			pushes: append(all(0, 100, 0, 12, 15, 30), push{1, 0, 101, 11}, push{1, 1, 101, 12}),
			want:   groupTally{Sent: 2, Acked: 2, Expected: 6, Reached: 5, Complete: 1, FirstUnreached: []string{"send 1 (msg 101) device 3"}},
			lastMs: []int64{20},
		},
		{
			name:   "a repeated push is counted, not failed",
			pushes: append(append(all(0, 100, 0, 12, 15, 30), all(1, 101, 2, 11, 20, 14)...), push{0, 1, 100, 40}),
			want:   groupTally{Sent: 2, Acked: 2, Expected: 6, Reached: 6, Complete: 2, Repeated: 1},
			ok:     true, lastMs: []int64{20, 10},
		},
		{
			name:   "a push to the sending device fails",
			pushes: append(append(all(0, 100, 0, 12, 15, 30), all(1, 101, 2, 11, 20, 14)...), push{0, 0, 100, 13}),
			want:   groupTally{Sent: 2, Acked: 2, Expected: 6, Reached: 6, Complete: 2, Echo: 1},
			lastMs: []int64{20, 10},
		},
		{
			name:   "a push under another msg_id fails",
			pushes: append(append(all(0, 100, 0, 12, 15, 30), all(1, 101, 2, 11, 20, 14)...), push{1, 1, 999, 15}),
			want:   groupTally{Sent: 2, Acked: 2, Expected: 6, Reached: 6, Complete: 2, WrongID: 1},
			lastMs: []int64{20, 10},
		},
		{
			name:   "a device outside the group or an unknown send fails",
			pushes: append(append(all(0, 100, 0, 12, 15, 30), all(1, 101, 2, 11, 20, 14)...), push{0, 4, 100, 15}, push{7, 1, 100, 15}),
			want:   groupTally{Sent: 2, Acked: 2, Expected: 6, Reached: 6, Complete: 2, Misroute: 2},
			lastMs: []int64{20, 10},
		},
		{
			name:   "the last push before the ack counts as zero",
			pushes: append(all(0, 100, 0, 2, 3, 4), all(1, 101, 2, 11, 20, 14)...),
			want:   groupTally{Sent: 2, Acked: 2, Expected: 6, Reached: 6, Complete: 2, BeforeAck: 1},
			ok:     true, lastMs: []int64{0, 10},
		},
		{
			name:    "an unanswered send fails",
			pushes:  all(0, 100, 0, 12, 15, 30),
			unacked: true,
			want:    groupTally{Sent: 2, Acked: 1, Failed: 1, Expected: 3, Reached: 3, Complete: 1},
			lastMs:  []int64{20},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newGroupLedger(4, 2)
			l.sent(0, 0, at(0))
			l.sent(1, 2, at(0))
			l.acked(0, 100, at(10))
			if !tt.unacked {
				l.acked(1, 101, at(10))
			}
			for _, p := range tt.pushes {
				l.pushed(p.seq, p.device, p.id, at(p.ms))
			}
			wantWaiting := 0
			if tt.want.Complete < tt.want.Acked {
				wantWaiting = tt.want.Acked - tt.want.Complete
			}
			if w := l.waiting(); w != wantWaiting {
				t.Errorf("waiting = %d, want %d", w, wantWaiting)
			}
			last := hist.New()
			got := l.tally(last)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("tally\n got %+v\nwant %+v", got, tt.want)
			}
			if got.OK() != tt.ok {
				t.Errorf("OK = %v, want %v", got.OK(), tt.ok)
			}
			if n := int(last.Count()); n != len(tt.lastMs) {
				t.Fatalf("%d ack→last samples, want %d", n, len(tt.lastMs))
			}
			if len(tt.lastMs) > 0 {
				wantMax := slices.Max(tt.lastMs) * int64(time.Millisecond)
				// The histogram is exact at its maximum.
				if last.Max() != wantMax {
					t.Errorf("ack→last max %d, want %d", last.Max(), wantMax)
				}
			}
		})
	}
}

func TestGroupTallyShare(t *testing.T) {
	tests := []struct {
		t    groupTally
		want float64
	}{
		{groupTally{}, 0},
		{groupTally{Expected: 4, Reached: 4}, 1},
		{groupTally{Expected: 4, Reached: 3}, 0.75},
	}
	for _, tt := range tests {
		if got := tt.t.Share(); got != tt.want {
			t.Errorf("%+v: share %v, want %v", tt.t, got, tt.want)
		}
	}
}

func TestMemberChunks(t *testing.T) {
	ids := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(i + 1)
		}
		return out
	}
	tests := []struct {
		members, perCall int
		create           int
		adds             []int
	}{
		{1, 500, 1, nil},
		{99, 500, 99, nil},
		{499, 500, 499, nil},
		{500, 500, 499, []int{1}},
		{999, 500, 499, []int{500}},
		{9999, 500, 499, slices.Repeat([]int{500}, 19)},
		{1000, 300, 299, []int{300, 300, 101}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.members), func(t *testing.T) {
			m := ids(tt.members)
			create, adds := memberChunks(m, tt.perCall)
			if len(create) != tt.create {
				t.Errorf("create with %d members, want %d", len(create), tt.create)
			}
			var sizes []int
			all := slices.Clone(create)
			for _, a := range adds {
				sizes = append(sizes, len(a))
				all = append(all, a...)
			}
			if !slices.Equal(sizes, tt.adds) {
				t.Errorf("adds of %v, want %v", sizes, tt.adds)
			}
			if !slices.Equal(all, m) {
				t.Errorf("the chunks do not hold every member once, in order")
			}
		})
	}
}

func TestOnlineCap(t *testing.T) {
	tests := []struct {
		name              string
		want, limit, open int
		cap               int
	}{
		{"all fit", 10004, 20000, 50, 10004},
		{"the limit binds", 30000, 20000, 50, 20000 - 50 - fdReserve},
		{"nothing free", 100, 1000, 10, 0},
		{"exactly the room left", 976, 2048, 48, 976},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := onlineCap(tt.want, tt.limit, tt.open); got != tt.cap {
				t.Errorf("onlineCap(%d, %d, %d) = %d, want %d", tt.want, tt.limit, tt.open, got, tt.cap)
			}
		})
	}
}
