package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// retry calls f with exponential backoff (100 ms doubling to 2 s) until it
// succeeds or ctx ends; each failure is logged.
func retry(ctx context.Context, log *zap.Logger, what string, f func(context.Context) error) error {
	d := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			if attempt > 1 {
				log.Info(what+" reachable", zap.Int("attempts", attempt))
			}
			return nil
		}
		var stop backoffStop
		if errors.As(err, &stop) {
			return err
		}
		log.Warn(what+" unreachable, retrying", zap.Int("attempt", attempt), zap.Duration("backoff", d), zap.Error(err))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		case <-t.C:
		}
		if d *= 2; d > 2*time.Second {
			d = 2 * time.Second
		}
	}
}
