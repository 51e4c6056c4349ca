package batch

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/sparkim/spark/pkg/rpclimit"
)

// itemSize makes an item its own size, so a test states sizes by value.
func itemSize(v int) int { return v }

func queue(items ...int) chan int {
	q := make(chan int, 128)
	for _, v := range items {
		q <- v
	}
	return q
}

func TestCollect(t *testing.T) {
	lim := Limits{MaxItems: 4, MaxBytes: 100}
	tests := []struct {
		name     string
		first    int
		queued   []int
		lim      Limits
		want     []int
		wantNext int
		wantMore bool
		left     int // items still in q afterwards
	}{
		{name: "lone item goes at once", first: 7, lim: lim, want: []int{7}},
		{name: "drains what is queued, in order", first: 1, queued: []int{2, 3}, lim: lim, want: []int{1, 2, 3}},
		{name: "count bound leaves the rest queued", first: 1, queued: []int{2, 3, 4, 5, 6}, lim: lim, want: []int{1, 2, 3, 4}, left: 2},
		{name: "bytes bound exactly met", first: 50, queued: []int{30, 20}, lim: lim, want: []int{50, 30, 20}},
		{name: "item past the bytes bound is carried over", first: 50, queued: []int{30, 21, 5}, lim: lim, want: []int{50, 30}, wantNext: 21, wantMore: true, left: 1},
		{name: "oversized first item alone", first: 500, queued: []int{1}, lim: lim, want: []int{500}, wantNext: 1, wantMore: true},
		{name: "oversized queued item is carried over", first: 1, queued: []int{500, 2}, lim: lim, want: []int{1}, wantNext: 500, wantMore: true, left: 1},
		{name: "MaxItems 1 never drains", first: 1, queued: []int{2}, lim: Limits{MaxItems: 1, MaxBytes: 100}, want: []int{1}, left: 1},
		{name: "MaxItems 0 counts as 1", first: 1, queued: []int{2}, lim: Limits{MaxBytes: 100}, want: []int{1}, left: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := queue(tc.queued...)
			b, next, more := Collect(nil, tc.first, q, tc.lim, itemSize)
			if !slices.Equal(b, tc.want) || next != tc.wantNext || more != tc.wantMore {
				t.Fatalf("Collect = %v, %d, %v; want %v, %d, %v", b, next, more, tc.want, tc.wantNext, tc.wantMore)
			}
			if len(q) != tc.left {
				t.Fatalf("%d items left queued, want %d", len(q), tc.left)
			}
		})
	}
}

func TestCollectClosedQueue(t *testing.T) {
	q := queue(2)
	close(q)
	b, _, more := Collect(nil, 1, q, Limits{MaxItems: 8, MaxBytes: 100}, itemSize)
	if !slices.Equal(b, []int{1, 2}) || more {
		t.Fatalf("Collect on a closed queue = %v, %v; want [1 2], false", b, more)
	}
}

func TestCollectReusesBuf(t *testing.T) {
	buf := make([]int, 0, 8)
	b, _, _ := Collect(buf, 1, queue(2, 3), Limits{MaxItems: 8, MaxBytes: 100}, itemSize)
	if &b[0] != &buf[:1][0] {
		t.Fatal("a batch that fits buf was allocated anew")
	}
}

func TestSend(t *testing.T) {
	lim := Limits{MaxItems: 3, MaxBytes: 10}
	tests := []struct {
		name   string
		first  int
		queued []int
		want   [][]int
		left   int
	}{
		{name: "lone item is one batch", first: 1, want: [][]int{{1}}},
		{name: "count bound ends the call", first: 1, queued: []int{1, 1, 1, 1}, want: [][]int{{1, 1, 1}}, left: 2},
		{name: "carried items start the next batches", first: 6, queued: []int{5, 4, 3, 2, 1}, want: [][]int{{6}, {5, 4}, {3, 2, 1}}},
		{name: "oversized items each alone, order kept", first: 1, queued: []int{20, 2, 30, 3}, want: [][]int{{1}, {20}, {2}, {30}, {3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := queue(tc.queued...)
			var got [][]int
			_, err := Send(nil, tc.first, q, lim, itemSize, func(b []int) error {
				got = append(got, slices.Clone(b))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("batches %v, want %v", got, tc.want)
			}
			if len(q) != tc.left {
				t.Fatalf("%d items left queued, want %d", len(q), tc.left)
			}
		})
	}
}

func TestSendStopsAtError(t *testing.T) {
	q := queue(20, 2)
	boom := errors.New("boom")
	calls := 0
	_, err := Send(nil, 1, q, Limits{MaxItems: 3, MaxBytes: 10}, itemSize, func([]int) error {
		calls++
		return boom
	})
	if !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("Send = %v after %d calls; want boom after 1", err, calls)
	}
}

// TestStreamBytesWellUnderMessageLimit keeps a full batch far from the
// message size the gate ⇄ logic links accept, should either change.
func TestStreamBytesWellUnderMessageLimit(t *testing.T) {
	if StreamBytes*8 > rpclimit.MaxMessageBytes {
		t.Fatalf("StreamBytes %d is over an eighth of the links' %d-byte message limit", StreamBytes, rpclimit.MaxMessageBytes)
	}
}
