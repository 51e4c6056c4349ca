package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sparkim/spark/tests/framework"
)

// faultPlan shapes the fault scheduler.
type faultPlan struct {
	// Gap is the pause between two faults (uniform in [Gap/2, 3·Gap/2]).
	Gap time.Duration
	// Down is how long a killed or stopped process stays down (uniform
	// in [Down/2, 3·Down/2]).
	Down time.Duration
	// Outage is how long Redis and MySQL are stopped, once each.
	Outage time.Duration
	// EveryFault keeps faulting past the window until every process
	// fault pair has been injected and both outages have happened.
	EveryFault bool
}

// faults kills and restarts processes of a cluster, one at a time, so at
// least one of each kind always runs, and stops Redis and MySQL once
// each, at about 30 % and 60 % of the window.
type faults struct {
	c    *framework.Cluster
	hist *History
	rng  *rand.Rand
	plan faultPlan
	logf func(string, ...any)
	deck []processFault // what nextProcessFault deals next
	// injected holds the process fault pairs injected so far.
	injected map[processFault]bool
}

type target struct {
	kind string
	proc *framework.Process
}

func (f *faults) targets() []target {
	var ts []target
	for _, g := range f.c.Gates {
		ts = append(ts, target{"gate", g.Process})
	}
	for _, l := range f.c.Logics {
		ts = append(ts, target{"logic", l.Process})
	}
	for _, d := range f.c.Delivers {
		ts = append(ts, target{"deliver", d.Process})
	}
	return ts
}

func (f *faults) jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(f.rng.Int64N(int64(d)+1))
}

func (f *faults) record(detail string, err error) {
	e := Event{Kind: KindFault, Detail: detail}
	if err != nil {
		e.Err = err.Error()
	}
	f.hist.Add(e)
	if f.logf != nil {
		if err != nil {
			f.logf("fault: %s: %v", detail, err)
		} else {
			f.logf("fault: %s", detail)
		}
	}
}

// run injects faults until ctx ends or window has passed (and, with
// EveryFault, every fault has happened), then makes sure everything runs
// again.
func (f *faults) run(ctx context.Context, window time.Duration) {
	start := time.Now()
	redisAt, mysqlAt := start.Add(window*3/10), start.Add(window*6/10)
	redisDone, mysqlDone := false, false
	more := func() bool {
		if time.Since(start) < window {
			return true
		}
		return f.plan.EveryFault && (!redisDone || !mysqlDone || len(f.injected) < len(processKinds)*len(processSignals))
	}
	for ctx.Err() == nil && more() {
		if !sleepCtx(ctx, f.jitter(f.plan.Gap)) {
			break
		}
		switch {
		case !redisDone && time.Now().After(redisAt):
			redisDone = true
			f.outage(ctx, "redis", f.c.Redis.Stop, f.c.Redis.Start)
		case !mysqlDone && time.Now().After(mysqlAt):
			mysqlDone = true
			if f.c.MySQL == nil {
				f.record("mysql outage skipped: the cluster uses the shared MySQL", nil)
				continue
			}
			f.outage(ctx, "mysql", f.c.MySQL.Stop, f.c.MySQL.Start)
		default:
			f.processFault(ctx)
		}
	}
	f.restoreAll()
}

func (f *faults) outage(ctx context.Context, name string, stop, start func() error) {
	f.record(name+" stop", stop())
	sleepCtx(ctx, f.plan.Outage)
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = start(); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	f.record(name+" start", err)
}

// processKinds and processSignals are the process faults: each kind
// killed (kill -9) or stopped (SIGTERM).
var (
	processKinds   = [...]string{"gate", "logic", "deliver"}
	processSignals = [...]string{"kill -9", "SIGTERM"}
)

// processFault is one (kind, signal) pair of a process fault.
type processFault struct{ kind, how string }

// nextProcessFault deals the next pair from a shuffled deck of all of
// them, dealt anew when empty: every six process faults hit every kind
// with either signal once, so a short window still has each of them,
// where independent draws would miss one in five 5-minute runs.
func (f *faults) nextProcessFault() processFault {
	if len(f.deck) == 0 {
		for _, k := range processKinds {
			for _, h := range processSignals {
				f.deck = append(f.deck, processFault{k, h})
			}
		}
		f.rng.Shuffle(len(f.deck), func(i, j int) { f.deck[i], f.deck[j] = f.deck[j], f.deck[i] })
	}
	pf := f.deck[len(f.deck)-1]
	f.deck = f.deck[:len(f.deck)-1]
	return pf
}

func (f *faults) processFault(ctx context.Context) {
	// A kind first, then one of its processes: each kind is hit as
	// often, whatever their numbers.
	pf := f.nextProcessFault()
	var ts []target
	for _, t := range f.targets() {
		if t.kind == pf.kind {
			ts = append(ts, t)
		}
	}
	t := ts[f.rng.IntN(len(ts))]
	if !t.proc.Running() {
		return
	}
	var err error
	if pf.how == "SIGTERM" {
		err = t.proc.Stop()
	} else {
		err = t.proc.Kill()
	}
	f.record(fmt.Sprintf("%s %s", pf.how, t.proc.Name), err)
	if err == nil {
		if f.injected == nil {
			f.injected = map[processFault]bool{}
		}
		f.injected[pf] = true
	}
	sleepCtx(ctx, f.jitter(f.plan.Down))
	f.restart(t.proc)
}

func (f *faults) restart(p *framework.Process) {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err = p.Start(sctx)
		cancel()
		if err == nil {
			break
		}
		_ = p.Kill() // a start that did not get ready may still run
		time.Sleep(time.Second)
	}
	f.record("restart "+p.Name, err)
}

// restoreAll restarts whatever is still down.
func (f *faults) restoreAll() {
	for _, t := range f.targets() {
		if !t.proc.Running() {
			f.restart(t.proc)
		}
	}
}

// galeraFailover kills the Galera writer a third into the window and moves
// every logic to the next node, then lets the load run to the window's
// end: acknowledged sends committed on the dead writer must all be on the
// new one, once.
func (f *faults) galeraFailover(ctx context.Context, window time.Duration) {
	start := time.Now()
	if !sleepCtx(ctx, window/3) {
		return
	}
	old := f.c.Writer
	f.record(fmt.Sprintf("galera writer node %d kill -9", old+1), f.c.Galera.Nodes[old].Kill())
	// The operator notices: a moment without a database for logic.
	sleepCtx(ctx, 2*time.Second)
	next := (old + 1) % len(f.c.Galera.Nodes)
	f.record(fmt.Sprintf("failover to galera node %d", next+1), f.c.FailOverTo(ctx, next))
	if n, err := f.c.Galera.ClusterSize(next); err != nil || n != len(f.c.Galera.Nodes)-1 {
		f.record(fmt.Sprintf("galera cluster size after the kill: %d", n), err)
	}
	sleepCtx(ctx, window-time.Since(start))
}
