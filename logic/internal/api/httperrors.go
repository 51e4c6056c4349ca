package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sparkim/spark/pkg/errcode"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail that
// carries an API error's protocol code (its Reason, e.g. "40001") beside
// the gRPC code, so the HTTP/JSON door answers the exact code: the gRPC
// mapping (Code) folds 41301 into INVALID_ARGUMENT and 40102 into
// UNAUTHENTICATED.
const ErrorDomain = "spark.im"

// HTTPStatus is the HTTP status of a protocol error code on the HTTP/JSON
// door, the one table of it (docs/api.md, "HTTP/JSON"); 500 for codes it
// does not know.
func HTTPStatus(c errcode.Code) int {
	switch c {
	case errcode.InvalidArgument:
		return http.StatusBadRequest
	case errcode.BadToken, errcode.NotAuthed:
		return http.StatusUnauthorized
	case errcode.Forbidden, errcode.Rejected, errcode.LimitReached:
		return http.StatusForbidden
	case errcode.NotFound:
		return http.StatusNotFound
	case errcode.Conflict, errcode.Duplicate:
		return http.StatusConflict
	case errcode.TooLarge:
		return http.StatusRequestEntityTooLarge
	case errcode.RateLimited:
		return http.StatusTooManyRequests
	case errcode.Busy:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// fromGRPC is the protocol code of a gRPC code that carries no ErrorInfo
// (an interceptor's refusal, a gateway decode error, a transport error):
// the inverse of Code, taking the first protocol code of each.
func fromGRPC(c codes.Code) errcode.Code {
	switch c {
	case codes.InvalidArgument:
		return errcode.InvalidArgument
	case codes.Unauthenticated:
		return errcode.BadToken
	case codes.PermissionDenied:
		return errcode.Forbidden
	case codes.NotFound:
		return errcode.NotFound
	case codes.FailedPrecondition, codes.AlreadyExists, codes.Aborted:
		return errcode.Conflict
	case codes.ResourceExhausted:
		return errcode.RateLimited
	case codes.Unavailable, codes.DeadlineExceeded:
		return errcode.Busy
	}
	return errcode.Internal
}

// withCode is the status error of a protocol code: the gRPC code Code
// maps it to, the message, and the ErrorInfo detail with the exact code.
func withCode(c errcode.Code, msg string) error {
	return withInfo(c, msg, nil)
}

// The ErrorInfo metadata keys of a 40302: the business server's code and
// reason for refusing the message (the before-send hook).
const (
	MetaRejectCode   = "reject_code"
	MetaRejectReason = "reject_reason"
)

// withRejection is withCode with the business's rejection in the
// ErrorInfo's metadata.
func withRejection(c errcode.Code, msg string, r *errcode.Rejection) error {
	return withInfo(c, msg, map[string]string{
		MetaRejectCode: strconv.FormatInt(r.Code, 10), MetaRejectReason: r.Reason,
	})
}

func withInfo(c errcode.Code, msg string, meta map[string]string) error {
	st := status.New(Code(c), msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: string(c), Domain: ErrorDomain, Metadata: meta}); err == nil {
		st = d
	}
	return st.Err()
}

// infoOf is the API's ErrorInfo detail of err, nil when it has none.
func infoOf(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return info
		}
	}
	return nil
}

// CodeOf is the protocol code of an error the API answered: the
// ErrorInfo detail's when there is one, else the gRPC code's (fromGRPC).
func CodeOf(err error) errcode.Code {
	if info := infoOf(err); info != nil {
		if _, err := strconv.Atoi(info.GetReason()); err == nil {
			return errcode.Code(info.GetReason())
		}
	}
	return fromGRPC(status.Code(err))
}

// ErrorBody is the one error shape of the HTTP/JSON door.
type ErrorBody struct {
	// Code is the protocol code (40001 …) as a number.
	Code int `json:"code"`
	// Message is the client-facing message, as over gRPC.
	Message string `json:"message"`
	// RejectCode and RejectReason are set on a 40302 only: the business
	// server's own code and reason for refusing the message.
	RejectCode   int64  `json:"reject_code,omitempty"`
	RejectReason string `json:"reject_reason,omitempty"`
}

// writeError writes err in the one error shape with its HTTP status.
func writeError(w http.ResponseWriter, err error) {
	c := CodeOf(err)
	msg := status.Convert(err).Message()
	if c == errcode.Internal {
		// Never a cause to the business caller (statusOf logs them).
		msg = errcode.Internal.Message()
	}
	n, _ := strconv.Atoi(string(c))
	body := ErrorBody{Code: n, Message: msg}
	if info := infoOf(err); c == errcode.Rejected && info != nil {
		body.RejectCode, _ = strconv.ParseInt(info.GetMetadata()[MetaRejectCode], 10, 64)
		body.RejectReason = info.GetMetadata()[MetaRejectReason]
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(HTTPStatus(c))
	_ = json.NewEncoder(w).Encode(body)
}

// gatewayError is the gateway's error handler: every error, whichever
// step made it, in the one shape.
func gatewayError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	writeError(w, err)
}

// routingError answers a request that matches no route, or no method of
// its route, in the one shape: 40401 (a 400 of the router: 40001).
func routingError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	if httpStatus == http.StatusBadRequest {
		writeError(w, withCode(errcode.InvalidArgument, "bad request path"))
		return
	}
	writeError(w, withCode(errcode.NotFound, "no route "+r.Method+" "+r.URL.Path))
}
