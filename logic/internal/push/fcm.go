package push

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fcmScope is the OAuth scope of the FCM HTTP v1 API.
const fcmScope = "https://www.googleapis.com/auth/firebase.messaging"

// ServiceAccount is the part of a Google service-account JSON key FCM
// needs.
type ServiceAccount struct {
	ProjectID    string `json:"project_id"`
	PrivateKeyID string `json:"private_key_id"`
	PrivateKey   string `json:"private_key"`
	ClientEmail  string `json:"client_email"`
	TokenURI     string `json:"token_uri"`
}

// LoadServiceAccount reads a service-account JSON key file.
func LoadServiceAccount(path string) (ServiceAccount, error) {
	var sa ServiceAccount
	b, err := os.ReadFile(path)
	if err != nil {
		return sa, fmt.Errorf("push: push.fcm.credentials_file: %w", err)
	}
	if err := json.Unmarshal(b, &sa); err != nil {
		return sa, fmt.Errorf("push: push.fcm.credentials_file: %w", err)
	}
	if sa.ProjectID == "" || sa.ClientEmail == "" || sa.PrivateKey == "" || sa.TokenURI == "" {
		return sa, errors.New("push: push.fcm.credentials_file lacks project_id, client_email, private_key or token_uri")
	}
	return sa, nil
}

// FCM sends through Firebase Cloud Messaging HTTP v1 with an OAuth 2
// access token got by the JWT-bearer grant (RFC 7523) of a service
// account; written in house, it is one signed request, and the token is
// cached until a minute before it expires.
type FCM struct {
	sa       ServiceAccount
	key      *rsa.PrivateKey
	endpoint string
	client   *http.Client
	now      func() time.Time

	mu        sync.Mutex
	token     string
	expiresAt time.Time
}

// NewFCM parses the service account's key and returns the provider.
func NewFCM(sa ServiceAccount, endpoint string, client *http.Client) (*FCM, error) {
	rk, err := pkcs8Key[*rsa.PrivateKey]([]byte(sa.PrivateKey), "fcm private_key", "RSA")
	if err != nil {
		return nil, err
	}
	return &FCM{sa: sa, key: rk, endpoint: endpoint, client: client, now: time.Now}, nil
}

// errAuth marks an OAuth failure an operator must fix (refused grant).
var errAuth = errors.New("oauth grant refused")

// accessToken returns a cached token or gets a new one; stale drops the
// cached one when it equals it (FCM answered 401 with it).
func (f *FCM) accessToken(ctx context.Context, stale string) (string, time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if f.token != "" && f.token != stale && now.Before(f.expiresAt.Add(-time.Minute)) {
		return f.token, 0, nil
	}
	iat := now.Unix()
	signing, err := jwsInput(map[string]any{"alg": "RS256", "typ": "JWT", "kid": f.sa.PrivateKeyID},
		map[string]any{"iss": f.sa.ClientEmail, "scope": fcmScope, "aud": f.sa.TokenURI, "iat": iat, "exp": iat + 3600})
	if err != nil {
		return "", 0, err
	}
	h := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, f.key, crypto.SHA256, h[:])
	if err != nil {
		return "", 0, fmt.Errorf("sign oauth assertion: %w", err)
	}
	form := url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:jwt-bearer"}, "assertion": {signing + "." + base64.RawURLEncoding.EncodeToString(sig)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.sa.TokenURI, strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, fmt.Errorf("%w: %v", errAuth, err)
	}
	req.Header.Set("content-type", "application/x-www-form-urlencoded")
	resp, err := f.client.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("oauth token: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			return "", retryAfter(resp.Header, now), fmt.Errorf("oauth token: %d %s", resp.StatusCode, b)
		}
		return "", 0, fmt.Errorf("%w: %d %s", errAuth, resp.StatusCode, b)
	}
	var tr struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	if err := json.Unmarshal(b, &tr); err != nil || tr.AccessToken == "" {
		return "", 0, fmt.Errorf("%w: token answer without access_token", errAuth)
	}
	f.token, f.expiresAt = tr.AccessToken, now.Add(time.Duration(tr.ExpiresIn)*time.Second)
	return f.token, 0, nil
}

