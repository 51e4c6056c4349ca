package protocol

import (
	"encoding/json"

	"github.com/sparkim/spark/pkg/jsonid"
)

// Signal kinds the server knows by name; any other kind matching
// SignalKindPattern is the application's own.
const (
	// SignalTyping: the sender is typing in the conversation.
	SignalTyping = "typing"
	// SignalTypingStop: the sender stopped typing.
	SignalTypingStop = "typing_stop"
)

// SignalRequest is the body of SIGNAL (32): a transient signal of Kind,
// with an optional application payload (a JSON object), into the
// conversation.
type SignalRequest struct {
	ConversationID jsonid.ID       `json:"conversation_id"`
	Kind           string          `json:"kind"`
	Payload        json.RawMessage `json:"payload,omitempty"`
}

// SignalReply answers SIGNAL: Delivered counts the device connections the
// push was queued for (0 when nobody else is online).
type SignalReply struct {
	Delivered int `json:"delivered"`
}

// SignalPush is the data of a SIGNAL push.
type SignalPush struct {
	ConversationID jsonid.ID       `json:"conversation_id"`
	SenderID       jsonid.ID       `json:"sender_id"`
	DeviceID       string          `json:"device_id"`
	Kind           string          `json:"kind"`
	Payload        json.RawMessage `json:"payload,omitempty"`
}
