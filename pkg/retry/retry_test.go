package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	const ms = time.Millisecond
	exp := Policy{Initial: 100 * ms, Max: 2 * time.Second, Multiplier: 2}
	linear := Policy{Initial: 5 * ms, Step: 5 * ms}
	uncapped := Policy{Initial: 200 * ms, Multiplier: 2}
	half := func() float64 { return 0.5 }
	for _, tc := range []struct {
		name string
		p    Policy
		n    int
		want time.Duration
	}{
		{"exponential first", exp, 0, 100 * ms},
		{"exponential doubles", exp, 1, 200 * ms},
		{"exponential third", exp, 3, 800 * ms},
		{"exponential capped", exp, 5, 2 * time.Second},
		{"exponential far past the cap", exp, 500, 2 * time.Second},
		{"linear first", linear, 0, 5 * ms},
		{"linear grows by step", linear, 2, 15 * ms},
		{"uncapped", uncapped, 4, 3200 * ms},
		{"jitter low end", Policy{Initial: 100 * ms, Multiplier: 2, Jitter: true, Random: func() float64 { return 0 }}, 1, 100 * ms},
		{"jitter middle", Policy{Initial: 100 * ms, Multiplier: 2, Jitter: true, Random: half}, 1, 150 * ms},
		{"jitter capped", Policy{Initial: 500 * ms, Max: 30 * time.Second, Multiplier: 2, Jitter: true, Random: half}, 10, 22500 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Delay(tc.n); got != tc.want {
				t.Errorf("Delay(%d) = %v, want %v", tc.n, got, tc.want)
			}
		})
	}
}

func TestDelayJitterBounds(t *testing.T) {
	p := Policy{Initial: 50 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2, Jitter: true}
	for n := range 10 {
		full := Policy{Initial: p.Initial, Max: p.Max, Multiplier: p.Multiplier}.Delay(n)
		for range 50 {
			if d := p.Delay(n); d < full/2 || d > full {
				t.Fatalf("Delay(%d) = %v, want within [%v, %v]", n, d, full/2, full)
			}
		}
	}
}

func TestBackoff(t *testing.T) {
	b := NewBackoff(Policy{Initial: time.Millisecond, Max: 4 * time.Millisecond, Multiplier: 2})
	var got []time.Duration
	for range 4 {
		got = append(got, b.Next())
	}
	b.Reset()
	got = append(got, b.Next())
	want := []time.Duration{1, 2, 4, 4, 1}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("waits %v, want %v ms", got, want)
		}
	}
}

func TestDo(t *testing.T) {
	errFlaky := errors.New("flaky")
	errFatal := errors.New("fatal")
	fast := Policy{Initial: time.Microsecond, Multiplier: 2}
	for _, tc := range []struct {
		name      string
		p         Policy
		errs      []error // fn's answers in order; nil after the end
		want      error
		wantCalls int
	}{
		{"first try", fast, nil, nil, 1},
		{"succeeds after failures", fast, []error{errFlaky, errFlaky}, nil, 3},
		{"attempts run out", Policy{Initial: time.Microsecond, Attempts: 3}, []error{errFlaky, errFlaky, errFlaky, errFlaky}, errFlaky, 3},
		{"refused error ends at once", Policy{Initial: time.Microsecond, Retryable: func(err error) bool { return err == errFlaky }},
			[]error{errFlaky, errFatal, errFlaky}, errFatal, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, notified := 0, 0
			tc.p.Notify = func(attempt int, err error, wait time.Duration) {
				notified++
				if attempt != calls || err == nil {
					t.Errorf("Notify(%d, %v) after call %d", attempt, err, calls)
				}
			}
			err := Do(context.Background(), tc.p, func(context.Context) error {
				calls++
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				return nil
			})
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Errorf("Do = %v, want %v", err, tc.want)
			}
			if calls != tc.wantCalls {
				t.Errorf("%d calls, want %d", calls, tc.wantCalls)
			}
			if want := tc.wantCalls - 1; tc.want != nil && tc.wantCalls > 0 && notified != want {
				t.Errorf("%d notifications, want %d", notified, want)
			}
		})
	}
}

func TestDoHonoursContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := Do(ctx, Policy{Initial: time.Hour}, func(context.Context) error { return errors.New("down") })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, want the context's deadline", err)
	}
	if time.Since(began) > 5*time.Second {
		t.Fatalf("Do waited %v past its context", time.Since(began))
	}
}

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on an ended context = %v", err)
	}
}
