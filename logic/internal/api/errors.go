package api

import (
	"errors"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/sparkim/spark/pkg/errcode"
)

// Code returns the gRPC code the API answers for a protocol error code
// (docs/decisions.md 45); INTERNAL for codes it does not know. 40901 (a
// conflict with the current state: a full or dissolved group, a
// client_msg_id reused with other content) is FAILED_PRECONDITION:
// retrying the same call will not succeed until the state changes, which
// is what that code says; ALREADY_EXISTS would claim something was being
// created.
func Code(c errcode.Code) codes.Code {
	switch c {
	case errcode.InvalidArgument, errcode.TooLarge:
		return codes.InvalidArgument
	case errcode.BadToken, errcode.NotAuthed:
		return codes.Unauthenticated
	case errcode.Forbidden, errcode.Rejected, errcode.LimitReached:
		return codes.PermissionDenied
	case errcode.NotFound:
		return codes.NotFound
	case errcode.Conflict:
		return codes.FailedPrecondition
	case errcode.Duplicate:
		return codes.AlreadyExists
	case errcode.RateLimited:
		return codes.ResourceExhausted
	case errcode.Busy:
		return codes.Unavailable
	}
	return codes.Internal
}

// statusOf turns a domain error into a gRPC status error: an
// *errcode.Error keeps its client-facing message under the mapped code,
// with the exact protocol code in an ErrorInfo detail (withCode);
// anything else is INTERNAL with a generic message. Causes go to the log
// only (never to the business caller), for INTERNAL and UNAVAILABLE.
func (s *Server) statusOf(op string, err error) error {
	if err == nil {
		return nil
	}
	var e *errcode.Error
	if !errors.As(err, &e) {
		s.log.Error("api call failed", zap.String("rpc", op), zap.Error(err))
		return withCode(errcode.Internal, errcode.Internal.Message())
	}
	c := Code(e.Code)
	if c == codes.Internal || c == codes.Unavailable {
		s.log.Warn("api call failed", zap.String("rpc", op), zap.Error(err))
	}
	if e.Rejection != nil {
		return withRejection(e.Code, e.Msg, e.Rejection)
	}
	return withCode(e.Code, e.Msg)
}

// invalid is the INVALID_ARGUMENT of an argument-shape check, naming the
// request field as the domain services name theirs (errcode.Invalid).
func invalid(field, why string) error {
	return withCode(errcode.InvalidArgument, errcode.Invalid(field, why).Msg)
}

// positive checks that an id field is set.
func positive(field string, v int64) error {
	if v <= 0 {
		return invalid(field, "must be a positive id")
	}
	return nil
}

// operator checks an operator_id: a user id, or 0 for the system.
func operator(v int64) error {
	if v < 0 {
		return invalid("operator_id", "must be a user id or 0 (the system)")
	}
	return nil
}

// first returns the first non-nil error.
func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
