package push

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// apnsTokenAge is how long one provider JWT is used: Apple refuses one
// older than an hour (ExpiredProviderToken) and throttles a server that
// makes a new one more often than every 20 minutes.
const apnsTokenAge = 50 * time.Minute

// APNs sends to Apple Push Notification service over HTTP/2 with a
// provider token: an ES256 JWT of the team's .p8 key.
type APNs struct {
	key           *ecdsa.PrivateKey
	keyID, teamID string
	prod, sandbox string
	client        *http.Client
	now           func() time.Time

	mu    sync.Mutex
	jwt   string
	jwtAt time.Time
}

// APNsConfig configures NewAPNs.
type APNsConfig struct {
	// Key is the PEM of the .p8 key (PKCS #8, EC P-256).
	Key                   []byte
	KeyID, TeamID         string
	Endpoint, SandboxHost string
	Client                *http.Client
}

// NewAPNs parses the key and returns the provider.
func NewAPNs(c APNsConfig) (*APNs, error) {
	ek, err := pkcs8Key[*ecdsa.PrivateKey](c.Key, "apns key", "EC")
	if err != nil {
		return nil, err
	}
	return &APNs{key: ek, keyID: c.KeyID, teamID: c.TeamID, prod: c.Endpoint, sandbox: c.SandboxHost, client: c.Client, now: time.Now}, nil
}

// pkcs8Key parses a PEM PKCS #8 private key of type K; what and kind
// name it in errors.
func pkcs8Key[K any](b []byte, what, kind string) (K, error) {
	var zero K
	block, _ := pem.Decode(b)
	if block == nil {
		return zero, fmt.Errorf("push: %s: not PEM", what)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return zero, fmt.Errorf("push: %s: %w", what, err)
	}
	key, ok := k.(K)
	if !ok {
		return zero, fmt.Errorf("push: %s: not an %s key", what, kind)
	}
	return key, nil
}

// LoadAPNsKey reads a .p8 key file.
func LoadAPNsKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("push: push.apns.key_file: %w", err)
	}
	return b, nil
}

// bearer returns the provider token, a new one when the current is
// apnsTokenAge old or stale was given (Apple said it expired).
func (a *APNs) bearer(stale string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if a.jwt != "" && a.jwt != stale && now.Sub(a.jwtAt) < apnsTokenAge {
		return a.jwt, nil
	}
	tok, err := signES256(a.key, map[string]any{"alg": "ES256", "kid": a.keyID}, map[string]any{"iss": a.teamID, "iat": now.Unix()})
	if err != nil {
		return "", err
	}
	a.jwt, a.jwtAt = tok, now
	return tok, nil
}

// signES256 is a compact JWS with ES256: r and s, 32 bytes each.
func signES256(key *ecdsa.PrivateKey, header, claims map[string]any) (string, error) {
	signing, err := jwsInput(header, claims)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256([]byte(signing))
	r, s, err := ecdsa.Sign(rand.Reader, key, h[:])
	if err != nil {
		return "", fmt.Errorf("push: sign jwt: %w", err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// jwsInput is base64url(header) "." base64url(claims).
func jwsInput(header, claims map[string]any) (string, error) {
	hb, err := json.Marshal(header)
	if err != nil {
		return "", err
	}
	cb, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(hb) + "." + base64.RawURLEncoding.EncodeToString(cb), nil
}

// apnsPayload is the JSON body of one notification.
type apnsPayload struct {
	APS struct {
		Alert struct {
			Title string `json:"title,omitempty"`
			Body  string `json:"body"`
		} `json:"alert"`
		Badge    int64  `json:"badge"`
		Sound    string `json:"sound"`
		ThreadID string `json:"thread-id"`
	} `json:"aps"`
	ConversationID string `json:"conversation_id"`
	MsgID          string `json:"msg_id"`
}

// Send posts one notification; ExpiredProviderToken is answered by
// signing a new token and trying once more.
func (a *APNs) Send(ctx context.Context, n Notification) Answer {
	var p apnsPayload
	p.APS.Alert.Title, p.APS.Alert.Body = n.Title, n.Body
	p.APS.Badge, p.APS.Sound, p.APS.ThreadID = n.Badge, "default", n.collapseID()
	p.ConversationID, p.MsgID = strconv.FormatInt(n.ConversationID, 10), strconv.FormatInt(n.MsgID, 10)
	body, err := json.Marshal(p)
	if err != nil {
		return Answer{Result: Rejected, Reason: err.Error()}
	}
	host := a.prod
	if n.Token.Sandbox {
		host = a.sandbox
	}
	stale := ""
	for attempt := 0; ; attempt++ {
		jwt, err := a.bearer(stale)
		if err != nil {
			return Answer{Result: AuthError, Reason: err.Error()}
		}
		ans := a.post(ctx, host+"/3/device/"+n.Token.Token, jwt, n, body)
		if ans.Reason == "ExpiredProviderToken" && attempt == 0 {
			stale = jwt
			continue
		}
		return ans
	}
}

func (a *APNs) post(ctx context.Context, url, jwt string, n Notification, body []byte) Answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Answer{Result: AuthError, Reason: err.Error()}
	}
	h := req.Header
	h.Set("authorization", "bearer "+jwt)
	h.Set("apns-topic", n.Token.Topic)
	h.Set("apns-push-type", "alert")
	h.Set("apns-collapse-id", n.collapseID())
	h.Set("apns-priority", "10")
	h.Set("apns-expiration", strconv.FormatInt(n.Expires.Unix(), 10))
	h.Set("apns-id", uuidOf(n.Key))
	h.Set("content-type", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return Answer{Result: Retry, Reason: err.Error()}
	}
	defer resp.Body.Close()
	var r struct {
		Reason string `json:"reason"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_ = json.Unmarshal(b, &r)
	return apnsAnswer(resp.StatusCode, r.Reason, retryAfter(resp.Header, a.now()))
}

// apnsAnswer maps an APNs status and reason (Apple's "Handling
// notification responses from APNs") onto a Result.
func apnsAnswer(status int, reason string, after time.Duration) Answer {
	a := Answer{Reason: reason}
	if a.Reason == "" {
		a.Reason = strconv.Itoa(status)
	}
	switch {
	case status == http.StatusOK:
		a.Result = Sent
	case status == http.StatusGone, reason == "BadDeviceToken", reason == "DeviceTokenNotForTopic", reason == "Unregistered", reason == "ExpiredToken":
		a.Result = DeadToken
	case status == http.StatusTooManyRequests, status >= 500:
		a.Result, a.RetryAfter = Retry, after
	case status == http.StatusForbidden, reason == "TopicDisallowed", reason == "MissingTopic", reason == "BadTopic":
		// ExpiredProviderToken was retried with a new token already;
		// InvalidProviderToken, MissingProviderToken, BadCertificate: the
		// key, key id or team id is wrong.
		a.Result = AuthError
	default:
		a.Result = Rejected
	}
	return a
}
