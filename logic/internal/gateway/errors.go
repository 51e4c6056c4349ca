package gateway

import (
	"encoding/json"
	"errors"

	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
)

// This file is the gateway's one error table: how a domain error becomes
// the client's answer. The client protocol's codes are pkg/errcode's, so
// an *errcode.Error answers its code and client message as they are (with
// its retry-after hint or its business rejection); any other error answers 50001 with the generic
// message, its text going to the log only. On AUTH, a bad token and a
// refused client address also end the connection (closesAfterAuth).

// failure is the code and the failure envelope answering request rid
// with err.
func failure(rid string, err error) (errcode.Code, []byte) {
	code, _ := errcode.Of(err)
	return code, envelope.FromError(rid, err)
}

// closesAfterAuth reports whether an AUTH that failed with err closes the
// connection: a bad token (the client must get a new one) and a rate
// limit (it comes back after retry_after_ms); other failures leave the
// connection open for another AUTH.
func closesAfterAuth(err error) bool {
	switch code, _ := errcode.Of(err); code {
	case errcode.BadToken, errcode.RateLimited:
		return true
	}
	return false
}

// decode reads a request body into its typed request: this handler is the
// client protocol's adapter, and the domain services never see JSON. A
// malformed body is 40001 with msg.
func decode(body []byte, v any, msg string) error {
	if err := json.Unmarshal(body, v); err != nil {
		return errcode.Wrap(errcode.InvalidArgument, msg, err)
	}
	return nil
}

// cause returns the logged form of err: the *errcode.Error text (code,
// client message and cause), which never carries content or tokens.
func cause(err error) error {
	var e *errcode.Error
	if errors.As(err, &e) {
		return e
	}
	return err
}
