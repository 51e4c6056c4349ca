package push

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/webhook"
)

// Notification is what a provider sends to one device.
type Notification struct {
	// Key is the idempotency key of the message and device
	// ("<msg_id>:<user_id>:<device_id>"): the gateway's webhook-id and the
	// seed of the APNs apns-id, so a receiver can drop a repeat.
	Key   string
	Token store.PushToken
	// Title and Body follow the user's preview setting.
	Title, Body    string
	Badge          int64
	ConversationID int64
	MsgID          int64
	SenderID       int64
	// Expires is when the provider stops trying the device.
	Expires time.Time
}

// collapseID groups a conversation's notifications on the device (APNs
// apns-collapse-id and thread-id, FCM collapse_key and tag): a newer one
// replaces the shown one instead of stacking.
func (n Notification) collapseID() string { return "c" + strconv.FormatInt(n.ConversationID, 10) }

// Result is how a provider answered one notification.
type Result int

// The results a provider's answers map onto.
const (
	// Sent: accepted.
	Sent Result = iota
	// DeadToken: the token is invalid or unregistered; it is removed.
	DeadToken
	// Retry: 429 or 5xx or a transport failure; try again after
	// RetryAfter (0: the backoff's wait).
	Retry
	// AuthError: our credentials or configuration are wrong (bad key,
	// wrong topic); an operator must act, so it is logged and counted and
	// never retried.
	AuthError
	// Rejected: the provider refused this notification for a reason
	// retrying cannot fix (payload too large); logged and dropped.
	Rejected
)

// resultNames are the metric labels of the results.
var resultNames = map[Result]string{Sent: "sent", DeadToken: "dead_token", Retry: "retry", AuthError: "auth_error", Rejected: "rejected"}

func (r Result) String() string { return resultNames[r] }

// Answer is a provider's answer to one notification.
type Answer struct {
	Result     Result
	RetryAfter time.Duration
	// Reason is the provider's own word for it (APNs reason, FCM status,
	// HTTP status), for the log.
	Reason string
}

// Provider sends notifications of one platform.
type Provider interface {
	Send(ctx context.Context, n Notification) Answer
}

// retryAfter reads a provider's Retry-After header (0 when absent or
// malformed), with the one parser the webhooks use too.
func retryAfter(h http.Header, now time.Time) time.Duration {
	d, _ := webhook.ParseRetryAfter(h.Get("Retry-After"), now)
	return d
}

// httpClient is the providers' client: HTTP/2 over TLS (APNs requires
// it), trusting caFile instead of the system roots when set.
func httpClient(caFile string, timeout time.Duration) (*http.Client, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("push: push.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("push: push.ca_file %s holds no PEM certificate", caFile)
		}
		tc.RootCAs = pool
	}
	tr := &http.Transport{
		TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 16,
		IdleConnTimeout: 5 * time.Minute, TLSHandshakeTimeout: 10 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}

// uuidOf derives a UUID from key (the APNs apns-id): the same message and
// device always carry the same id.
func uuidOf(key string) string {
	h := sha256.Sum256([]byte(key))
	h[6] = h[6]&0x0f | 0x50 // version 5-like: name-based
	h[8] = h[8]&0x3f | 0x80
	s := hex.EncodeToString(h[:16])
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}
