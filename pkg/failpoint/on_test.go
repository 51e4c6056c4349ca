//go:build failpoints

package failpoint

import (
	"errors"
	"testing"
)

func TestInjectCountedActionRunsThatManyTimesThenDisarms(t *testing.T) {
	cases := []struct {
		name   string
		action string
		want   []bool // whether each successive Inject returns ErrInjected
	}{
		{"once", "1*error", []bool{true, false, false}},
		{"three times", "3*error", []bool{true, true, true, false}},
		{"uncounted stays armed", "error", []bool{true, true, true, true}},
		{"malformed count is inert", "x*error", []bool{false, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			point := "test/counted/" + tc.name
			mu.Lock()
			points[point] = tc.action
			mu.Unlock()
			t.Cleanup(func() {
				mu.Lock()
				delete(points, point)
				mu.Unlock()
			})
			for i, want := range tc.want {
				got := errors.Is(Inject(point), ErrInjected)
				if got != want {
					t.Fatalf("call %d of %q: injected = %v, want %v", i+1, tc.action, got, want)
				}
			}
		})
	}
}
