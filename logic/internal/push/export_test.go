package push

import (
	"context"
	"time"
)

// SetSleep replaces the worker's wait between provider retries.
func SetSleep(w *Worker, f func(context.Context, time.Duration) error) { w.sleep = f }

// SetAPNsClock replaces the APNs provider's clock.
func SetAPNsClock(a *APNs, now func() time.Time) { a.now = now }
