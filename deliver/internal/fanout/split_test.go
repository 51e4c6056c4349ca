package fanout

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	gatev1 "github.com/sparkim/spark/proto/gate/v1"
)

// A PushBatch is cut into calls of at most the byte bound, items kept in
// order, and an item larger than the bound goes alone rather than being
// dropped or blocking the rest.
func TestSplitPushBatchBoundsBytesAndKeepsOrder(t *testing.T) {
	item := func(i, body int) *gatev1.PushRequest {
		return &gatev1.PushRequest{Command: uint32(i), Body: make([]byte, body),
			Targets: []*gatev1.Target{{ConnId: uint64(i), UserId: int64(i), DeviceId: "d"}}}
	}
	for _, tc := range []struct {
		name   string
		bodies []int
		max    int
		calls  int
	}{
		{"empty batch is one empty call", nil, 1000, 1},
		{"small items share a call", []int{10, 10, 10}, 1000, 1},
		{"split at the bound", []int{400, 400, 400, 400}, 1000, 2},
		{"an oversized item goes alone", []int{100, 5000, 100}, 1000, 3},
		{"every item alone", []int{900, 900, 900}, 1000, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &gatev1.PushBatchRequest{}
			for i, b := range tc.bodies {
				req.Items = append(req.Items, item(i, b))
			}
			chunks := splitPushBatch(req, tc.max)
			if len(chunks) != tc.calls {
				t.Fatalf("%d calls, want %d", len(chunks), tc.calls)
			}
			var order []uint32
			for _, c := range chunks {
				if n := proto.Size(c); n > tc.max && len(c.Items) > 1 {
					t.Fatalf("a call of %d items is %d bytes, over %d", len(c.Items), n, tc.max)
				}
				for _, it := range c.Items {
					order = append(order, it.Command)
				}
			}
			if fmt.Sprint(order) != fmt.Sprint(seq(len(tc.bodies))) {
				t.Fatalf("items in order %v", order)
			}
		})
	}
}

func seq(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i)
	}
	return out
}
