package scenario

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/sparkim/spark/bench/internal/hist"
	"github.com/sparkim/spark/bench/internal/plots"
	"github.com/sparkim/spark/bench/internal/session"
)

// P2P has U online users in pairs (the two of a pair on different gates)
// send to each other at a target total rate for D seconds.
type P2P struct{}

// Name implements Scenario.
func (P2P) Name() string { return "p2p" }

// pairSessions connects n users, partner of i is i^1.
func (e *Env) pairSessions(ctx context.Context, n int) ([]*session.Session, map[string]int) {
	users := e.Users(n)
	ss := make([]*session.Session, n)
	for i, u := range users {
		ss[i] = session.New(i, u, fmt.Sprintf("d%d", u))
	}
	errs := e.ConnectAll(ctx, ss, func(i int) int { return i }, 64, nil)
	return ss, errs
}

// warm sends one message per pair and waits for the acks, so conversations
// exist before the measured window (the first message creates them).
func (t *traffic) warm(ctx context.Context, senders []int) {
	done := make(chan int64, len(senders))
	for _, i := range senders {
		if !t.send(i, func(id int64) { done <- id }) {
			done <- 0
		}
	}
	for range senders {
		select {
		case <-done:
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Second):
			return
		}
	}
}

// Run implements Scenario.
func (P2P) Run(ctx context.Context, e *Env) (*Result, error) {
	p := e.Profile
	res := &Result{Scenario: "p2p", Data: map[string]any{}}
	ss, cerrs := e.pairSessions(ctx, p.P2PUsers&^1)
	defer func() {
		for _, s := range ss {
			s.Close()
		}
	}()
	if n := sumMap(cerrs); n > 0 {
		return res, fmt.Errorf("scenario: p2p: %d connections failed: %v", n, cerrs)
	}
	warmT := newTraffic(ss, func(i int) int { return i ^ 1 }, p.P2PWindow, time.Now())
	var evens, all []int
	for i := range ss {
		all = append(all, i)
		if i%2 == 0 {
			evens = append(evens, i)
		}
	}
	warmT.warm(ctx, evens)
	warmT.drain(ctx, 10*time.Second)
	warmT.settle(ctx, 5*time.Second)

	start := time.Now()
	t := newTraffic(ss, func(i int) int { return i ^ 1 }, p.P2PWindow, start)
	cpu0 := e.CPU()
	t.pace(ctx, all, float64(p.P2PRate), p.P2PDuration)
	window := time.Since(start)
	cpu1 := e.CPU()
	deliveredInWindow := t.received.Load()
	t.drain(ctx, 15*time.Second)
	led := t.settle(ctx, p.Grace)

	cpu := cpu1.Sub(cpu0)
	server := cpu["logic"] + cpu["deliver"]
	for _, g := range e.C.Gates {
		server += cpu[g.ID]
	}
	storage := cpu["mysql"] + cpu["redis"]
	ackS, e2eS := t.ack.Total().Summarize(), t.e2e.Total().Summarize()
	achieved := float64(t.acked.Load()) / window.Seconds()
	res.atLeast("achieved rate (acked msg/s)", achieved, "msg/s", 5000)
	res.add("target rate of this profile", float64(p.P2PRate), "msg/s")
	res.atMost("SEND_ACK p99", ackS.P99Ms, "ms", 50)
	res.add("SEND_ACK p50", ackS.P50Ms, "ms")
	res.add("SEND_ACK p999", ackS.P999, "ms")
	res.atMost("end-to-end p99", e2eS.P99Ms, "ms", 100)
	res.add("end-to-end p50", e2eS.P50Ms, "ms")
	res.add("end-to-end p999", e2eS.P999, "ms")
	if e.Ceiling > 0 {
		res.atLeast("fraction of raw send-transaction rate", 100*achieved/e.Ceiling, "%", 90)
	}
	perMsg := func(sec float64) float64 { return 1000 * sec / float64(max(deliveredInWindow, 1)) }
	if e.C.MySQLPID != 0 && e.C.RedisPID != 0 {
		res.atMost("CPU per delivered message (all processes of the system)", perMsg(server+storage), "ms", 0.4)
	} else {
		res.note("MySQL or Redis runs outside this machine's view: CPU per message covers gate+logic+deliver only")
	}
	res.add("CPU per delivered message (gate+logic+deliver)", perMsg(server), "ms")
	res.add("acked", float64(led.Acked), "")
	res.add("lost", float64(led.Lost), "")
	res.add("duplicates", float64(led.Duplicates), "")
	codes := t.errorCodes()
	res.add("errors (non-0 answers + no answer)", float64(sumMap(codes))+float64(t.failed.Load()), "")
	res.add("not sent: sender's in-flight window full", float64(t.skipped.Load()), "")
	res.Passed = led.OK() && led.Acked > 0
	if !led.OK() {
		res.note("FAIL: %d acked messages lost, %d duplicated, %d misrouted (first lost: %v)", led.Lost, led.Duplicates, led.Misrouted, led.LostIDs)
	}
	if sumMap(codes) > 0 {
		res.note("error codes: %v", codes)
	}
	if led.Unexpected > 0 {
		res.note("%d messages arrived whose SEND_ACK never came (committed, answer lost or late)", led.Unexpected)
	}
	res.note("%d users in %d pairs, each pair across two gates; window %d in-flight sends per user; measured window %.1f s",
		len(ss), len(ss)/2, p.P2PWindow, window.Seconds())
	res.Data["cpu_seconds"] = cpu
	res.Data["send_ack"] = ackS
	res.Data["end_to_end"] = e2eS
	res.Data["ledger"] = led
	res.Data["error_codes"] = codes
	res.Data["ack_series"] = t.ack.Points()
	res.Data["e2e_series"] = t.e2e.Points()

	ap, ep := t.ack.Points(), t.e2e.Points()
	xs := func(ps []hist.Point) []float64 {
		out := make([]float64, len(ps))
		for i, q := range ps {
			out[i] = q.T
		}
		return out
	}
	ys := func(ps []hist.Point, f func(hist.Point) float64) []float64 {
		out := make([]float64, len(ps))
		for i, q := range ps {
			out[i] = f(q)
		}
		return out
	}
	lat := "p2p_latency.png"
	if err := plots.Lines(filepath.Join(e.OutDir, lat), "p2p latency per second", "seconds", "ms (log)", true, []plots.Line{
		{Name: "SEND_ACK p50", X: xs(ap), Y: ys(ap, func(q hist.Point) float64 { return q.P50Ms })},
		{Name: "SEND_ACK p99", X: xs(ap), Y: ys(ap, func(q hist.Point) float64 { return q.P99Ms })},
		{Name: "end-to-end p50", X: xs(ep), Y: ys(ep, func(q hist.Point) float64 { return q.P50Ms })},
		{Name: "end-to-end p99", X: xs(ep), Y: ys(ep, func(q hist.Point) float64 { return q.P99Ms })},
		{Name: "end-to-end p999", X: xs(ep), Y: ys(ep, func(q hist.Point) float64 { return q.P999 })},
	}); err == nil {
		res.Plots = append(res.Plots, Plot{Title: "p2p latency percentiles over time", File: lat})
	} else {
		res.note("plot: %v", err)
	}
	thr := "p2p_throughput.png"
	target := make([]float64, len(ap))
	for i := range target {
		target[i] = float64(p.P2PRate)
	}
	if err := plots.Lines(filepath.Join(e.OutDir, thr), "p2p throughput per second", "seconds", "messages/s", false, []plots.Line{
		{Name: "acked", X: xs(ap), Y: ys(ap, func(q hist.Point) float64 { return float64(q.Count) })},
		{Name: "delivered", X: xs(ep), Y: ys(ep, func(q hist.Point) float64 { return float64(q.Count) })},
		{Name: "target", X: xs(ap), Y: target},
	}); err == nil {
		res.Plots = append(res.Plots, Plot{Title: "p2p throughput over time", File: thr})
	} else {
		res.note("plot: %v", err)
	}
	return res, nil
}
