package scenario

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sparkim/spark/bench/internal/hist"
	"github.com/sparkim/spark/bench/internal/session"
)

// Reconnect drops N clients at once by restarting their gate with SIGTERM
// and measures the time until every one is authenticated again and has
// synced (SYNC_INBOX to the last page).
type Reconnect struct{}

// Name implements Scenario.
func (Reconnect) Name() string { return "reconnect" }

// Run implements Scenario.
func (Reconnect) Run(ctx context.Context, e *Env) (*Result, error) {
	p := e.Profile
	res := &Result{Scenario: "reconnect", Data: map[string]any{}}
	gi := len(e.C.Gates) - 1
	users := e.Users(p.ReconnectN)
	ss := make([]*session.Session, len(users))
	up := make([]atomic.Bool, len(users))
	dropped := make(chan int, len(users))
	for i, u := range users {
		ss[i] = session.New(i, u, fmt.Sprintf("d%d", u))
		ss[i].OnClosed = func(s *session.Session, _ error) {
			if up[s.Index].CompareAndSwap(true, false) {
				dropped <- s.Index
			}
		}
	}
	defer func() {
		for _, s := range ss {
			s.Close()
		}
	}()
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[string]int{}
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				tok, err := e.Token(ss[i].UserID, ss[i].Device)
				if err == nil {
					cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
					_, err = ss[i].Connect(cctx, e.Engine, e.Locals[i%len(e.Locals)], e.GateAddr(gi), tok)
					cancel()
				}
				if err != nil {
					mu.Lock()
					errs[trimErr(err)]++
					mu.Unlock()
					continue
				}
				up[i].Store(true)
			}
		}()
	}
	for i := range ss {
		work <- i
	}
	close(work)
	wg.Wait()
	if sumMap(errs) > 0 {
		return res, fmt.Errorf("scenario: reconnect: initial connect: %v", errs)
	}

	back := hist.New()
	var lastDone atomic.Int64
	var synced, retries atomic.Int64
	syncErrs := map[string]int{}
	t0 := time.Now()
	var downAt time.Duration
	reconnect := func(i int) {
		s := ss[i]
		deadline := t0.Add(90 * time.Second)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			tok, err := e.Token(s.UserID, s.Device)
			if err == nil {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err = s.Connect(cctx, e.Engine, e.Locals[i%len(e.Locals)], e.GateAddr(gi), tok)
				if err == nil {
					up[i].Store(true)
					_, err = s.SyncInbox(cctx)
					if err != nil {
						mu.Lock()
						syncErrs[trimErr(err)]++
						mu.Unlock()
					}
				}
				cancel()
			}
			if err == nil {
				d := time.Since(t0)
				mu.Lock()
				back.RecordDuration(d)
				mu.Unlock()
				synced.Add(1)
				for {
					old := lastDone.Load()
					if int64(d) <= old || lastDone.CompareAndSwap(old, int64(d)) {
						break
					}
				}
				return
			}
			retries.Add(1)
			// A real client backs off with jitter so a restarted gate is
			// not hit by every client in the same millisecond.
			time.Sleep(time.Duration(50+rand.IntN(200)) * time.Millisecond)
		}
	}
	var rw sync.WaitGroup
	for w := 0; w < 128; w++ {
		rw.Add(1)
		go func() {
			defer rw.Done()
			for {
				select {
				case i := <-dropped:
					reconnect(i)
				case <-time.After(3 * time.Second):
					if synced.Load() == int64(len(ss)) || time.Since(t0) > 90*time.Second {
						return
					}
				}
			}
		}()
	}
	restartErr := e.C.RestartGate(ctx, gi, syscall.SIGTERM, func() { downAt = time.Since(t0) })
	readyAt := time.Since(t0)
	rw.Wait()
	if restartErr != nil {
		return res, fmt.Errorf("scenario: reconnect: %w", restartErr)
	}
	n := synced.Load()
	total := time.Duration(lastDone.Load())
	res.atMost(fmt.Sprintf("all %d back and synced", len(ss)), total.Seconds(), "s", 15)
	bs := back.Summarize()
	res.add("per client p50", bs.P50Ms/1000, "s")
	res.add("per client p99", bs.P99Ms/1000, "s")
	res.add("gate down after SIGTERM", downAt.Seconds(), "s")
	res.add("gate ready again", readyAt.Seconds(), "s")
	res.add("connect retries", float64(retries.Load()), "")
	res.Passed = n == int64(len(ss)) && len(syncErrs) == 0
	if !res.Passed {
		res.note("%d of %d back and synced; sync errors %v", n, len(ss), syncErrs)
	}
	if p.ReconnectN < 10000 {
		res.note("this profile drops %d clients; the 10,000 target is measured by the long profile", p.ReconnectN)
	}
	res.note("all clients on %s, restarted with SIGTERM on the same ports; times from the SIGTERM", e.C.Gates[gi].ID)
	res.Data["per_client"] = bs
	return res, nil
}
