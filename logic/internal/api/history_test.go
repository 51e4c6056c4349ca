package api

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// historyBound never undercounts: a reply of messages at their widest,
// counted as inbox counts a page (each plus one byte), stays within its
// budget plus the reserve.
func TestHistoryBoundIsAnUpperBound(t *testing.T) {
	for _, tt := range []struct {
		name                    string
		contentLen, clientIDLen int
		n                       int
	}{
		{"empty", 2, 1, 3},
		{"short", 20, 8, 200},
		{"longest", 64 << 10, 64, 60},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reply := &logicv1.GetHistoryReply{NextMsgId: math.MinInt64, More: true}
			counted := 0
			for range tt.n {
				reply.Messages = append(reply.Messages, &logicv1.HistoryMessage{
					MsgId: math.MinInt64, ConversationId: math.MinInt64, ConversationType: math.MinInt32,
					SenderId: math.MinInt64, ClientMsgId: strings.Repeat(`"`, tt.clientIDLen), MessageType: math.MinInt32,
					Content: strings.Repeat("x", tt.contentLen), CreatedAtMs: math.MinInt64, Status: math.MinInt32,
					Version: math.MinInt32, EditedAtMs: math.MinInt64, Reactions: widestReactions(),
				})
				counted += historyBound.MessageSize(tt.contentLen, tt.clientIDLen) + 1
			}
			if got := proto.Size(reply); got > counted+historyReserve {
				t.Fatalf("reply of %d bytes, counted %d + reserve %d", got, counted, historyReserve)
			}
		})
	}
	if historyBound.Budget+historyReserve != MaxHistoryBytes {
		t.Fatalf("budget %d + reserve %d is not MaxHistoryBytes", historyBound.Budget, historyReserve)
	}
}
