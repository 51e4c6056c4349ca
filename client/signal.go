package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// CmdSignal (32) sends a transient signal (typing, or the application's
// own kind) into a conversation; the same command is its push.
const CmdSignal = protocol.CmdSignal

// Signal sends a signal of kind (protocol.SignalTyping, SignalTypingStop or
// the application's own) with an optional payload (a JSON object, nil for
// none) into the conversation, and returns how many connections of the
// other online devices it was queued for. Signals are never stored: read
// SIGNAL pushes with Pushes / NextPush.
func (c *Conn) Signal(ctx context.Context, conversationID int64, kind string, payload json.RawMessage) (int, error) {
	var out protocol.SignalReply
	req := protocol.SignalRequest{ConversationID: jsonid.ID(conversationID), Kind: kind, Payload: payload}
	if _, err := c.call(ctx, CmdSignal, req, &out); err != nil {
		return 0, fmt.Errorf("client: signal %s into %d: %w", kind, conversationID, err)
	}
	return out.Delivered, nil
}
