package push_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/push"
	"github.com/sparkim/spark/logic/internal/store"
)

// fakeAPNs is an HTTP/2 TLS server speaking the APNs provider API: it
// checks the path, every header a notification must carry and the
// provider token (an ES256 JWT of the team's key, verified with its
// public key), and answers from a script.
type fakeAPNs struct {
	t   *testing.T
	srv *httptest.Server
	pub *ecdsa.PublicKey

	mu     sync.Mutex
	script []apnsReply
	got    []apnsRequest
}

type apnsReply struct {
	status     int
	reason     string
	retryAfter string
}

type apnsRequest struct {
	token, jwt, topic, collapse, apnsID string
	payload                             map[string]any
}

func newFakeAPNs(t *testing.T, pub *ecdsa.PublicKey) *fakeAPNs {
	f := &fakeAPNs{t: t, pub: pub}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.srv.EnableHTTP2 = true
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPNs) serve(w http.ResponseWriter, r *http.Request) {
	fail := func(why string) {
		f.t.Errorf("fake APNs: %s", why)
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"reason":"BadRequest"}`))
	}
	if r.ProtoMajor != 2 {
		fail("request over HTTP/" + strconv.Itoa(r.ProtoMajor) + ", APNs speaks only HTTP/2")
		return
	}
	token, ok := strings.CutPrefix(r.URL.Path, "/3/device/")
	if r.Method != http.MethodPost || !ok {
		fail(r.Method + " " + r.URL.Path)
		return
	}
	jwt, ok := strings.CutPrefix(r.Header.Get("authorization"), "bearer ")
	if !ok || !verifyES256(f.pub, jwt, "KEY123", "TEAM456") {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"reason":"InvalidProviderToken"}`))
		return
	}
	for h, want := range map[string]string{"apns-push-type": "alert", "apns-priority": "10"} {
		if got := r.Header.Get(h); got != want {
			fail(h + " " + got)
			return
		}
	}
	exp, err := strconv.ParseInt(r.Header.Get("apns-expiration"), 10, 64)
	if err != nil || exp < time.Now().Unix() {
		fail("apns-expiration " + r.Header.Get("apns-expiration"))
		return
	}
	if r.Header.Get("apns-topic") == "" || r.Header.Get("apns-collapse-id") == "" || len(r.Header.Get("apns-id")) != 36 {
		fail("missing apns-topic, apns-collapse-id or apns-id")
		return
	}
	var payload map[string]any
	if err := json.NewDecoder(r.Body).Decode(&payload); err != nil || payload["aps"] == nil {
		fail("payload without aps")
		return
	}
	f.mu.Lock()
	f.got = append(f.got, apnsRequest{token: token, jwt: jwt, topic: r.Header.Get("apns-topic"), collapse: r.Header.Get("apns-collapse-id"),
		apnsID: r.Header.Get("apns-id"), payload: payload})
	reply := apnsReply{status: http.StatusOK}
	if len(f.script) > 0 {
		reply, f.script = f.script[0], f.script[1:]
	}
	f.mu.Unlock()
	w.Header().Set("apns-id", r.Header.Get("apns-id"))
	if reply.retryAfter != "" {
		w.Header().Set("Retry-After", reply.retryAfter)
	}
	w.WriteHeader(reply.status)
	if reply.reason != "" {
		_, _ = w.Write([]byte(`{"reason":"` + reply.reason + `"}`))
	}
}

// verifyES256 checks a provider token: header alg ES256 and kid, claim
// iss, iat within the hour, and the signature under pub.
func verifyES256(pub *ecdsa.PublicKey, jwt, kid, iss string) bool {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return false
	}
	var h, c map[string]any
	hb, _ := base64.RawURLEncoding.DecodeString(parts[0])
	cb, _ := base64.RawURLEncoding.DecodeString(parts[1])
	if json.Unmarshal(hb, &h) != nil || json.Unmarshal(cb, &c) != nil {
		return false
	}
	iat, _ := c["iat"].(float64)
	if h["alg"] != "ES256" || h["kid"] != kid || c["iss"] != iss || time.Since(time.Unix(int64(iat), 0)) > time.Hour {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return false
	}
	d := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	return ecdsa.Verify(pub, d[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
}

// apnsKey is a fresh .p8-style key (PKCS #8 PEM) and its public half.
func apnsKey(t *testing.T) ([]byte, *ecdsa.PublicKey) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), &k.PublicKey
}

