package message_test

import (
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/testenv"
)

// sendReq decodes a test's JSON SEND_MESSAGE body into its typed request
// (testenv.SendRequest).

func sendReq(b []byte) message.SendRequest { return testenv.SendRequest(b) }
