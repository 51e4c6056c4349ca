package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/textproto"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/rpclimit"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// OpenAPIPath is where the HTTP/JSON door serves its OpenAPI 3 document.
const OpenAPIPath = "/openapi.json"

// NewHTTPHandler returns the HTTP/JSON door of the business API: the REST
// routes of api.proto's google.api.http options, transcoded by
// grpc-gateway into calls on conn, a client of logic's own gRPC listener,
// so every call passes the same interceptors as a gRPC one (API key,
// limits) and reaches the same Server (docs/decisions.md 86). The
// x-api-key header becomes the x-api-key metadata. Every error, a bad
// body's too, is {"code": <protocol code>, "message": …} with the status
// of HTTPStatus. ctx bounds the handler's registration only.
func NewHTTPHandler(ctx context.Context, conn grpc.ClientConnInterface) (http.Handler, error) {
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, jsonBody{&runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}}),
		runtime.WithIncomingHeaderMatcher(func(key string) (string, bool) {
			if textproto.CanonicalMIMEHeaderKey(key) == textproto.CanonicalMIMEHeaderKey(MetadataKey) {
				return MetadataKey, true
			}
			return runtime.DefaultHeaderMatcher(key)
		}),
		runtime.WithErrorHandler(gatewayError),
		runtime.WithRoutingErrorHandler(routingError),
	)
	if err := logicv1.RegisterApiHandlerClient(ctx, mux, logicv1.NewApiClient(conn)); err != nil {
		return nil, fmt.Errorf("register the HTTP/JSON routes: %w", err)
	}
	if err := mux.HandlePath(http.MethodGet, OpenAPIPath, func(w http.ResponseWriter, _ *http.Request, _ map[string]string) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(logicv1.OpenAPI)
	}); err != nil {
		return nil, fmt.Errorf("route %s: %w", OpenAPIPath, err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The gRPC server refuses larger messages anyway; refusing the
		// body here answers 41301 instead of a transport error.
		b, err := io.ReadAll(io.LimitReader(r.Body, rpclimit.MaxMessageBytes+1))
		if err != nil {
			writeError(w, withCode(errcode.InvalidArgument, "request body: "+err.Error()))
			return
		}
		if len(b) > rpclimit.MaxMessageBytes {
			writeError(w, withCode(errcode.TooLarge, fmt.Sprintf("request body larger than %d bytes", rpclimit.MaxMessageBytes)))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		mux.ServeHTTP(w, r)
	}), nil
}

// jsonBody is the gateway's JSON marshaler with a strict decoder: a body
// that is not JSON, has a field of the wrong type or a field the request
// does not have is INVALID_ARGUMENT (400, 40001) with a message that says
// it is the body, never a 500.
type jsonBody struct{ *runtime.JSONPb }

// NewDecoder reads the whole body and unmarshals it with protojson, which
// also refuses data after the JSON value. An empty body is io.EOF: the
// request then has only its path and query fields.
func (m jsonBody) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		b, err := io.ReadAll(r)
		if err != nil {
			return fmt.Errorf("request body: %w", err)
		}
		if len(bytes.TrimSpace(b)) == 0 {
			return io.EOF
		}
		msg, ok := v.(proto.Message)
		if !ok {
			return fmt.Errorf("decode into %T: not a protobuf message", v)
		}
		// The generated handler answers this INVALID_ARGUMENT with the
		// message as it is.
		if err := m.UnmarshalOptions.Unmarshal(b, msg); err != nil {
			return fmt.Errorf("request body: %w", err)
		}
		return nil
	})
}
