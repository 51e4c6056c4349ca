package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/pkg/errcode"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// fakeConn answers every call with err (or an empty reply) and records
// the methods and API keys it saw.
type fakeConn struct {
	err     error
	methods []string
	req     proto.Message
}

func (f *fakeConn) Invoke(_ context.Context, method string, args, _ any, _ ...grpc.CallOption) error {
	f.methods = append(f.methods, method)
	f.req, _ = args.(proto.Message)
	return f.err
}

func (f *fakeConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "no streams")
}

func newTestHandler(t *testing.T, conn *fakeConn) http.Handler {
	t.Helper()
	h, err := NewHTTPHandler(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func serve(h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func decodeError(t *testing.T, w *httptest.ResponseRecorder) ErrorBody {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil {
		t.Fatalf("error body %q is not JSON: %v", w.Body.String(), err)
	}
	if len(raw) != 2 || raw["code"] == nil || raw["message"] == nil {
		t.Fatalf("error body %s: want exactly code and message", w.Body.String())
	}
	var e ErrorBody
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %s: %v", w.Body.String(), err)
	}
	return e
}

// Every protocol code, as the domain services return it, reaches the HTTP
// caller as its own code with the status of the table; the gRPC door
// keeps its codes.
func TestHTTPErrorMapping(t *testing.T) {
	tests := []struct {
		code   errcode.Code
		status int
		grpc   codes.Code
	}{
		{errcode.InvalidArgument, 400, codes.InvalidArgument},
		{errcode.BadToken, 401, codes.Unauthenticated},
		{errcode.NotAuthed, 401, codes.Unauthenticated},
		{errcode.Forbidden, 403, codes.PermissionDenied},
		{errcode.NotFound, 404, codes.NotFound},
		{errcode.Conflict, 409, codes.FailedPrecondition},
		{errcode.TooLarge, 413, codes.InvalidArgument},
		{errcode.RateLimited, 429, codes.ResourceExhausted},
		{errcode.Internal, 500, codes.Internal},
		{errcode.Busy, 503, codes.Unavailable},
	}
	s := &Server{log: zap.NewNop()}
	for _, tt := range tests {
		t.Run(string(tt.code), func(t *testing.T) {
			err := s.statusOf("Test", errcode.New(tt.code, "why "+string(tt.code)))
			if got := status.Code(err); got != tt.grpc {
				t.Fatalf("gRPC code %v, want %v", got, tt.grpc)
			}
			h := newTestHandler(t, &fakeConn{err: err})
			w := serve(h, http.MethodGet, "/v1/users/7", "")
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d (%s)", w.Code, tt.status, w.Body.String())
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
			e := decodeError(t, w)
			want, _ := strconv.Atoi(string(tt.code))
			if e.Code != want {
				t.Fatalf("code %d, want %d", e.Code, want)
			}
			wantMsg := "why " + string(tt.code)
			if tt.code == errcode.Internal {
				wantMsg = errcode.Internal.Message()
			}
			if e.Message != wantMsg {
				t.Fatalf("message %q, want %q", e.Message, wantMsg)
			}
		})
	}
}

// Errors that carry no protocol code (an interceptor's refusal, a
// transport error) map from their gRPC code; a cause never leaks.
func TestHTTPErrorFromGRPCCode(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   int
		msg    string
	}{
		{status.Error(codes.Unauthenticated, "missing or wrong x-api-key"), 401, 40101, "missing or wrong x-api-key"},
		{status.Error(codes.ResourceExhausted, "too many"), 429, 42901, "too many"},
		{status.Error(codes.Unavailable, "connection refused"), 503, 50301, "connection refused"},
		{status.Error(codes.Internal, "secret cause"), 500, 50001, errcode.Internal.Message()},
		{status.Error(codes.Unknown, "secret cause"), 500, 50001, errcode.Internal.Message()},
	}
	for _, tt := range tests {
		w := serve(newTestHandler(t, &fakeConn{err: tt.err}), http.MethodGet, "/v1/gates", "")
		e := decodeError(t, w)
		if w.Code != tt.status || e.Code != tt.code || e.Message != tt.msg {
			t.Errorf("%v: got %d %+v, want %d %d %q", tt.err, w.Code, e, tt.status, tt.code, tt.msg)
		}
	}
}

// A body that does not parse is a 400 with 40001 and a message naming the
// body, and the call never reaches the API.
func TestHTTPBadBodies(t *testing.T) {
	tests := []struct {
		name, method, path, body, want string
	}{
		{"invalid JSON", http.MethodPost, "/v1/messages", `{"sender_id": `, "request body"},
		{"not an object", http.MethodPost, "/v1/messages", `[1, 2]`, "request body"},
		{"wrong type", http.MethodPost, "/v1/messages", `{"sender_id": "x1", "to_user_id": "2"}`, "request body"},
		{"wrong type bool", http.MethodPost, "/v1/messages", `{"system": "yes"}`, "request body"},
		{"unknown field", http.MethodPost, "/v1/messages", `{"sender_id": "1", "nope": 1}`, "nope"},
		{"trailing data", http.MethodPost, "/v1/messages", `{"sender_id": "1"} {}`, "request body"},
		{"bad path id", http.MethodGet, "/v1/users/abc", "", "user_id"},
		{"bad query", http.MethodGet, "/v1/users/1/friends?limit=many", "", "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := &fakeConn{}
			w := serve(newTestHandler(t, conn), tt.method, tt.path, tt.body)
			if w.Code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400 (%s)", w.Code, w.Body.String())
			}
			e := decodeError(t, w)
			if e.Code != 40001 || !strings.Contains(e.Message, tt.want) {
				t.Fatalf("got %+v, want 40001 naming %q", e, tt.want)
			}
			if len(conn.methods) != 0 {
				t.Fatalf("bad request reached %v", conn.methods)
			}
		})
	}
}