func newAPNs(t *testing.T, f *fakeAPNs, key []byte) *push.APNs {
	a, err := push.NewAPNs(push.APNsConfig{Key: key, KeyID: "KEY123", TeamID: "TEAM456", Endpoint: f.srv.URL, SandboxHost: f.srv.URL, Client: f.srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func note(platform int) push.Notification {
	return push.Notification{
		Key: "42:7:ios", Token: store.PushToken{UserID: 7, DeviceID: "ios", Platform: platform, Token: apnsTok, Topic: "com.example.chat"},
		Title: "Ann", Body: "hello", Badge: 3, ConversationID: 99, MsgID: 42, SenderID: 8, Expires: time.Now().Add(time.Hour),
	}
}

// Each APNs answer maps onto its result: 200 sent; 400 BadDeviceToken and
// 410 Unregistered a dead token; 429 (with its Retry-After) and 500/503 a
// retry; 403 InvalidProviderToken an auth error; 403
// ExpiredProviderToken a new JWT and one more try.
func TestAPNsAnswersMapOntoResults(t *testing.T) {
	key, pub := apnsKey(t)
	tests := []struct {
		name       string
		script     []apnsReply
		want       push.Result
		retryAfter time.Duration
		requests   int
	}{
		{"200", nil, push.Sent, 0, 1},
		{"400 BadDeviceToken", []apnsReply{{400, "BadDeviceToken", ""}}, push.DeadToken, 0, 1},
		{"400 DeviceTokenNotForTopic", []apnsReply{{400, "DeviceTokenNotForTopic", ""}}, push.DeadToken, 0, 1},
		{"410 Unregistered", []apnsReply{{410, "Unregistered", ""}}, push.DeadToken, 0, 1},
		{"429 TooManyRequests", []apnsReply{{429, "TooManyRequests", "7"}}, push.Retry, 7 * time.Second, 1},
		{"500 InternalServerError", []apnsReply{{500, "InternalServerError", ""}}, push.Retry, 0, 1},
		{"503 ServiceUnavailable", []apnsReply{{503, "ServiceUnavailable", "2"}}, push.Retry, 2 * time.Second, 1},
		{"403 InvalidProviderToken", []apnsReply{{403, "InvalidProviderToken", ""}}, push.AuthError, 0, 1},
		{"403 ExpiredProviderToken, then 200 with a new token", []apnsReply{{403, "ExpiredProviderToken", ""}}, push.Sent, 0, 2},
		{"403 ExpiredProviderToken twice", []apnsReply{{403, "ExpiredProviderToken", ""}, {403, "ExpiredProviderToken", ""}}, push.AuthError, 0, 2},
		{"413 PayloadTooLarge", []apnsReply{{413, "PayloadTooLarge", ""}}, push.Rejected, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPNs(t, pub)
			f.script = tt.script
			ans := newAPNs(t, f, key).Send(context.Background(), note(push.PlatformAPNs))
			if ans.Result != tt.want || ans.RetryAfter != tt.retryAfter {
				t.Fatalf("answer %+v, want %v retry after %v", ans, tt.want, tt.retryAfter)
			}
			if len(f.got) != tt.requests {
				t.Fatalf("%d requests, want %d", len(f.got), tt.requests)
			}
			r := f.got[0]
			if r.token != apnsTok || r.topic != "com.example.chat" || r.collapse != "c99" {
				t.Fatalf("request %+v", r)
			}
			aps := r.payload["aps"].(map[string]any)
			if aps["badge"] != 3.0 || aps["thread-id"] != "c99" || aps["alert"].(map[string]any)["body"] != "hello" {
				t.Fatalf("aps %v", aps)
			}
			if tt.requests == 2 && f.got[0].jwt == f.got[1].jwt {
				t.Fatal("ExpiredProviderToken was retried with the same JWT")
			}
		})
	}
}

// One JWT serves many notifications (Apple throttles a provider that signs
// one per request), and a wrong key is an auth error the fake refuses.
func TestAPNsReusesItsTokenAndAWrongKeyIsAnAuthError(t *testing.T) {
	key, pub := apnsKey(t)
	f := newFakeAPNs(t, pub)
	a := newAPNs(t, f, key)
	for range 3 {
		if ans := a.Send(context.Background(), note(push.PlatformAPNs)); ans.Result != push.Sent {
			t.Fatalf("send: %+v", ans)
		}
	}
	if f.got[0].jwt != f.got[2].jwt {
		t.Fatal("a new provider token per notification")
	}
	other, _ := apnsKey(t)
	if ans := newAPNs(t, f, other).Send(context.Background(), note(push.PlatformAPNs)); ans.Result != push.AuthError || ans.Reason != "InvalidProviderToken" {
		t.Fatalf("wrong key: %+v, want an auth error", ans)
	}
}

// The provider token is signed again once it is 50 minutes old, before
// Apple's hour runs out, and not before.
func TestAPNsRefreshesItsTokenWithinTheHour(t *testing.T) {
	key, pub := apnsKey(t)
	f := newFakeAPNs(t, pub)
	a := newAPNs(t, f, key)
	t0 := time.Now()
	for _, at := range []time.Duration{0, 49 * time.Minute, 51 * time.Minute} {
		push.SetAPNsClock(a, func() time.Time { return t0.Add(at) })
		if ans := a.Send(context.Background(), note(push.PlatformAPNs)); ans.Result != push.Sent {
			t.Fatalf("send at +%v: %+v", at, ans)
		}
	}
	if f.got[0].jwt != f.got[1].jwt {
		t.Fatal("a new token after 49 minutes")
	}
	if f.got[1].jwt == f.got[2].jwt {
		t.Fatal("the same token after 51 minutes")
	}
}
