package gateway

import (
	"fmt"
	"testing"

	"github.com/sparkim/spark/logic/internal/ratelimit"
	"github.com/sparkim/spark/pkg/protocol"
)

// Every request command has its rate class in the command table; answers,
// pushes, HEARTBEAT and PUSH_ACK (the gate handles those) and unknown
// commands have none and are refused without any work. AUTH is admitted
// per client address (authenticate), not per device.
func TestCommandRateClasses(t *testing.T) {
	tests := []struct {
		cmd     uint16
		want    ratelimit.Class
		limited bool
		known   bool
	}{
		{protocol.CmdAuth, ratelimit.Auth, false, true},
		{protocol.CmdSendMessage, ratelimit.Send, true, true},
		{protocol.CmdGenerateMsgID, ratelimit.Send, true, true},
		{protocol.CmdSyncInbox, ratelimit.Sync, true, true},
		{protocol.CmdSyncMessages, ratelimit.Sync, true, true},
		{protocol.CmdReadMessage, ratelimit.Edit, true, true},
		{protocol.CmdRecallMessage, ratelimit.Edit, true, true},
		{protocol.CmdDeleteMessage, ratelimit.Edit, true, true},
		{protocol.CmdConversationSettings, ratelimit.Edit, true, true},
		{protocol.CmdRelation, ratelimit.Edit, true, true},
		{protocol.CmdGroup, ratelimit.Edit, true, true},
		{protocol.CmdHeartbeat, 0, false, false},
		{protocol.CmdPushAck, 0, false, false},
		{protocol.CmdSendAck, 0, false, false},
		{999, 0, false, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.cmd), func(t *testing.T) {
			c, known := commands[uint32(tt.cmd)]
			if known != tt.known || c.limited != tt.limited || (known && c.class != tt.want) {
				t.Fatalf("command %d: known %v, class %v, limited %v; want %v, %v, %v", tt.cmd, known, c.class, c.limited, tt.known, tt.want, tt.limited)
			}
		})
	}
	for cmd, c := range commands {
		if c.unauthed != (cmd == uint32(protocol.CmdAuth)) {
			t.Errorf("command %d: unauthed %v; only AUTH is answered without a session", cmd, c.unauthed)
		}
	}
}
