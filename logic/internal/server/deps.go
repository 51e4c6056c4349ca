package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/retry"
)

// depRetry paces the start-up wait for a dependency: 100 ms doubling to
// 2 s, without jitter (one logic, one dependency).
var depRetry = retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2}

// awaitDep calls f, each call within 3 s, until it succeeds, returns a
// backoffStop, or ctx ends; each failure is logged.
func awaitDep(ctx context.Context, log *zap.Logger, what string, f func(context.Context) error) error {
	p := depRetry
	p.Retryable = func(err error) bool {
		var stop backoffStop
		return !errors.As(err, &stop)
	}
	p.Notify = func(attempt int, err error, wait time.Duration) {
		log.Warn(what+" unreachable, retrying", zap.Int("attempt", attempt), zap.Duration("backoff", wait), zap.Error(err))
	}
	attempts := 0
	var last error
	err := retry.Do(ctx, p, func(ctx context.Context) error {
		attempts++
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		last = f(actx)
		return last
	})
	switch {
	case err == nil:
		if attempts > 1 {
			log.Info(what+" reachable", zap.Int("attempts", attempts))
		}
		return nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), last)
	default:
		return err
	}
}
