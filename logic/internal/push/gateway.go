package push

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sparkim/spark/pkg/stdwebhook"
)

// Gateway posts notifications to a business's push gateway (getui,
// JPush, HMS … behind it), signed as Standard Webhooks: webhook-id is the
// idempotency key of the message and device, the same on every retry, so
// the gateway drops a repeat.
type Gateway struct {
	url    string
	secret stdwebhook.Secret
	client *http.Client
	now    func() time.Time
}

// NewGateway returns the provider of one configured gateway.
func NewGateway(url string, secret stdwebhook.Secret, client *http.Client) *Gateway {
	return &Gateway{url: url, secret: secret, client: client, now: time.Now}
}

// LoadGatewaySecret reads the "whsec_" signing secret from a file.
func LoadGatewaySecret(path string) (stdwebhook.Secret, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("push: push.gateway_secret_file: %w", err)
	}
	s, err := stdwebhook.ParseSecret(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("push: push.gateway_secret_file: %w", err)
	}
	return s, nil
}

// GatewayEvent is the body a gateway receives (docs/operations.md).
type GatewayEvent struct {
	Type string           `json:"type"`
	At   string           `json:"timestamp"`
	Data GatewayEventData `json:"data"`
}

// GatewayEventData is one notification for one device.
type GatewayEventData struct {
	UserID         string `json:"user_id"`
	DeviceID       string `json:"device_id"`
	Token          string `json:"token"`
	ConversationID string `json:"conversation_id"`
	MsgID          string `json:"msg_id"`
	Title          string `json:"title"`
	Body           string `json:"body"`
	Badge          int64  `json:"badge"`
	CollapseID     string `json:"collapse_id"`
	ExpiresAt      int64  `json:"expires_at"`
}

// Send posts one notification. 2xx is sent; 404 and 410 say the token is
// dead; 429 and 5xx are retried (Retry-After honoured); 401 and 403 are
// an auth error; any other answer is a rejection.
func (g *Gateway) Send(ctx context.Context, n Notification) Answer {
	now := g.now()
	ev := GatewayEvent{Type: "message.notification", At: now.UTC().Format(time.RFC3339), Data: GatewayEventData{
		UserID: strconv.FormatInt(n.Token.UserID, 10), DeviceID: n.Token.DeviceID, Token: n.Token.Token,
		ConversationID: strconv.FormatInt(n.ConversationID, 10), MsgID: strconv.FormatInt(n.MsgID, 10),
		Title: n.Title, Body: n.Body, Badge: n.Badge, CollapseID: n.collapseID(), ExpiresAt: n.Expires.Unix(),
	}}
	body, err := json.Marshal(ev)
	if err != nil {
		return Answer{Result: Rejected, Reason: err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url, bytes.NewReader(body))
	if err != nil {
		return Answer{Result: AuthError, Reason: err.Error()}
	}
	req.Header.Set("content-type", "application/json")
	stdwebhook.SetHeaders(req.Header, "push_"+n.Key, now.Unix(), body, g.secret)
	resp, err := g.client.Do(req)
	if err != nil {
		return Answer{Result: Retry, Reason: err.Error()}
	}
	_ = resp.Body.Close()
	a := Answer{Reason: strconv.Itoa(resp.StatusCode)}
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		a.Result = Sent
	case s == http.StatusNotFound, s == http.StatusGone:
		a.Result = DeadToken
	case s == http.StatusTooManyRequests, s >= 500:
		a.Result, a.RetryAfter = Retry, retryAfter(resp.Header, now)
	case s == http.StatusUnauthorized, s == http.StatusForbidden:
		a.Result = AuthError
	default:
		a.Result = Rejected
	}
	return a
}
