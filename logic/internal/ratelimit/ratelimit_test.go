package ratelimit

import (
	"testing"
	"time"
)

func TestLimiterBucketPerDevice(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name   string
		rate   float64
		burst  int
		calls  []time.Duration // offsets from t0, all for user 1 device "a"
		want   []bool
		others bool // a call by device "b" at the end is allowed
	}{
		{"burst then refused", 1, 3, []time.Duration{0, 0, 0, 0}, []bool{true, true, true, false}, true},
		{"refills at rate", 2, 1, []time.Duration{0, 0, 500 * time.Millisecond, 600 * time.Millisecond}, []bool{true, false, true, false}, true},
		{"disabled when rate is 0", 0, 1, []time.Duration{0, 0, 0}, []bool{true, true, true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(tt.rate, tt.burst)
			for i, d := range tt.calls {
				if got := l.Allow(1, "a", t0.Add(d)); got != tt.want[i] {
					t.Fatalf("call %d at +%v: allowed %v, want %v", i, d, got, tt.want[i])
				}
			}
			if got := l.Allow(1, "b", t0.Add(tt.calls[len(tt.calls)-1])); got != tt.others {
				t.Fatalf("another device: allowed %v", got)
			}
		})
	}
}