// fcmMessage is the v1 send body.
type fcmMessage struct {
	Message struct {
		Token        string            `json:"token"`
		Notification map[string]string `json:"notification,omitempty"`
		Data         map[string]string `json:"data"`
		Android      struct {
			CollapseKey  string `json:"collapse_key"`
			Priority     string `json:"priority"`
			TTL          string `json:"ttl"`
			Notification struct {
				Tag   string `json:"tag"`
				Count int64  `json:"notification_count"`
			} `json:"notification"`
		} `json:"android"`
		APNs struct {
			Headers map[string]string `json:"headers"`
			Payload struct {
				APS struct {
					Badge    int64  `json:"badge"`
					ThreadID string `json:"thread-id"`
				} `json:"aps"`
			} `json:"payload"`
		} `json:"apns"`
	} `json:"message"`
}

// Send posts one message; a 401 is answered by getting a new access token
// and trying once more.
func (f *FCM) Send(ctx context.Context, n Notification) Answer {
	var m fcmMessage
	m.Message.Token = n.Token.Token
	m.Message.Notification = map[string]string{"title": n.Title, "body": n.Body}
	m.Message.Data = map[string]string{"conversation_id": strconv.FormatInt(n.ConversationID, 10), "msg_id": strconv.FormatInt(n.MsgID, 10)}
	a := &m.Message.Android
	a.CollapseKey, a.Priority = n.collapseID(), "high"
	a.TTL = strconv.FormatInt(max(0, int64(n.Expires.Sub(f.now()).Seconds())), 10) + "s"
	a.Notification.Tag, a.Notification.Count = n.collapseID(), n.Badge
	m.Message.APNs.Headers = map[string]string{"apns-collapse-id": n.collapseID()}
	m.Message.APNs.Payload.APS.Badge, m.Message.APNs.Payload.APS.ThreadID = n.Badge, n.collapseID()
	body, err := json.Marshal(m)
	if err != nil {
		return Answer{Result: Rejected, Reason: err.Error()}
	}
	stale := ""
	for attempt := 0; ; attempt++ {
		tok, after, err := f.accessToken(ctx, stale)
		if errors.Is(err, errAuth) {
			return Answer{Result: AuthError, Reason: err.Error()}
		}
		if err != nil {
			return Answer{Result: Retry, RetryAfter: after, Reason: err.Error()}
		}
		ans := f.post(ctx, tok, body)
		if ans.Result == AuthError && attempt == 0 && ans.Reason == "UNAUTHENTICATED" {
			stale = tok
			continue
		}
		return ans
	}
}

func (f *FCM) post(ctx context.Context, token string, body []byte) Answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.endpoint+"/v1/projects/"+url.PathEscape(f.sa.ProjectID)+"/messages:send", bytes.NewReader(body))
	if err != nil {
		return Answer{Result: AuthError, Reason: err.Error()}
	}
	req.Header.Set("authorization", "Bearer "+token)
	req.Header.Set("content-type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return Answer{Result: Retry, Reason: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	var e struct {
		Error struct {
			Message string `json:"message"`
			Status  string `json:"status"`
			Details []struct {
				Type      string `json:"@type"`
				ErrorCode string `json:"errorCode"`
			} `json:"details"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	code := e.Error.Status
	for _, d := range e.Error.Details {
		if d.ErrorCode != "" {
			code = d.ErrorCode
		}
	}
	return fcmAnswer(resp.StatusCode, code, e.Error.Message, retryAfter(resp.Header, f.now()))
}

// fcmAnswer maps an FCM v1 status and error code (FCM's ErrorCode
// reference) onto a Result.
func fcmAnswer(status int, code, msg string, after time.Duration) Answer {
	a := Answer{Reason: code}
	if a.Reason == "" {
		a.Reason = strconv.Itoa(status)
	}
	switch {
	case status == http.StatusOK:
		a.Result = Sent
	case code == "UNREGISTERED", status == http.StatusNotFound, code == "SENDER_ID_MISMATCH":
		a.Result = DeadToken
	case code == "INVALID_ARGUMENT" && strings.Contains(strings.ToLower(msg), "token"):
		// "The registration token is not a valid FCM registration token".
		// Any other INVALID_ARGUMENT is our payload: the token stays.
		a.Result = DeadToken
	case status == http.StatusTooManyRequests, status >= 500:
		a.Result, a.RetryAfter = Retry, after
	case status == http.StatusUnauthorized, status == http.StatusForbidden, code == "THIRD_PARTY_AUTH_ERROR":
		a.Result = AuthError
		if status == http.StatusUnauthorized && code == "" {
			a.Reason = "UNAUTHENTICATED"
		}
	default:
		a.Result = Rejected
	}
	return a
}
