package scenario

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/sparkim/spark/bench/internal/hist"
	"github.com/sparkim/spark/bench/internal/plots"
	"github.com/sparkim/spark/bench/internal/session"
	"github.com/sparkim/spark/pkg/protocol"
)

// Stall slows MySQL on purpose while connections heartbeat: a session
// holds every conversation row of the benchmark database with SELECT … FOR
// UPDATE in an open transaction, and senders keep sending into those
// conversations, so logic's send path waits on the locks. HEARTBEAT is
// answered by the gate and must not follow MySQL's latency.
type Stall struct{}

// Name implements Scenario.
func (Stall) Name() string { return "stall" }

// Run implements Scenario.
func (Stall) Run(ctx context.Context, e *Env) (*Result, error) {
	p := e.Profile
	res := &Result{Scenario: "stall", Data: map[string]any{}}
	hbUsers := e.Users(p.StallConns)
	hs := make([]*session.Session, len(hbUsers))
	for i, u := range hbUsers {
		hs[i] = session.New(i, u, fmt.Sprintf("d%d", u))
	}
	if errs := e.ConnectAll(ctx, hs, func(i int) int { return i }, 64, nil); sumMap(errs) > 0 {
		return res, fmt.Errorf("scenario: stall: connect: %v", errs)
	}
	pairs, perrs := e.pairSessions(ctx, 40)
	defer func() {
		for _, s := range append(hs, pairs...) {
			s.Close()
		}
	}()
	if sumMap(perrs) > 0 {
		return res, fmt.Errorf("scenario: stall: connect senders: %v", perrs)
	}
	var senders []int
	for i := range pairs {
		senders = append(senders, i)
	}
	warm := newTraffic(pairs, func(i int) int { return i ^ 1 }, 4, time.Now())
	warm.warm(ctx, senders)
	warm.drain(ctx, 10*time.Second)

	d := p.StallDuration
	hold := min(d/2, 8*time.Second) // under gate.request_timeout (10 s): no 50301 storm
	start := time.Now()
	stallFrom, stallTo := d/4, d/4+hold
	hb := hist.NewSeries(start, time.Second)
	phase := map[string]*hist.Histogram{"before": hist.New(), "during": hist.New(), "after": hist.New()}
	var mu sync.Mutex
	t := newTraffic(pairs, func(i int) int { return i ^ 1 }, 16, start)
	ctx2, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); t.pace(ctx2, senders, 200, d) }()

	// The stall: one transaction locking every conversation row.
	stallErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-time.After(stallFrom):
		case <-ctx2.Done():
			stallErr <- nil
			return
		}
		stallErr <- holdLocks(ctx2, e.C.DSN, hold)
	}()

	// HEARTBEATs: about 1,000 a second spread over the connections.
	interval := time.Duration(float64(time.Second) * float64(len(hs)) / 1000)
	perTick := float64(len(hs)) * float64(10*time.Millisecond) / float64(interval)
	tick := time.NewTicker(10 * time.Millisecond)
	var sent, lost int
	next, owed := 0, 0.0
	for time.Since(start) < d && ctx.Err() == nil {
		<-tick.C
		for owed += perTick; owed >= 1; owed-- {
			s := hs[next%len(hs)]
			next++
			if s.Request(protocol.CmdHeartbeat, nil, func(r session.Reply) {
				if r.Err != nil {
					mu.Lock()
					lost++
					mu.Unlock()
					return
				}
				now := time.Now()
				hb.Record(now, r.RTT)
				el := now.Sub(start) - r.RTT
				ph := "after"
				switch {
				case el < stallFrom:
					ph = "before"
				case el < stallTo:
					ph = "during"
				}
				mu.Lock()
				phase[ph].RecordDuration(r.RTT)
				mu.Unlock()
			}) == nil {
				sent++
			}
		}
	}
	tick.Stop()
	cancel()
	wg.Wait()
	if err := <-stallErr; err != nil {
		res.note("stall did not hold: %v", err)
	}
	time.Sleep(time.Second)
	for _, s := range hs {
		s.ExpireOlder(time.Now())
	}
	t.drain(ctx, 12*time.Second)

	mu.Lock()
	during, before := phase["during"].Summarize(), phase["before"].Summarize()
	mu.Unlock()
	ack := t.ack.Total().Summarize()
	res.atMost("HEARTBEAT p99 during the MySQL stall", during.P99Ms, "ms", 5)
	res.add("HEARTBEAT p99 before the stall", before.P99Ms, "ms")
	res.add("SEND_ACK max (MySQL's latency as seen by senders)", ack.MaxMs, "ms")
	res.add("SEND_ACK p99 over the scenario", ack.P99Ms, "ms")
	res.add("stall held", hold.Seconds(), "s")
	res.Passed = lost == 0 && phase["during"].Count() > 0
	if lost > 0 {
		res.note("%d of %d heartbeats unanswered", lost, sent)
	}
	if codes := t.errorCodes(); len(codes) > 0 {
		res.note("send error codes during the stall: %v", codes)
	}
	res.note("%d heartbeating connections (~1,000 HEARTBEAT/s), 20 pairs sending 200 msg/s into the locked conversations; lock held from %.0f s to %.0f s",
		len(hs), stallFrom.Seconds(), stallTo.Seconds())
	res.Data["heartbeat_before"] = before
	res.Data["heartbeat_during"] = during
	res.Data["heartbeat_after"] = phase["after"].Summarize()
	res.Data["send_ack"] = ack

	hp, ap := hb.Points(), t.ack.Points()
	line := func(name string, ps []hist.Point) plots.Line {
		l := plots.Line{Name: name}
		for _, q := range ps {
			l.X = append(l.X, q.T)
			l.Y = append(l.Y, q.P99Ms)
		}
		return l
	}
	file := "stall_latency.png"
	if err := plots.Lines(filepath.Join(e.OutDir, file), fmt.Sprintf("MySQL stall %.0f–%.0f s: p99 per second", stallFrom.Seconds(), stallTo.Seconds()),
		"seconds", "ms (log)", true, []plots.Line{line("HEARTBEAT p99", hp), line("SEND_ACK p99", ap)}); err == nil {
		res.Plots = append(res.Plots, Plot{Title: "HEARTBEAT vs SEND_ACK during a MySQL stall", File: file})
	}
	return res, nil
}

// holdLocks locks every conversation row of the database for hold, then
// rolls back.
func holdLocks(ctx context.Context, dsn string, hold time.Duration) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return fmt.Errorf("scenario: stall: %w", err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("scenario: stall: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, "SELECT id FROM t_conversations FOR UPDATE")
	if err != nil {
		return fmt.Errorf("scenario: stall: lock: %w", err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	_ = rows.Close()
	if n == 0 {
		return fmt.Errorf("scenario: stall: no conversation rows to lock")
	}
	select {
	case <-time.After(hold):
	case <-ctx.Done():
	}
	return nil
}
