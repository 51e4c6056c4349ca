package inbox_test

import (
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/testenv"
)

// wire and sendReq decode the tests' JSON bodies into typed requests
// (testenv.Wire).
func wire[T any](b []byte) T { return testenv.Wire[T](b) }

func sendReq(b []byte) message.SendRequest { return testenv.SendRequest(b) }
