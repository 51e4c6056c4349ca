package chaos

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Restart is one step of a rolling restart and how the devices came back
// from it.
type Restart struct {
	Process string `json:"process"`
	// TookMs is from the SIGTERM to the restarted process being ready.
	TookMs int64  `json:"took_ms"`
	Err    string `json:"error,omitempty"`
	// Reconnected devices opened a new connection during the step; their
	// delays are from the SIGTERM to their new connection.
	Reconnected  int   `json:"reconnected"`
	ReconnectP50 int64 `json:"reconnect_p50_ms"`
	ReconnectP90 int64 `json:"reconnect_p90_ms"`
	ReconnectMax int64 `json:"reconnect_max_ms"`
	// FirstMs and LastMs are the first and last reconnect after the
	// SIGTERM: the storm's spread.
	FirstMs int64 `json:"first_ms"`
	LastMs  int64 `json:"last_ms"`
}

// rollingSteady is the load's time between two steps.
const rollingSteady = 3 * time.Second

// rollingQuiet ends a step's watch once no device reconnected for this
// long after the restarted process was ready.
const rollingQuiet = 2 * time.Second

// rolling restarts every gate, then every logic, then every deliver, one
// at a time (SIGTERM, wait for the exit, start, wait until ready), as an
// operator rolls a release, while the load runs; it measures each step's
// reconnect storm from the devices' sessions.
func (f *faults) rolling(ctx context.Context, slots []*slot) []Restart {
	var out []Restart
	for _, t := range f.targets() {
		if !sleepCtx(ctx, rollingSteady) {
			break
		}
		before := make([]int, len(slots))
		for i, s := range slots {
			before[i] = s.device().session().Connects()
		}
		r := Restart{Process: t.proc.Name}
		t0 := time.Now()
		// Watch the devices come back while the process stops and starts:
		// a delay per device that connected again, until none did for
		// rollingQuiet after the process was ready (at most 20 s after).
		var (
			mu     sync.Mutex
			delays = map[int]time.Duration{}
			last   = t0
			ready  = make(chan struct{})
			done   = make(chan struct{})
		)
		go func() {
			defer close(done)
			var readyAt time.Time
			for {
				now := time.Now()
				mu.Lock()
				for i, s := range slots {
					if _, seen := delays[i]; !seen && s.device().session().Connects() > before[i] {
						delays[i], last = now.Sub(t0), now
					}
				}
				quiet := now.Sub(last)
				mu.Unlock()
				select {
				case <-ready:
					if readyAt.IsZero() {
						readyAt = now
					}
				default:
				}
				if !readyAt.IsZero() && (now.Sub(readyAt) > 20*time.Second || (quiet > rollingQuiet && now.Sub(readyAt) > rollingQuiet)) {
					return
				}
				if !sleepCtx(ctx, 20*time.Millisecond) {
					return
				}
			}
		}()
		err := t.proc.Stop()
		f.record("rolling SIGTERM "+t.proc.Name, err)
		f.restart(t.proc)
		r.TookMs = time.Since(t0).Milliseconds()
		if err != nil {
			r.Err = err.Error()
		}
		close(ready)
		<-done
		ms := make([]int64, 0, len(delays))
		for _, d := range delays {
			ms = append(ms, d.Milliseconds())
		}
		slices.Sort(ms)
		if n := len(ms); n > 0 {
			r.Reconnected = n
			r.ReconnectP50, r.ReconnectP90, r.ReconnectMax = ms[n/2], ms[n*9/10], ms[n-1]
			r.FirstMs, r.LastMs = ms[0], ms[n-1]
		}
		f.logf("rolling: %s back in %d ms, %d devices reconnected (p50 %d ms, p90 %d ms, max %d ms)",
			r.Process, r.TookMs, r.Reconnected, r.ReconnectP50, r.ReconnectP90, r.ReconnectMax)
		out = append(out, r)
	}
	f.restoreAll()
	return out
}

// restartTable renders the steps for the verdict file.
func restartTable(rs []Restart) string {
	s := "rolling restart: process, SIGTERM to ready, devices reconnected, reconnect delay p50 / p90 / max after the SIGTERM\n"
	for _, r := range rs {
		s += fmt.Sprintf("  %-10s %6d ms  %3d  %6d / %6d / %6d ms", r.Process, r.TookMs, r.Reconnected, r.ReconnectP50, r.ReconnectP90, r.ReconnectMax)
		if r.Err != "" {
			s += "  error: " + r.Err
		}
		s += "\n"
	}
	return s
}
