package errcode

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestHelpers(t *testing.T) {
	cause := errors.New("dial tcp: refused")
	tests := []struct {
		name     string
		err      *Error
		code     Code
		msg      string
		logged   string
		hasCause bool
	}{
		{"invalid", Invalid("user_id", "must be a positive id"), InvalidArgument, "invalid argument: user_id: must be a positive id", "40001 invalid argument: user_id: must be a positive id", false},
		{"unavailable", Unavailable("relation: list friends", cause), Busy, Busy.Message(), "relation: list friends: dial tcp: refused", true},
		{"unavailable without what", Unavailable("", cause), Busy, Busy.Message(), "50301 " + Busy.Message() + ": dial tcp: refused", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c, m := Of(tt.err); c != tt.code || m != tt.msg {
				t.Errorf("Of = %s %q, want %s %q", c, m, tt.code, tt.msg)
			}
			if !strings.Contains(tt.err.Error(), tt.logged) {
				t.Errorf("Error() = %q, want it to contain %q", tt.err.Error(), tt.logged)
			}
			if got := errors.Is(tt.err, cause); got != tt.hasCause {
				t.Errorf("errors.Is(cause) = %v, want %v", got, tt.hasCause)
			}
		})
	}
}

// A business rejection is a 40302 whose client message names the reason
// and whose Rejection survives wrapping; other errors carry none.
func TestRejectCarriesBusinessCodeAndReason(t *testing.T) {
	err := fmt.Errorf("send: %w", Reject(7001, "contains a banned word"))
	if c, m := Of(err); c != Rejected || m != "rejected by the business server: contains a banned word" {
		t.Errorf("Of = %s %q", c, m)
	}
	if r := RejectionOf(err); r == nil || r.Code != 7001 || r.Reason != "contains a banned word" {
		t.Errorf("RejectionOf = %+v", r)
	}
	for _, other := range []error{New(Forbidden, ""), errors.New("plain"), nil} {
		if r := RejectionOf(other); r != nil {
			t.Errorf("RejectionOf(%v) = %+v, want nil", other, r)
		}
	}
}
