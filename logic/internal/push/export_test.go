package push

import (
	"context"
	"time"
)

// SetSleep replaces the worker's wait between provider retries.
func SetSleep(w *Worker, f func(context.Context, time.Duration) error) { w.sleep = f }
