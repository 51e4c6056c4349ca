// Package stdwebhook signs and verifies HTTP callbacks as the Standard
// Webhooks specification writes them: a "whsec_" secret, the headers
// webhook-id, webhook-timestamp and webhook-signature, and a signature
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>". The signature header is
// a space-separated list so that two secrets can be valid at once while one
// is rotated out.
package stdwebhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names of the specification.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Tolerance is how far a timestamp may lie from the receiver's clock,
// either way, before Verify refuses it as a possible replay.
const Tolerance = 5 * time.Minute

const (
	secretPrefix  = "whsec_"
	minSecretLen  = 24
	maxSecretLen  = 64
	signatureV1   = "v1,"
	newSecretSize = 32
)

// ErrVerify is wrapped by every verification failure.
var ErrVerify = errors.New("stdwebhook: verification failed")

// Secret is the raw key behind a "whsec_" string.
type Secret []byte

// ParseSecret decodes "whsec_" + standard base64 of 24 to 64 bytes.
func ParseSecret(s string) (Secret, error) {
	enc, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("stdwebhook: secret must start with %q", secretPrefix)
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("stdwebhook: secret is not standard base64: %w", err)
	}
	if len(raw) < minSecretLen || len(raw) > maxSecretLen {
		return nil, fmt.Errorf("stdwebhook: secret has %d bytes, want %d to %d", len(raw), minSecretLen, maxSecretLen)
	}
	return Secret(raw), nil
}

// NewSecret returns a fresh secret of 32 random bytes.
func NewSecret() (Secret, error) {
	b := make([]byte, newSecretSize)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("stdwebhook: random secret: %w", err)
	}
	return Secret(b), nil
}

// String is the "whsec_" form a receiver is given.
func (s Secret) String() string {
	return secretPrefix + base64.StdEncoding.EncodeToString(s)
}

// Sign returns "v1,<signature>" of body under id and the unix timestamp ts.
func Sign(secret Secret, id string, ts int64, body []byte) string {
	return signatureV1 + base64.StdEncoding.EncodeToString(mac(secret, id, ts, body))
}

func mac(secret Secret, id string, ts int64, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write(strconv.AppendInt(nil, ts, 10))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// SetHeaders writes the three headers for one attempt, with one signature
// per secret (the new secret first during a rotation).
func SetHeaders(h http.Header, id string, ts int64, body []byte, secrets ...Secret) {
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		sigs = append(sigs, Sign(s, id, ts, body))
	}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSignature, strings.Join(sigs, " "))
}

// Verify checks that h carries a timestamp within Tolerance of now and at
// least one v1 signature of body made with one of secrets. It compares in
// constant time and ignores signature versions it does not know.
func Verify(h http.Header, body []byte, now time.Time, secrets ...Secret) error {
	id := h.Get(HeaderID)
	if id == "" {
		return fmt.Errorf("%w: no %s header", ErrVerify, HeaderID)
	}
	tsText := h.Get(HeaderTimestamp)
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not unix seconds", ErrVerify, HeaderTimestamp, tsText)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > Tolerance || d < -Tolerance {
		return fmt.Errorf("%w: timestamp %d is %v away from now", ErrVerify, ts, d.Round(time.Second))
	}
	sigHeader := h.Get(HeaderSignature)
	if sigHeader == "" {
		return fmt.Errorf("%w: no %s header", ErrVerify, HeaderSignature)
	}
	for _, s := range secrets {
		want := mac(s, id, ts, body)
		for _, sig := range strings.Fields(sigHeader) {
			enc, ok := strings.CutPrefix(sig, signatureV1)
			if !ok {
				continue
			}
			got, err := base64.StdEncoding.DecodeString(enc)
			if err != nil {
				continue
			}
			if hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: no signature matches", ErrVerify)
}
