package push_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/push"
)

// fakeGoogle is an OAuth 2 token endpoint (the JWT-bearer grant of a
// service account, the assertion verified with the account's public key)
// and an FCM HTTP v1 endpoint that checks the access token it issued and
// answers from a script, in FCM's error shape.
type fakeGoogle struct {
	t   *testing.T
	srv *httptest.Server
	pub *rsa.PublicKey

	mu         sync.Mutex
	issued     []string
	tokenFails int // token requests to refuse with invalid_grant
	script     []fcmReply
	sends      []map[string]any
}

type fcmReply struct {
	status     int
	code       string // FcmError errorCode
	message    string
	retryAfter string
}

func newFakeGoogle(t *testing.T, pub *rsa.PublicKey) *fakeGoogle {
	g := &fakeGoogle{t: t, pub: pub}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", g.token)
	mux.HandleFunc("POST /v1/projects/spark-test/messages:send", g.send)
	g.srv = httptest.NewUnstartedServer(mux)
	g.srv.EnableHTTP2 = true
	g.srv.StartTLS()
	t.Cleanup(g.srv.Close)
	return g
}

func (g *fakeGoogle) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
		return
	}
	parts := strings.Split(r.PostForm.Get("assertion"), ".")
	ok := len(parts) == 3
	var claims map[string]any
	if ok {
		cb, _ := base64.RawURLEncoding.DecodeString(parts[1])
		sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
		d := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
		ok = json.Unmarshal(cb, &claims) == nil && rsa.VerifyPKCS1v15(g.pub, crypto.SHA256, d[:], sig) == nil &&
			claims["iss"] == "push@spark-test.iam.gserviceaccount.com" && claims["aud"] == g.srv.URL+"/token" &&
			claims["scope"] == "https://www.googleapis.com/auth/firebase.messaging"
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !ok || g.tokenFails > 0 {
		g.tokenFails--
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`))
		return
	}
	tok := fmt.Sprintf("ya29.test-%d", len(g.issued))
	g.issued = append(g.issued, tok)
	w.Header().Set("content-type", "application/json")
	_, _ = fmt.Fprintf(w, `{"access_token":%q,"expires_in":3599,"token_type":"Bearer"}`, tok)
}

func (g *fakeGoogle) send(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w.Header().Set("content-type", "application/json")
	bearer, _ := strings.CutPrefix(r.Header.Get("authorization"), "Bearer ")
	if len(g.issued) == 0 || bearer != g.issued[len(g.issued)-1] {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}`))
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body["message"] == nil {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"code":400,"message":"Invalid JSON payload received.","status":"INVALID_ARGUMENT"}}`))
		return
	}
	g.sends = append(g.sends, body["message"].(map[string]any))
	reply := fcmReply{status: http.StatusOK}
	if len(g.script) > 0 {
		reply, g.script = g.script[0], g.script[1:]
	}
	if reply.status == http.StatusUnauthorized {
		g.issued = append(g.issued, "revoked") // the token in hand is no longer valid
	}
	if reply.retryAfter != "" {
		w.Header().Set("Retry-After", reply.retryAfter)
	}
	w.WriteHeader(reply.status)
	if reply.status == http.StatusOK {
		_, _ = w.Write([]byte(`{"name":"projects/spark-test/messages/0:1"}`))
		return
	}
	status := map[int]string{400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}[reply.status]
	_, _ = fmt.Fprintf(w, `{"error":{"code":%d,"message":%q,"status":%q,"details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":%q}]}}`,
		reply.status, reply.message, status, reply.code)
}

func fcmAccount(t *testing.T, g *fakeGoogle, key *rsa.PrivateKey) push.ServiceAccount {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return push.ServiceAccount{ProjectID: "spark-test", PrivateKeyID: "kid1", ClientEmail: "push@spark-test.iam.gserviceaccount.com",
		PrivateKey: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), TokenURI: g.srv.URL + "/token"}
}

// Each FCM v1 answer maps onto its result: UNREGISTERED (404) and an
// INVALID_ARGUMENT about the token a dead token; another INVALID_ARGUMENT
// a rejection (the token stays); QUOTA_EXCEEDED (429, its Retry-After)
// and UNAVAILABLE (503) a retry; 401 a new access token and one more
// try, twice an auth error; a refused grant an auth error.
func TestFCMAnswersMapOntoResults(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		script     []fcmReply
		tokenFails int
		want       push.Result
		retryAfter time.Duration
		grants     int
	}{
		{"200", nil, 0, push.Sent, 0, 1},
		{"404 UNREGISTERED", []fcmReply{{404, "UNREGISTERED", "Requested entity was not found.", ""}}, 0, push.DeadToken, 0, 1},
		{"400 INVALID_ARGUMENT token", []fcmReply{{400, "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token", ""}}, 0, push.DeadToken, 0, 1},
		{"400 INVALID_ARGUMENT payload", []fcmReply{{400, "INVALID_ARGUMENT", "Invalid value at 'message.android.ttl'", ""}}, 0, push.Rejected, 0, 1},
		{"403 SENDER_ID_MISMATCH", []fcmReply{{403, "SENDER_ID_MISMATCH", "SenderId mismatch", ""}}, 0, push.DeadToken, 0, 1},
		{"429 QUOTA_EXCEEDED", []fcmReply{{429, "QUOTA_EXCEEDED", "Quota exceeded.", "5"}}, 0, push.Retry, 5 * time.Second, 1},
		{"503 UNAVAILABLE", []fcmReply{{503, "UNAVAILABLE", "The service is currently unavailable.", ""}}, 0, push.Retry, 0, 1},
		{"500 INTERNAL", []fcmReply{{500, "INTERNAL", "Internal error.", ""}}, 0, push.Retry, 0, 1},
		{"401 then 200 with a new token", []fcmReply{{401, "", "Request had invalid authentication credentials.", ""}}, 0, push.Sent, 0, 2},
		{"401 twice", []fcmReply{{401, "", "Request had invalid authentication credentials.", ""}, {401, "", "Request had invalid authentication credentials.", ""}}, 0, push.AuthError, 0, 2},
		{"grant refused", nil, 1, push.AuthError, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeGoogle(t, &key.PublicKey)
			g.script, g.tokenFails = tt.script, tt.tokenFails
			f, err := push.NewFCM(fcmAccount(t, g, key), g.srv.URL, g.srv.Client())
			if err != nil {
				t.Fatal(err)
			}
			n := note(push.PlatformFCM)
			n.Token.Token = "fcm-token-1"
			ans := f.Send(context.Background(), n)
			if ans.Result != tt.want || ans.RetryAfter != tt.retryAfter {
				t.Fatalf("answer %+v, want %v retry after %v", ans, tt.want, tt.retryAfter)
			}
			if got := len(g.issued) - strings.Count(strings.Join(g.issued, ","), "revoked"); got != tt.grants {
				t.Fatalf("%d access tokens granted, want %d", got, tt.grants)
			}
			if tt.grants == 0 {
				return
			}
			m := g.sends[0]
			android := m["android"].(map[string]any)
			if m["token"] != "fcm-token-1" || android["collapse_key"] != "c99" || m["notification"].(map[string]any)["body"] != "hello" ||
				m["data"].(map[string]any)["msg_id"] != "42" {
				t.Fatalf("message %v", m)
			}
		})
	}
}

// The access token is reused until it nears expiry: ten notifications
// cost one grant.
func TestFCMCachesItsAccessToken(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	g := newFakeGoogle(t, &key.PublicKey)
	f, err := push.NewFCM(fcmAccount(t, g, key), g.srv.URL, g.srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if ans := f.Send(context.Background(), note(push.PlatformFCM)); ans.Result != push.Sent {
			t.Fatalf("send: %+v", ans)
		}
	}
	if len(g.issued) != 1 {
		t.Fatalf("%d grants for 10 notifications", len(g.issued))
	}
}
