package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// docsHTTPAddr is docs/api.md's development HTTP/JSON address, which the
// docs test swaps for the test cluster's.
const docsHTTPAddr = "127.0.0.1:9010"

// httpCall makes one HTTP/JSON call to logic and returns the status and
// the body.
func httpCall(t *testing.T, addr, key, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxT(t, 30*time.Second), method, "http://"+addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// httpOK makes a call that must answer 200 and decodes it into into.
func httpOK(t *testing.T, addr, method, path, body string, into proto.Message) {
	t.Helper()
	code, b := httpCall(t, addr, framework.APIKey, method, path, body)
	if code != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, code, b)
	}
	if err := protojson.Unmarshal(b, into); err != nil {
		t.Fatalf("%s %s: %v in %s", method, path, err, b)
	}
}

// wantHTTPError checks the one error shape: exactly code and message.
func wantHTTPError(t *testing.T, what string, status int, b []byte, wantStatus, wantCode int) {
	t.Helper()
	var e map[string]any
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("%s: body %q is not JSON", what, b)
	}
	msg, _ := e["message"].(string)
	if status != wantStatus || e["code"] != float64(wantCode) || msg == "" || len(e) != 2 {
		t.Fatalf("%s: %d %s, want %d {code: %d, message}", what, status, b, wantStatus, wantCode)
	}
}

