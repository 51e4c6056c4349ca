package inbox_test

import (
	"encoding/json"
	"fmt"

	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/pkg/protocol"
)

// wire decodes a client request body into its typed request the way the
// gateway adapter does; the tests write bodies as JSON, the services take
// the typed form. A body that does not decode is a mistake in the test.
func wire[T any](b []byte) T {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		panic(fmt.Sprintf("test body %s does not decode into %T: %v", b, v, err))
	}
	return v
}

// sendReq is wire for SEND_MESSAGE bodies.
func sendReq(b []byte) message.SendRequest {
	return message.SendRequestOf(wire[protocol.SendRequest](b))
}
