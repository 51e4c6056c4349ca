package token

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestVerify(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Now()
	good, _, _ := Mint(secret, 1001, "dev-1", time.Hour, now)
	noDev, _, _ := Mint(secret, 1002, "", time.Hour, now)
	expired, _, _ := Mint(secret, 1001, "", time.Minute, now.Add(-time.Hour))
	forged, _, _ := Mint([]byte("other"), 1001, "", time.Hour, now)
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"1001","exp":9999999999}`)) + "."
	hs512, _ := jwt.NewWithClaims(jwt.SigningMethodHS512, jwt.MapClaims{"sub": "1001", "exp": now.Add(time.Hour).Unix()}).SignedString(secret)
	noExp, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "1001"}).SignedString(secret)
	badSub, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "abc", "exp": now.Add(time.Hour).Unix()}).SignedString(secret)
	zeroSub, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "0", "exp": now.Add(time.Hour).Unix()}).SignedString(secret)
	tests := []struct {
		name    string
		tok     string
		wantUID int64
		wantDev string
		wantErr bool
	}{
		{"good", good, 1001, "dev-1", false},
		{"no device", noDev, 1002, "", false},
		{"expired", expired, 0, "", true},
		{"forged", forged, 0, "", true},
		{"alg none", none, 0, "", true},
		{"hs512", hs512, 0, "", true},
		{"no exp", noExp, 0, "", true},
		{"sub not a number", badSub, 0, "", true},
		{"sub zero", zeroSub, 0, "", true},
		{"garbage", "not.a.token", 0, "", true},
		{"empty", "", 0, "", true},
		{"truncated", good[:len(good)-3], 0, "", true},
		{"tampered payload", strings.Replace(good, ".", ".x", 1), 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Verify(secret, tt.tok, now)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("want ErrInvalid, got %v", err)
				}
				return
			}
			if err != nil || c.UserID != tt.wantUID || c.DeviceID != tt.wantDev {
				t.Fatalf("got %+v err %v", c, err)
			}
		})
	}
}
