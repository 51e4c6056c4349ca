package envelope

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/errcode"
)

func TestEnvelopes(t *testing.T) {
	ids := NewIDSource()
	tests := []struct {
		name     string
		body     []byte
		wantCode errcode.Code
		wantData string
	}{
		{"ok with data", OK(ids.Next(), []byte(`{"msg_id":"1"}`)), errcode.OK, `{"msg_id":"1"}`},
		{"ok nil data", OK(ids.Next(), nil), errcode.OK, `{}`},
		{"fail", Fail(ids.Next(), errcode.Conflict, ""), errcode.Conflict, `{}`},
		{"fail quotes msg", Fail(ids.Next(), errcode.InvalidArgument, `bad "x"`), errcode.InvalidArgument, `{}`},
		{"from plain error", FromError(ids.Next(), errcode.New(errcode.Busy, "")), errcode.Busy, `{}`},
		{"fail with retry-after rounds up to ms", FailRetry(ids.Next(), errcode.RateLimited, "slow down", 1500*time.Microsecond), errcode.RateLimited, `{"retry_after_ms":2}`},
		{"fail with no retry-after", FailRetry(ids.Next(), errcode.RateLimited, "", 0), errcode.RateLimited, `{}`},
		{"from limited error", FromError(ids.Next(), fmt.Errorf("wrapped: %w", errcode.Limited("", 3*time.Second))), errcode.RateLimited, `{"retry_after_ms":3000}`},
		{"from rejection, reason unescaped", FromError(ids.Next(), fmt.Errorf("send: %w", errcode.Reject(7001, `no <a> & "b"`))), errcode.Rejected, `{"reject_code":7001,"reject_reason":"no <a> & \"b\""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Response
			if err := json.Unmarshal(tt.body, &r); err != nil {
				t.Fatalf("invalid JSON %s: %v", tt.body, err)
			}
			if r.Code != tt.wantCode || string(r.Data) != tt.wantData || len(r.RequestID) != RequestIDLen || r.Msg == "" {
				t.Fatalf("got %+v", r)
			}
		})
	}
}

func TestRequestIDsUniqueBase62(t *testing.T) {
	ids := NewIDSource()
	seen := map[string]bool{}
	for i := 0; i < 100000; i++ {
		id := ids.Next()
		if len(id) != RequestIDLen {
			t.Fatalf("len %d", len(id))
		}
		for _, c := range id {
			if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
				t.Fatalf("not base62: %q", id)
			}
		}
		if seen[id] {
			t.Fatalf("duplicate %s", id)
		}
		seen[id] = true
	}
}
