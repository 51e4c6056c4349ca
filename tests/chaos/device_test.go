package chaos

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
)

func TestOutcomeCountsOnlyRefusalCodesAsDefinite(t *testing.T) {
	code := func(c errcode.Code) error {
		return fmt.Errorf("client: send: %w", &client.CodeError{Command: 4, Code: c})
	}
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"answered", nil, ResultOK},
		{"forbidden", code(errcode.Forbidden), ResultRefused},
		{"invalid argument", code(errcode.InvalidArgument), ResultRefused},
		{"conflict", code(errcode.Conflict), ResultRefused},
		{"busy", code(errcode.Busy), ResultUncertain},
		{"internal", code(errcode.Internal), ResultUncertain},
		{"rate limited", code(errcode.RateLimited), ResultUncertain},
		{"timeout", fmt.Errorf("x: %w", client.ErrTimeout), ResultUncertain},
		{"connection lost", client.ErrClosed, ResultUncertain},
		{"anything else", errors.New("dial tcp: connection refused"), ResultUncertain},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := outcome(tc.err); got != tc.want {
				t.Fatalf("outcome(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
}
