package protocol

import (
	"encoding/json"
	"math"

	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/jsonid"
)

// The size rule (docs/protocol.md §12, decision 66): no frame the server writes may
// exceed max_frame_size, since a client closes on one. A message is
// accepted only if the MESSAGE push carrying it fits; pages of SYNC
// answers stop before the limit, and one message always fits by the send
// rule. The bounds below are exact upper bounds of what Marshal writes,
// computed once from the widest values, so the check needs no encoding.

// PageReserve is room an answer keeps for everything but its list: the
// page's other fields (cursors, ids) and the envelope's brackets.
const PageReserve = 512

var (
	// envelopeOverhead is what envelope.OK adds around its data.
	envelopeOverhead = len(envelope.OK("AAAAAAAAAAA", []byte("{}"))) - len("{}")
	// messageOverhead is a Message's encoding without its content and
	// client_msg_id, every number at its widest.
	messageOverhead = func() int {
		b, err := Marshal(Message{
			MsgID: jsonid.ID(math.MaxInt64), ConversationID: jsonid.ID(math.MaxInt64), ConversationType: 99,
			SenderID: jsonid.ID(math.MaxInt64), MessageType: 99, Content: json.RawMessage(`{}`),
			CreatedAt: math.MaxInt64, Status: 99, Version: math.MaxInt32, EditedAt: math.MaxInt64,
		})
		if err != nil {
			panic(err)
		}
		return len(b) - len(`{}`)
	}()
)

// MessageBound is the most bytes Marshal writes for a Message whose
// content (compact JSON, written verbatim) and client_msg_id (printable
// ASCII; only `"` and `\` take two bytes) have these lengths.
func MessageBound(contentLen, clientMsgIDLen int) int {
	return messageOverhead + contentLen + 2*clientMsgIDLen
}

// PushBound is the most bytes of the whole MESSAGE push frame (header,
// envelope, message) of such a message.
func PushBound(contentLen, clientMsgIDLen int) int {
	return frame.HeaderSize + envelopeOverhead + MessageBound(contentLen, clientMsgIDLen)
}

// MessageFits is the send rule: a message is accepted only if it fits,
// alone, in a SYNC_MESSAGES page of a maxFrame-byte frame. Its MESSAGE
// push, which has no page around it, then fits too, and a page always
// makes progress.
func MessageFits(contentLen, clientMsgIDLen, maxFrame int) bool {
	return MessageBound(contentLen, clientMsgIDLen) <= PageBudget(maxFrame)
}

// PageBudget is how many bytes an answer's list may take so the whole
// frame stays within maxFrame.
func PageBudget(maxFrame int) int {
	return maxFrame - frame.HeaderSize - envelopeOverhead - PageReserve
}