// The business API over HTTP/JSON against the real binaries: a token is
// issued, a message sent reaches the receiving device and its history is
// what gRPC's GetHistory answers; a wrong or missing API key is 401
// (40101), a body that does not parse 400 (40001), an unknown user 404
// (40401), all in the one shape; /openapi.json is served.
func TestHTTPAPISendHistoryAndErrors(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 1})
	addr := c.Logics[0].HTTPAddr
	const ann, ben = 34001, 34002

	var tok logicv1.IssueTokenReply
	httpOK(t, addr, http.MethodPost, "/v1/users/34001/tokens", `{"device_id": "phone", "ttl_seconds": 3600}`, &tok)
	if strings.Count(tok.Token, ".") != 2 || tok.ExpiresAtMs < time.Now().Add(59*time.Minute).UnixMilli() {
		t.Fatalf("IssueToken %+v", &tok)
	}
	benConn := c.Login(t, 0, ben, "phone")

	var sent logicv1.SendMessageReply
	httpOK(t, addr, http.MethodPost, "/v1/messages",
		`{"sender_id": "34001", "to_user_id": 34002, "client_msg_id": "http-1", "message_type": 1, "content": "{\"t\": 1, \"text\": \"over http\"}"}`, &sent)
	if sent.MsgId == 0 || sent.ConversationId == 0 || sent.ClientMsgId != "http-1" {
		t.Fatalf("SendMessage %+v", &sent)
	}
	m, err := framework.NextMessage(benConn, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.MsgID.Int64() != sent.MsgId || m.SenderID.Int64() != ann {
		t.Fatalf("ben got %+v, want %d from %d", m, sent.MsgId, ann)
	}
	// A resend with the same client_msg_id is the stored message.
	var again logicv1.SendMessageReply
	httpOK(t, addr, http.MethodPost, "/v1/messages",
		`{"sender_id": 34001, "to_user_id": 34002, "client_msg_id": "http-1", "message_type": 1, "content": "{\"t\": 1, \"text\": \"over http\"}"}`, &again)
	if again.MsgId != sent.MsgId {
		t.Fatalf("resend got %d, want %d", again.MsgId, sent.MsgId)
	}

	var hist logicv1.GetHistoryReply
	httpOK(t, addr, http.MethodGet, "/v1/users/34002/conversations/"+strconv.FormatInt(sent.ConversationId, 10)+"/messages?limit=50", "", &hist)
	if len(hist.Messages) != 1 || hist.Messages[0].MsgId != sent.MsgId || hist.Messages[0].Content != `{"t":1,"text":"over http"}` {
		t.Fatalf("history %+v", &hist)
	}
	ctx := metadata.AppendToOutgoingContext(ctxT(t, time.Minute), "x-api-key", framework.APIKey)
	grpcHist, err := logicv1.NewApiClient(dialGRPC(t, c.Logics[0].GRPCAddr)).GetHistory(ctx,
		&logicv1.GetHistoryRequest{UserId: ben, ConversationId: sent.ConversationId, Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(grpcHist, &hist) {
		t.Fatalf("HTTP history %v, gRPC history %v", &hist, grpcHist)
	}

	code, b := httpCall(t, addr, "wrong-key", http.MethodGet, "/v1/users/34001", "")
	wantHTTPError(t, "wrong key", code, b, 401, 40101)
	code, b = httpCall(t, addr, "", http.MethodPost, "/v1/messages", `{}`)
	wantHTTPError(t, "no key", code, b, 401, 40101)
	code, b = httpCall(t, addr, framework.APIKey, http.MethodPost, "/v1/messages", `{"sender_id": 34001,`)
	wantHTTPError(t, "invalid JSON", code, b, 400, 40001)
	code, b = httpCall(t, addr, framework.APIKey, http.MethodPost, "/v1/messages", `{"sender_id": true}`)
	wantHTTPError(t, "wrong type", code, b, 400, 40001)
	code, b = httpCall(t, addr, framework.APIKey, http.MethodPost, "/v1/messages", `{"sender_id": 34001, "colour": "red"}`)
	wantHTTPError(t, "unknown field", code, b, 400, 40001)
	code, b = httpCall(t, addr, framework.APIKey, http.MethodPost, "/v1/messages", `{"sender_id": 34001, "to_user_id": 34002}`)
	wantHTTPError(t, "no client_msg_id", code, b, 400, 40001)
	code, b = httpCall(t, addr, framework.APIKey, http.MethodGet, "/v1/users/34999", "")
	wantHTTPError(t, "unknown user", code, b, 404, 40401)

	code, b = httpCall(t, addr, "", http.MethodGet, "/openapi.json", "")
	var doc struct {
		OpenAPI string                     `json:"openapi"`
		Paths   map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); code != 200 || err != nil || !strings.HasPrefix(doc.OpenAPI, "3.") || doc.Paths["/v1/messages"] == nil {
		t.Fatalf("/openapi.json: %d %v %.200s", code, err, b)
	}
}

// routePattern is a regexp for an HTTP rule's path with its {fields} as
// any segment value.
func routePattern(path string) *regexp.Regexp {
	q := regexp.QuoteMeta(path)
	q = regexp.MustCompile(`\\\{[a-z_]+\\\}`).ReplaceAllString(q, `[^/?'" ]+`)
	return regexp.MustCompile(q + `([?'" ]|$)`)
}

// The HTTP/JSON examples of docs/api.md run green: every ```sh curl block,
// with the development address and key replaced by a test cluster's, in
// one bash session, each command exiting 0; and every Api method's route
// appears with its method.
func TestAPIDocsCurlExamples(t *testing.T) {
	t.Parallel()
	blocks := apiDocBlocks(t, "curl")
	if len(blocks) == 0 {
		t.Fatal("docs/api.md has no ```sh curl blocks")
	}
	lines := strings.Split(strings.Join(blocks, "\n"), "\n")
	methods := logicv1.File_logic_v1_api_proto.Services().ByName("Api").Methods()
	for i := 0; i < methods.Len(); i++ {
		m := methods.Get(i)
		verb, path, ok := logicv1.HTTPRoute(m)
		if !ok {
			t.Errorf("%s has no google.api.http option", m.Name())
			continue
		}
		re := routePattern(path)
		found := false
		for _, l := range lines {
			hasVerb := strings.Contains(l, "-X "+verb+" ") || (verb == http.MethodGet && !strings.Contains(l, "-X "))
			if hasVerb && re.MatchString(strings.NewReplacer("$GROUP", "1", "$CONV", "1").Replace(l)) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("docs/api.md has no curl example of %s (%s %s)", m.Name(), verb, path)
		}
	}
	all := strings.Join(lines, "\n")
	if !strings.Contains(all, docsHTTPAddr) || !strings.Contains(all, docsAPIKey) {
		t.Fatalf("docs/api.md curl examples do not use %s and %s", docsHTTPAddr, docsAPIKey)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("curl is needed to check docs/api.md: %v", err)
	}
	c := framework.NewCluster(t, framework.Options{Gates: 1, LogicEnv: docsWebhookEnv})
	conn := c.Login(t, 0, 1001, "phone")
	sendDocsUpstream(t, conn)

	out := runDocBlocks(t, "curl", blocks, docsHTTPAddr, c.Logics[0].HTTPAddr, "echo\n", os.Environ())
	t.Logf("docs/api.md curl examples:\n%s", out)
	if reason := kickReason(t, conn); reason != "revoked" {
		t.Fatalf("kick reason %q after docs/api.md's tokens:revoke", reason)
	}
}
