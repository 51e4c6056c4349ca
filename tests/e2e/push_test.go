package e2e

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/stdwebhook"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// pushFakeAPNs is an APNs provider endpoint over HTTP/2 and TLS: it
// verifies the ES256 provider token with the team key's public half and
// the headers Apple requires, records every notification it accepts
// (repeats included, so a double is seen), and answers a token listed in
// gone 410 Unregistered.
type pushFakeAPNs struct {
	t    *testing.T
	srv  *httptest.Server
	pub  *ecdsa.PublicKey
	mu   sync.Mutex
	got  []apnsNote
	gone map[string]bool
	wake chan struct{}
}

type apnsNote struct {
	token, apnsID, collapse, msgID, body string
	badge                                float64
}

func (f *pushFakeAPNs) serve(w http.ResponseWriter, r *http.Request) {
	token, _ := strings.CutPrefix(r.URL.Path, "/3/device/")
	jwt, _ := strings.CutPrefix(r.Header.Get("authorization"), "bearer ")
	if r.ProtoMajor != 2 || !verifyAPNsJWT(f.pub, jwt) {
		f.t.Errorf("fake APNs: HTTP/%d, provider token valid: %v", r.ProtoMajor, verifyAPNsJWT(f.pub, jwt))
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"reason":"InvalidProviderToken"}`))
		return
	}
	if r.Header.Get("apns-topic") != "com.example.chat" || r.Header.Get("apns-push-type") != "alert" || r.Header.Get("apns-priority") != "10" ||
		r.Header.Get("apns-expiration") == "" || r.Header.Get("apns-collapse-id") == "" {
		f.t.Errorf("fake APNs: headers %v", r.Header)
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"reason":"BadRequest"}`))
		return
	}
	var p struct {
		APS struct {
			Alert struct{ Body string } `json:"alert"`
			Badge float64               `json:"badge"`
		} `json:"aps"`
		MsgID string `json:"msg_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"reason":"PayloadEmpty"}`))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone[token] {
		w.WriteHeader(http.StatusGone)
		_, _ = w.Write([]byte(`{"reason":"Unregistered","timestamp":1765000000000}`))
		return
	}
	f.got = append(f.got, apnsNote{token: token, apnsID: r.Header.Get("apns-id"), collapse: r.Header.Get("apns-collapse-id"),
		msgID: p.MsgID, body: p.APS.Alert.Body, badge: p.APS.Badge})
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func verifyAPNsJWT(pub *ecdsa.PublicKey, jwt string) bool {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return false
	}
	hb, _ := base64.RawURLEncoding.DecodeString(parts[0])
	cb, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var h, c map[string]any
	if json.Unmarshal(hb, &h) != nil || json.Unmarshal(cb, &c) != nil || h["alg"] != "ES256" || h["kid"] != "KEYID12345" || c["iss"] != "TEAMID6789" {
		return false
	}
	sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
	d := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	return len(sig) == 64 && ecdsa.Verify(pub, d[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
}

// notes returns the notifications accepted for token.
func (f *pushFakeAPNs) notes(token string) []apnsNote {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []apnsNote
	for _, n := range f.got {
		if n.token == token {
			out = append(out, n)
		}
	}
	return out
}

// pushFakeGateway is a business push gateway: it verifies the Standard
// Webhooks signature and records every delivery by webhook-id, repeats
// included; a token listed in fail gets that many 503s (with Retry-After)
// before it is accepted.
type pushFakeGateway struct {
	t      *testing.T
	srv    *httptest.Server
	secret stdwebhook.Secret
	mu     sync.Mutex
	fail   map[string]int
	tries  map[string]int // webhook-id → attempts
	ok     map[string]int // webhook-id → accepted
	tokens map[string]string
	wake   chan struct{}
}

func (g *pushFakeGateway) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := stdwebhook.Verify(r.Header, body, time.Now(), g.secret); err != nil {
		g.t.Errorf("fake gateway: %v", err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ev struct {
		Data struct {
			Token string `json:"token"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &ev)
	id := r.Header.Get(stdwebhook.HeaderID)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tries[id]++
	g.tokens[id] = ev.Data.Token
	if g.fail[ev.Data.Token] > 0 {
		g.fail[ev.Data.Token]--
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	g.ok[id]++
	w.WriteHeader(http.StatusNoContent)
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// accepted returns webhook-id → (attempts, accepted) for token.
func (g *pushFakeGateway) accepted(token string) map[string][2]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string][2]int{}
	for id, tok := range g.tokens {
		if tok == token {
			out[id] = [2]int{g.tries[id], g.ok[id]}
		}
	}
	return out
}

// pushFakeFCM is Google's OAuth token endpoint (the JWT-bearer grant of
// a service account, the RS256 assertion verified with the account's
// public key) and the FCM HTTP v1 send endpoint (the access token it
// issued checked), recording every message it accepts; a token listed in
// unregistered is answered 404 UNREGISTERED.
type pushFakeFCM struct {
	t            *testing.T
	srv          *httptest.Server
	pub          *rsa.PublicKey
	mu           sync.Mutex
	issued       map[string]bool
	got          []map[string]any
	unregistered map[string]bool
	wake         chan struct{}
}

func (f *pushFakeFCM) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("content-type", "application/json")
	switch r.URL.Path {
	case "/token":
		_ = r.ParseForm()
		parts := strings.Split(r.PostForm.Get("assertion"), ".")
		if r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" || len(parts) != 3 {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
		sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
		d := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
		if err := rsa.VerifyPKCS1v15(f.pub, crypto.SHA256, d[:], sig); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`))
			return
		}
		tok := fmt.Sprintf("ya29.e2e-%d", len(f.issued))
		f.issued[tok] = true
		_, _ = fmt.Fprintf(w, `{"access_token":%q,"expires_in":3599,"token_type":"Bearer"}`, tok)
	case "/v1/projects/spark-e2e/messages:send":
		bearer, _ := strings.CutPrefix(r.Header.Get("authorization"), "Bearer ")
		if !f.issued[bearer] {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}`))
			return
		}
		var body struct {
			Message map[string]any `json:"message"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Message == nil {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"code":400,"message":"Invalid JSON payload received.","status":"INVALID_ARGUMENT"}}`))
			return
		}
		if f.unregistered[fmt.Sprint(body.Message["token"])] {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"code":404,"message":"Requested entity was not found.","status":"NOT_FOUND","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}`))
			return
		}
		f.got = append(f.got, body.Message)
		_, _ = w.Write([]byte(`{"name":"projects/spark-e2e/messages/0:1"}`))
		select {
		case f.wake <- struct{}{}:
		default:
		}
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// messages returns the accepted messages for token.
func (f *pushFakeFCM) messages(token string) []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []map[string]any
	for _, m := range f.got {
		if m["token"] == token {
			out = append(out, m)
		}
	}
	return out
}

