package server

import (
	"testing"
	"time"
)

// A connection remembers the MESSAGE pushes that may notify until their
// PUSH_ACK, at most maxUnacked (the newest kept), and hands the rest to
// the Closed event once.
func TestConnRemembersUnackedPushesUntilPushAck(t *testing.T) {
	tests := []struct {
		name   string
		pushes int
		acks   []uint32
		want   []int64 // msg ids left, oldest first
	}{
		{"none", 0, nil, nil},
		{"all acked", 3, []uint32{1, 2, 3}, nil},
		{"acked out of order", 3, []uint32{2}, []int64{101, 103}},
		{"an ack of an unknown seq changes nothing", 2, []uint32{9}, []int64{101, 102}},
		{"past the bound the oldest go", maxUnacked + 2, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newConn(1, nil, "", time.Now())
			for i := 1; i <= tt.pushes; i++ {
				c.trackPush(uint32(i), int64(100+i), 7)
			}
			for _, a := range tt.acks {
				c.ackPush(a)
			}
			got := c.takeUnacked()
			if tt.pushes == maxUnacked+2 {
				if len(got) != maxUnacked || got[0].GetMsgId() != 103 || got[len(got)-1].GetMsgId() != int64(100+maxUnacked+2) {
					t.Fatalf("%d kept, first %d: want the newest %d", len(got), got[0].GetMsgId(), maxUnacked)
				}
			} else {
				var ids []int64
				for _, u := range got {
					ids = append(ids, u.GetMsgId())
					if u.GetConversationId() != 7 {
						t.Fatalf("conversation %d", u.GetConversationId())
					}
				}
				if len(ids) != len(tt.want) || (len(ids) > 0 && (ids[0] != tt.want[0] || ids[len(ids)-1] != tt.want[len(tt.want)-1])) {
					t.Fatalf("left %v, want %v", ids, tt.want)
				}
			}
			if again := c.takeUnacked(); again != nil {
				t.Fatalf("taken twice: %v", again)
			}
		})
	}
}
