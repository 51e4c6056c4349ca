// Package token mints and verifies client tokens: HS256 JWTs whose "sub" is
// the user id as a decimal string, "did" an optional device id and "exp"
// the expiry.
package token

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ErrInvalid is wrapped by every verification failure.
var ErrInvalid = errors.New("token: invalid")

// Claims are the verified contents of a token.
type Claims struct {
	UserID    int64
	DeviceID  string
	IssuedAt  time.Time
	ExpiresAt time.Time
}

type claims struct {
	DeviceID string `json:"did,omitempty"`
	jwt.RegisteredClaims
}

// Mint returns a signed token for userID (and deviceID when not empty)
// valid for ttl from now.
func Mint(secret []byte, userID int64, deviceID string, ttl time.Duration, now time.Time) (string, time.Time, error) {
	if len(secret) == 0 {
		return "", time.Time{}, errors.New("token: empty secret")
	}
	if userID <= 0 {
		return "", time.Time{}, fmt.Errorf("token: user id %d must be positive", userID)
	}
	exp := now.Add(ttl).Truncate(time.Second)
	c := claims{DeviceID: deviceID, RegisteredClaims: jwt.RegisteredClaims{
		Subject:   strconv.FormatInt(userID, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(exp),
	}}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("token: sign: %w", err)
	}
	return s, exp, nil
}

// Verify checks the signature (HS256 only), expiry and subject of s.
func Verify(secret []byte, s string, now time.Time) (Claims, error) {
	var c claims
	_, err := jwt.ParseWithClaims(s, &c, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{"HS256"}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	uid, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || uid <= 0 {
		return Claims{}, fmt.Errorf("%w: sub %q is not a user id", ErrInvalid, c.Subject)
	}
	out := Claims{UserID: uid, DeviceID: c.DeviceID, ExpiresAt: c.ExpiresAt.Time}
	if c.IssuedAt != nil {
		out.IssuedAt = c.IssuedAt.Time
	}
	return out, nil
}