// waitFor polls cond until it holds or d passes, naming what it waited for.
func waitFor(t *testing.T, what string, d time.Duration, wake <-chan struct{}, cond func() bool) {
	t.Helper()
	deadline := time.After(d)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s", d, what)
		case <-wake:
		case <-tick.C:
		}
	}
}

const (
	pushAPNsToken = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
	pushDeadToken = "deadbeef00112233445566778899aabbccddeeff00112233445566778899aabb"
)

// Offline push end to end, on one cluster with the real binaries, a fake
// APNs (HTTP/2, TLS, the provider JWT checked), a fake FCM with its OAuth
// token endpoint (the service account's assertion checked) and a fake
// push gateway (signatures checked): an offline device gets exactly one notification
// per message and a device online none; a muted conversation and a
// no_offline_push message none; a device whose connection went away
// before its PUSH_ACK one; a dead token is removed from MySQL; 503s are
// retried; a kill -9 of the pushing logic loses and doubles nothing.
func TestOfflinePushReachesOfflineDevicesOnceThroughAPNsFCMAndAGateway(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "AuthKey.p8")
	writeFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	apns := &pushFakeAPNs{t: t, pub: &key.PublicKey, gone: map[string]bool{pushDeadToken: true}, wake: make(chan struct{}, 1)}
	apns.srv = httptest.NewUnstartedServer(http.HandlerFunc(apns.serve))
	apns.srv.EnableHTTP2 = true
	apns.srv.StartTLS()
	t.Cleanup(apns.srv.Close)
	secret, err := stdwebhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	gw := &pushFakeGateway{t: t, secret: secret, fail: map[string]int{"jp-retry": 2}, tries: map[string]int{}, ok: map[string]int{},
		tokens: map[string]string{}, wake: make(chan struct{}, 1)}
	gw.srv = httptest.NewTLSServer(http.HandlerFunc(gw.serve))
	t.Cleanup(gw.srv.Close)
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	fcm := &pushFakeFCM{t: t, pub: &rk.PublicKey, issued: map[string]bool{}, unregistered: map[string]bool{"fcm-gone": true}, wake: make(chan struct{}, 1)}
	fcm.srv = httptest.NewTLSServer(http.HandlerFunc(fcm.serve))
	t.Cleanup(fcm.srv.Close)
	rder, err := x509.MarshalPKCS8PrivateKey(rk)
	if err != nil {
		t.Fatal(err)
	}
	account, err := json.Marshal(map[string]string{"type": "service_account", "project_id": "spark-e2e", "private_key_id": "k1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: rder})),
		"client_email": "push@spark-e2e.iam.gserviceaccount.com", "token_uri": fcm.srv.URL + "/token"})
	if err != nil {
		t.Fatal(err)
	}
	accountFile := filepath.Join(dir, "service-account.json")
	writeFile(t, accountFile, account)
	secretFile, caFile := filepath.Join(dir, "gateway.secret"), filepath.Join(dir, "ca.pem")
	writeFile(t, secretFile, []byte(secret.String()+"\n"))
	// httptest's servers share one certificate: trusting it trusts both.
	writeFile(t, caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: apns.srv.Certificate().Raw}))

	env := []string{
		"IM_PUSH_ENABLED=true", "IM_PUSH_PARTITIONS=1", "IM_PUSH_COLLAPSE_INTERVAL=1ms",
		"IM_PUSH_CLAIM_IDLE=3s", "IM_PUSH_SEND_TIMEOUT=1s", "IM_PUSH_MAX_ATTEMPTS=4",
		"IM_PUSH_CA_FILE=" + caFile,
		"IM_PUSH_APNS_KEY_FILE=" + keyFile, "IM_PUSH_APNS_KEY_ID=KEYID12345", "IM_PUSH_APNS_TEAM_ID=TEAMID6789",
		"IM_PUSH_APNS_ENDPOINT=" + apns.srv.URL, "IM_PUSH_APNS_SANDBOX_ENDPOINT=" + apns.srv.URL,
		"IM_PUSH_GATEWAYS=jpush=" + gw.srv.URL + "/spark", "IM_PUSH_GATEWAY_SECRET_FILE=" + secretFile,
		"IM_PUSH_FCM_CREDENTIALS_FILE=" + accountFile, "IM_PUSH_FCM_ENDPOINT=" + fcm.srv.URL,
	}
	c := framework.NewCluster(t, framework.Options{Gates: 1, Logics: 1, Delivers: 1, Env: env})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	api, actx := apiClient(t, c, ctx)

	// register signs a device in, registers its token over PUSH_SETTINGS
	// and, unless it stays, signs it out again: it is then offline.
	register := func(uid int64, dev string, tok client.PushToken, stay bool) *client.Conn {
		t.Helper()
		conn := c.Login(t, 0, uid, dev)
		if err := conn.RegisterPushToken(ctx, tok); err != nil {
			t.Fatalf("register %d/%s: %v", uid, dev, err)
		}
		if !stay {
			_ = conn.Close()
		}
		return conn
	}
	register(2001, "ios", client.PushToken{Platform: "apns", Token: pushAPNsToken, Topic: "com.example.chat"}, false)
	register(2003, "android", client.PushToken{Platform: "gateway", Token: "jp-retry", Gateway: "jpush"}, false)
	register(2004, "ios", client.PushToken{Platform: "apns", Token: pushDeadToken, Topic: "com.example.chat", Sandbox: true}, false)
	register(2005, "android", client.PushToken{Platform: "fcm", Token: "fcm-ok"}, false)
	register(2006, "android", client.PushToken{Platform: "fcm", Token: "fcm-gone"}, false)
	online := register(2002, "phone", client.PushToken{Platform: "gateway", Token: "jp-online", Gateway: "jpush"}, true)
	register(2002, "pad", client.PushToken{Platform: "gateway", Token: "jp-pad", Gateway: "jpush"}, false)
	sender := c.Login(t, 0, 1001, "phone")
	conv := map[int64]int64{} // peer → conversation id
	send := func(to int64, text string) int64 {
		t.Helper()
		ack, err := sender.SendText(ctx, to, text)
		if err != nil {
			t.Fatalf("send to %d: %v", to, err)
		}
		conv[to] = ack.ConversationID.Int64()
		return ack.MsgID.Int64()
	}

	t.Run("an offline device gets one notification per message", func(t *testing.T) {
		ids := []int64{send(2001, "one"), send(2001, "two"), send(2001, "three")}
		waitFor(t, "3 APNs notifications for 2001", 20*time.Second, apns.wake, func() bool { return len(apns.notes(pushAPNsToken)) >= 3 })
		notes := apns.notes(pushAPNsToken)
		for i, n := range notes {
			if n.msgID != fmt.Sprint(ids[i]) || n.body != []string{"one", "two", "three"}[i] || n.collapse == "" {
				t.Fatalf("notification %d: %+v, want msg %d", i, n, ids[i])
			}
		}
		if notes[2].badge != 3 {
			t.Fatalf("badge %v after 3 unread, want 3", notes[2].badge)
		}
	})

	t.Run("FCM: one message with the sender only, as the user chose; an unregistered token removed", func(t *testing.T) {
		prefs := c.Login(t, 0, 2005, "web")
		if p, err := prefs.PushPreview(ctx, "sender"); err != nil || p != "sender" {
			t.Fatalf("set preview: %q %v", p, err)
		}
		_ = prefs.Close()
		id := send(2005, "secret plans")
		send(2006, "hello?")
		waitFor(t, "the FCM message for 2005", 20*time.Second, fcm.wake, func() bool { return len(fcm.messages("fcm-ok")) == 1 })
		m := fcm.messages("fcm-ok")[0]
		n, _ := m["notification"].(map[string]any)
		data, _ := m["data"].(map[string]any)
		if n["body"] != "New message" || data["msg_id"] != fmt.Sprint(id) {
			t.Fatalf("FCM message %v: want the body hidden and msg_id %d", m, id)
		}
		waitFor(t, "2006's token removed after UNREGISTERED", 20*time.Second, nil, func() bool {
			return c.CountRows("SELECT COUNT(*) FROM t_push_tokens WHERE user_id = ?", 2006) == 0
		})
	})

	t.Run("an online device gets none, its offline sibling one", func(t *testing.T) {
		id := send(2002, "are you there")
		if _, err := framework.NextMessage(online, 10*time.Second); err != nil {
			t.Fatalf("online device: %v", err)
		}
		waitFor(t, "the gateway notification of 2002's pad", 20*time.Second, gw.wake, func() bool {
			n, ok := gw.accepted("jp-pad")["push_"+fmt.Sprint(id)+":2002:pad"]
			return ok && n[1] == 1
		})
		if n := len(gw.accepted("jp-online")); n != 0 {
			t.Fatalf("the online device got %d notifications for msg %d", n, id)
		}
	})

	t.Run("a muted conversation and a no_offline_push message get none", func(t *testing.T) {
		web := c.Login(t, 0, 2001, "web")
		cid := conv[2001]
		yes, no := true, false
		if err := web.SetConversation(ctx, cid, &yes, nil); err != nil {
			t.Fatal(err)
		}
		_ = web.Close()
		muted := send(2001, "while muted")
		web = c.Login(t, 0, 2001, "web")
		if err := web.SetConversation(ctx, cid, &no, nil); err != nil {
			t.Fatal(err)
		}
		_ = web.Close()
		quiet, err := api.SendMessage(actx, &logicv1.SendMessageRequest{SenderId: 1001, ToUserId: 2001, ClientMsgId: "quiet-1", MessageType: 1,
			Content: `{"t":1,"text":"quiet"}`, NoOfflinePush: true})
		if err != nil {
			t.Fatal(err)
		}
		after := send(2001, "after")
		// One conversation, one push stream: the later message's
		// notification arriving means the earlier ones were decided.
		waitFor(t, "the notification of the message after the muted and quiet ones", 20*time.Second, apns.wake, func() bool {
			for _, n := range apns.notes(pushAPNsToken) {
				if n.msgID == fmt.Sprint(after) {
					return true
				}
			}
			return false
		})
		for _, n := range apns.notes(pushAPNsToken) {
			if n.msgID == fmt.Sprint(muted) || n.msgID == fmt.Sprint(quiet.MsgId) {
				t.Fatalf("notification for msg %s (muted %d, no_offline_push %d)", n.msgID, muted, quiet.MsgId)
			}
		}
	})

	t.Run("503s are retried and accepted once", func(t *testing.T) {
		send(2003, "retry me")
		waitFor(t, "the gateway accepting 2003's notification", 20*time.Second, gw.wake, func() bool {
			for _, n := range gw.accepted("jp-retry") {
				if n[1] > 0 {
					return true
				}
			}
			return false
		})
		for id, n := range gw.accepted("jp-retry") {
			if n[0] != 3 || n[1] != 1 {
				t.Fatalf("%s: %d attempts, %d accepted; want 3 (two 503s) and 1", id, n[0], n[1])
			}
		}
	})

	t.Run("a dead token is removed from MySQL", func(t *testing.T) {
		send(2004, "anyone?")
		waitFor(t, "2004's token removed after 410 Unregistered", 20*time.Second, nil, func() bool {
			return c.CountRows("SELECT COUNT(*) FROM t_push_tokens WHERE user_id = ?", 2004) == 0
		})
	})

	t.Run("a connection that goes away before its PUSH_ACK gets the notification", func(t *testing.T) {
		const tok = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		defer dcancel()
		conn, err := client.Dial(dctx, c.Gates[0].TCPAddr, client.Options{NoAutoPushAck: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Auth(dctx, c.Token(2007, "ios"), "ios", "ios", "1.0"); err != nil {
			t.Fatal(err)
		}
		if err := conn.RegisterPushToken(dctx, client.PushToken{Platform: "apns", Token: tok, Topic: "com.example.chat"}); err != nil {
			t.Fatal(err)
		}
		id := send(2007, "read me later")
		m, err := framework.NextMessage(conn, 10*time.Second)
		if err != nil || m.MsgID.Int64() != id {
			t.Fatalf("push of %d: %v %v", id, m.MsgID, err)
		}
		_ = conn.Close() // never acked: the app was killed before it showed it
		waitFor(t, "the notification of the unacknowledged push", 20*time.Second, apns.wake, func() bool { return len(apns.notes(tok)) == 1 })
		if n := apns.notes(tok)[0]; n.msgID != fmt.Sprint(id) || n.body != "read me later" {
			t.Fatalf("notification %+v, want msg %d", n, id)
		}
	})

	t.Run("kill -9 of the pushing logic loses and doubles nothing", func(t *testing.T) {
		lg := c.Logics[0]
		// Every earlier push job acknowledged, so the one held below is
		// the burst's first.
		rdb := c.Redis.Client()
		defer rdb.Close()
		waitFor(t, "the push stream drained", 20*time.Second, nil, func() bool {
			return rdb.XLen(ctx, rediskey.Push(0)).Val() == 0
		})
		// The worker stops after marking the first job's device sent,
		// before its ack; the process is then killed there.
		if err := framework.Failpoint(lg.AdminAddr, "logic/push/beforeAck", "sleep(60000)"); err != nil {
			t.Fatal(err)
		}
		before := len(apns.notes(pushAPNsToken))
		var ids []int64
		for i := range 5 {
			ids = append(ids, send(2001, fmt.Sprintf("burst %d", i)))
		}
		waitFor(t, "the first burst notification", 20*time.Second, apns.wake, func() bool { return len(apns.notes(pushAPNsToken)) > before })
		// Kill at the seam under test: the device keyed sent, the job not
		// acked (the worker sleeps in the failpoint). A kill between the
		// provider's answer and that key is the one window that may send
		// twice (decision 90), not tested here.
		waitFor(t, "the first burst message keyed sent", 10*time.Second, nil, func() bool {
			return rdb.Get(ctx, rediskey.PushSent(ids[0], 2001, "ios")).Val() == "sent"
		})
		if err := lg.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := lg.Start(ctx); err != nil {
			t.Fatalf("restart logic: %v", err)
		}
		waitFor(t, "a notification for every burst message", 30*time.Second, apns.wake, func() bool { return len(apns.notes(pushAPNsToken)) >= before+len(ids) })
		seen := map[string]int{}
		for _, n := range apns.notes(pushAPNsToken)[before:] {
			seen[n.msgID]++
		}
		for _, id := range ids {
			if seen[fmt.Sprint(id)] != 1 {
				t.Fatalf("msg %d notified %d times (all: %v)", id, seen[fmt.Sprint(id)], seen)
			}
		}
		if len(seen) != len(ids) {
			t.Fatalf("notifications for %v, want exactly the burst %v", seen, ids)
		}
	})
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A storm in a group collapses: ten messages within push.collapse_interval
// raise one notification per offline member device, the first, under the
// conversation's collapse id; the sender gets none.
func TestOfflinePushCollapsesAGroupStormToOneNotificationPerDevice(t *testing.T) {
	t.Parallel()
	gw, env := gatewayPush(t, "getui")
	c := framework.NewCluster(t, framework.Options{Gates: 1, Env: append(env, "IM_PUSH_COLLAPSE_INTERVAL=1h")})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api, actx := apiClient(t, c, ctx)
	for _, uid := range []int64{3001, 3002, 3003} {
		conn := c.Login(t, 0, uid, "phone")
		if err := conn.RegisterPushToken(ctx, client.PushToken{Platform: "gateway", Token: fmt.Sprintf("gt-%d", uid), Gateway: "getui"}); err != nil {
			t.Fatal(err)
		}
		_ = conn.Close()
	}
	g, err := api.CreateGroup(actx, &logicv1.CreateGroupRequest{OwnerId: 3001, MemberIds: []int64{3002, 3003}, Name: "storm"})
	if err != nil {
		t.Fatal(err)
	}
	sender := c.Login(t, 0, 3001, "web")
	var first int64
	for i := range 10 {
		ack, err := sender.SendGroupText(ctx, g.Group.GroupId, fmt.Sprintf("storm %d", i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = ack.MsgID.Int64()
		}
	}
	// Every message decided: the 9 after the first collapsed for both
	// member devices (logic's own count), the first notified.
	waitFor(t, "18 collapsed device notifications and both members notified", 30*time.Second, gw.wake, func() bool {
		return logicMetric(t, c, "spark_logic_push_collapsed_total") == 18 &&
			len(gw.accepted("gt-3002")) > 0 && len(gw.accepted("gt-3003")) > 0
	})
	for _, tok := range []string{"gt-3002", "gt-3003"} {
		got := gw.accepted(tok)
		uid := strings.TrimPrefix(tok, "gt-")
		want := fmt.Sprintf("push_%d:%s:phone", first, uid)
		if n, ok := got[want]; len(got) != 1 || !ok || n[1] != 1 {
			t.Fatalf("%s got %v, want one notification, of the first message (%s)", tok, got, want)
		}
	}
	if got := gw.accepted("gt-3001"); len(got) != 0 {
		t.Fatalf("the sender was notified of their own messages: %v", got)
	}
}

// gatewayPush starts a fake push gateway, and returns it with the
// environment that makes a cluster's push use it as the gateway name:
// push on, the gateway's TLS certificate trusted, its secret shared.
func gatewayPush(t *testing.T, name string) (*pushFakeGateway, []string) {
	t.Helper()
	dir := t.TempDir()
	secret, err := stdwebhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	gw := &pushFakeGateway{t: t, secret: secret, fail: map[string]int{}, tries: map[string]int{}, ok: map[string]int{},
		tokens: map[string]string{}, wake: make(chan struct{}, 1)}
	gw.srv = httptest.NewTLSServer(http.HandlerFunc(gw.serve))
	t.Cleanup(gw.srv.Close)
	secretFile, caFile := filepath.Join(dir, "gateway.secret"), filepath.Join(dir, "ca.pem")
	writeFile(t, secretFile, []byte(secret.String()))
	writeFile(t, caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: gw.srv.Certificate().Raw}))
	return gw, []string{"IM_PUSH_ENABLED=true", "IM_PUSH_CA_FILE=" + caFile,
		"IM_PUSH_GATEWAYS=" + name + "=" + gw.srv.URL, "IM_PUSH_GATEWAY_SECRET_FILE=" + secretFile}
}
