// Package errcode is the table of error codes carried in the "code" field of
// every response envelope. Codes are strings; "0" is success.
package errcode

import (
	"errors"
	"fmt"
	"time"
)

// Code is a response code.
type Code string

// The codes. The first three digits follow HTTP status semantics.
const (
	OK              Code = "0"
	InvalidArgument Code = "40001"
	BadToken        Code = "40101"
	NotAuthed       Code = "40102"
	Forbidden       Code = "40301"
	Rejected        Code = "40302"
	// LimitReached: a configured cap is reached (the emojis on a message,
	// one user's reactions to it); nothing changed.
	LimitReached Code = "40303"
	NotFound     Code = "40401"
	Conflict     Code = "40901"
	// Duplicate: what the request adds exists already (a reaction the
	// user has); nothing changed.
	Duplicate   Code = "40902"
	TooLarge    Code = "41301"
	RateLimited Code = "42901"
	Internal    Code = "50001"
	Busy        Code = "50301"
)

var messages = map[Code]string{
	OK:              "ok",
	InvalidArgument: "invalid argument",
	BadToken:        "bad or expired token",
	NotAuthed:       "not authenticated",
	Forbidden:       "forbidden",
	Rejected:        "rejected by the business server",
	LimitReached:    "limit reached",
	NotFound:        "not found",
	Conflict:        "conflict",
	Duplicate:       "duplicate",
	TooLarge:        "too large",
	RateLimited:     "rate limited",
	Internal:        "internal error",
	Busy:            "busy, retry with the same client_msg_id",
}

// All lists every code in table order, for documentation and tests.
func All() []Code {
	return []Code{OK, InvalidArgument, BadToken, NotAuthed, Forbidden, Rejected, LimitReached, NotFound, Conflict, Duplicate, TooLarge, RateLimited, Internal, Busy}
}

// Message is the default human-readable text of c.
func (c Code) Message() string {
	if m, ok := messages[c]; ok {
		return m
	}
	return "error"
}

// Error is an error that carries a response code and a client-facing message.
type Error struct {
	Code Code
	Msg  string
	Err  error // cause, for logs only; never shown to the client
	// RetryAfter, when positive, is how long the client should wait before
	// trying again; the failure envelope carries it as data.retry_after_ms.
	RetryAfter time.Duration
	// Rejection, set on a 40302 only, is the business server's own code
	// and reason for refusing a message (the before-send hook); the
	// failure envelope carries them as data.reject_code and
	// data.reject_reason.
	Rejection *Rejection
}

// Rejection is the business server's refusal of a message.
type Rejection struct {
	// Code is the business's own code (a positive number it chose).
	Code int64
	// Reason is the business's text for the user.
	Reason string
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s %s: %v", e.Code, e.Msg, e.Err)
	}
	return string(e.Code) + " " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an *Error with a client-facing message.
func New(c Code, msg string) *Error {
	if msg == "" {
		msg = c.Message()
	}
	return &Error{Code: c, Msg: msg}
}

// Wrap returns an *Error whose cause is err; the client sees only msg.
func Wrap(c Code, msg string, err error) *Error {
	e := New(c, msg)
	e.Err = err
	return e
}

// Limited returns a 42901 *Error telling the client to wait retryAfter.
func Limited(msg string, retryAfter time.Duration) *Error {
	e := New(RateLimited, msg)
	e.RetryAfter = retryAfter
	return e
}

// Reject returns the 40302 of a message the business server refused with
// its code and reason.
func Reject(code int64, reason string) *Error {
	e := New(Rejected, "rejected by the business server: "+reason)
	e.Rejection = &Rejection{Code: code, Reason: reason}
	return e
}

// RejectionOf returns the business's refusal carried by the outermost
// *Error in err's chain, nil when there is none.
func RejectionOf(err error) *Rejection {
	var e *Error
	if errors.As(err, &e) {
		return e.Rejection
	}
	return nil
}

// RetryAfterOf returns the retry-after hint of the outermost *Error in
// err's chain, 0 when there is none.
func RetryAfterOf(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// Of returns the code and client message for any error: the code of the
// outermost *Error in its chain, or Internal.
func Of(err error) (Code, string) {
	if err == nil {
		return OK, OK.Message()
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code, e.Msg
	}
	return Internal, Internal.Message()
}

// Invalid is the 40001 of one request field that fails its check, in the
// form every front door and domain service names fields:
// "invalid argument: <field>: <why>".
func Invalid(field, why string) *Error {
	return New(InvalidArgument, "invalid argument: "+field+": "+why)
}

// Unavailable is the 50301 of a dependency (MySQL, Redis, a peer) that
// failed: the client sees only the retry message, the log sees what was
// being done and why it failed. An empty what wraps err as it is.
func Unavailable(what string, err error) *Error {
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	return Wrap(Busy, "", err)
}