// A body over the gRPC message limit is 413 / 41301.
func TestHTTPBodyTooLarge(t *testing.T) {
	big := `{"payload": "` + strings.Repeat("x", 9<<20) + `"}`
	w := serve(newTestHandler(t, &fakeConn{}), http.MethodPost, "/v1/broadcast", big)
	if e := decodeError(t, w); w.Code != 413 || e.Code != 41301 {
		t.Fatalf("got %d %+v", w.Code, e)
	}
}

// Path, query and body fields reach the call; an unknown route is 404 in
// the one shape.
func TestHTTPRoutes(t *testing.T) {
	conn := &fakeConn{}
	h := newTestHandler(t, conn)
	if w := serve(h, http.MethodPost, "/v1/messages", `{"sender_id": "1", "to_user_id": 2, "client_msg_id": "c1", "content": "{}"}`); w.Code != 200 {
		t.Fatalf("send: %d %s", w.Code, w.Body.String())
	}
	if got := conn.req.(*logicv1.SendMessageRequest); got.GetSenderId() != 1 || got.GetToUserId() != 2 || got.GetClientMsgId() != "c1" {
		t.Fatalf("send request %v", got)
	}
	if w := serve(h, http.MethodGet, "/v1/users/5/conversations/9/messages?after_msg_id=3&limit=20", ""); w.Code != 200 {
		t.Fatalf("history: %d %s", w.Code, w.Body.String())
	}
	if got := conn.req.(*logicv1.GetHistoryRequest); got.GetUserId() != 5 || got.GetConversationId() != 9 || got.GetAfterMsgId() != 3 || got.GetLimit() != 20 {
		t.Fatalf("history request %v", got)
	}
	want := []string{"/logic.v1.Api/SendMessage", "/logic.v1.Api/GetHistory"}
	if strings.Join(conn.methods, ",") != strings.Join(want, ",") {
		t.Fatalf("methods %v, want %v", conn.methods, want)
	}
	w := serve(h, http.MethodGet, "/v1/nothing", "")
	if e := decodeError(t, w); w.Code != 404 || e.Code != 40401 {
		t.Fatalf("unknown route: %d %+v", w.Code, e)
	}
	w = serve(h, http.MethodDelete, "/v1/messages", "")
	if e := decodeError(t, w); w.Code != 404 || e.Code != 40401 {
		t.Fatalf("wrong method: %d %+v", w.Code, e)
	}
}

// The served OpenAPI document is the generated one; it loads, validates
// as OpenAPI 3, and has every Api method at the route of its
// google.api.http option.
func TestOpenAPIDocument(t *testing.T) {
	w := serve(newTestHandler(t, &fakeConn{}), http.MethodGet, OpenAPIPath, "")
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" || w.Body.String() != string(logicv1.OpenAPI) {
		t.Fatalf("%s: %d %q", OpenAPIPath, w.Code, w.Header().Get("Content-Type"))
	}
	doc, err := openapi3.NewLoader().LoadFromData(w.Body.Bytes())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi %q, want 3.x", doc.OpenAPI)
	}
	svc := logicv1.File_logic_v1_api_proto.Services().ByName("Api")
	methods := svc.Methods()
	if methods.Len() < 30 {
		t.Fatalf("only %d methods", methods.Len())
	}
	for i := 0; i < methods.Len(); i++ {
		m := methods.Get(i)
		verb, path, ok := logicv1.HTTPRoute(m)
		if !ok {
			t.Errorf("%s has no google.api.http option", m.Name())
			continue
		}
		item := doc.Paths.Find(path)
		if item == nil {
			t.Errorf("%s: no path %s in the document", m.Name(), path)
			continue
		}
		op := item.GetOperation(verb)
		if op == nil {
			t.Errorf("%s: no %s %s in the document", m.Name(), verb, path)
			continue
		}
		if op.OperationID != "Api_"+string(m.Name()) {
			t.Errorf("%s %s is %q, want Api_%s", verb, path, op.OperationID, m.Name())
		}
	}
}
