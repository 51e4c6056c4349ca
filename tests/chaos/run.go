package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/tests/framework"
)

// Phases of a run, as KindPhase events name them.
const (
	PhaseSetup      = "setup"
	PhaseLoad       = "load"
	PhaseRecovery   = "recovery"
	PhaseOutbox     = "outbox"
	PhaseCalmStart  = "calm_start"
	PhaseCalmEnd    = "calm_end"
	PhaseFinalSync  = "final_sync"
	PhaseFinalInbox = "final_inbox"
	PhaseDone       = "done"
)

// partitions is the deliver queue's partition count in a chaos cluster.
const partitions = 8

// DropOneJob is the failpoint that makes each deliver ack one message job
// without updating any list and without pushing it.
const DropOneJob = "deliver/job/drop=1*error"

// Config shapes a run. The zero value of each field takes its default.
type Config struct {
	// Duration is the window of load under faults (default 5 minutes);
	// setup, recovery, the calm phase and the final checks come on top
	// (about a minute and a half).
	Duration time.Duration
	// Seed makes the choices of load and faults repeatable (0: from the
	// clock).
	Seed uint64
	// Users (default 12) each have two devices; Groups (default 3) of
	// GroupSize (default 5) members.
	Users, Groups, GroupSize int
	// FaultGap and FaultDown are the mean pause between faults and the
	// mean time a process stays down (defaults 10 s and 4 s); Outage is
	// how long Redis and MySQL are stopped (default 10 s).
	FaultGap, FaultDown, Outage time.Duration
	// EveryFault stretches the window past Duration until every process
	// fault (each kind killed and stopped) and both outages have
	// happened, so a short window still proves them all instead of
	// being sized for the unluckiest deal.
	EveryFault bool
	// Rolling replaces the random faults with a rolling restart: every
	// gate, then every logic, then every deliver, SIGTERM and restart one
	// at a time under the load (Duration, the outages and EveryFault are
	// then unused); Result.Restarts has each step's reconnect figures.
	Rolling bool
	// GaleraFailover runs the cluster on a three-node Galera cluster and
	// replaces the random faults with one: a third into the window the
	// writer node is killed (kill -9), and every logic is moved to the
	// second node, as an operator fails over; the load runs on for the
	// rest of Duration.
	GaleraFailover bool
	// Calm is the length of the calm phase (default 15 s).
	Calm time.Duration
	// Failpoint, when set ("name=action"), is armed on every deliver at
	// the start of the calm phase, to break the build on purpose:
	// DropOneJob makes each deliver drop one message job, and the
	// verdict must then be FAIL.
	Failpoint string
	// History receives the history as JSON lines (nil: kept in memory
	// only).
	History io.Writer
	// Logf reports progress (nil: silent).
	Logf func(format string, args ...any)
}

func (c *Config) defaults() {
	if c.Duration <= 0 {
		c.Duration = 5 * time.Minute
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Users <= 0 {
		c.Users = 12
	}
	if c.Groups <= 0 {
		c.Groups = 3
	}
	if c.GroupSize <= 0 {
		c.GroupSize = 5
	}
	if c.FaultGap <= 0 {
		c.FaultGap = 10 * time.Second
	}
	if c.FaultDown <= 0 {
		c.FaultDown = 4 * time.Second
	}
	if c.Outage <= 0 {
		c.Outage = 10 * time.Second
	}
	if c.Calm <= 0 {
		c.Calm = 15 * time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Result is a run's outcome.
type Result struct {
	Verdict Verdict
	Seed    uint64
	Events  []Event
	Truth   Truth
	// Elapsed is the whole run, setup and checks included.
	Elapsed time.Duration
	// Undrained reports a deliver queue that still held jobs at the end
	// of the wait (the checks then ran anyway).
	Undrained string
	// OutboxLeft counts operations still without an answer after the
	// outbox flush (uncertain for good).
	OutboxLeft int
	// Restarts are a rolling run's steps.
	Restarts []Restart
}

// Run starts a cluster of 3 gates, 2 logic and 2 deliver processes with
// a private Redis and MySQL, runs the load under faults for
// cfg.Duration, lets everything recover, runs the calm phase, syncs every
// device, reads every user's list and checks the history against MySQL.
// An error means the run could not be carried out; a broken system is a
// FAIL verdict.
func Run(ctx context.Context, t testing.TB, cfg Config) (Result, error) {
	cfg.defaults()
	began := time.Now()
	res := Result{Seed: cfg.Seed}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	hist := NewHistory(cfg.History)
	hist.Add(Event{Kind: KindPhase, Detail: PhaseSetup, Err: fmt.Sprintf("seed %d", cfg.Seed)})

	opts := framework.Options{Gates: 3, Logics: 2, Delivers: 2, Partitions: partitions, PrivateMySQL: true}
	if cfg.Rolling {
		// A gate on SIGTERM spreads its kicks as in production, so the
		// reconnect storm is the one an operator's rollout makes.
		opts.GateEnv = []string{"IM_GATE_SHUTDOWN_KICK_WINDOW=3s"}
	}
	if cfg.GaleraFailover {
		opts.PrivateMySQL, opts.Galera = false, true
	}
	c := framework.NewCluster(t, opts)
	var addrs []string
	for _, g := range c.Gates {
		addrs = append(addrs, g.TCPAddr)
	}
	cfg.Logf("cluster up: gates %v", addrs)

	w, slots, err := setup(ctx, c, cfg, rng, addrs, hist)
	defer func() {
		for _, s := range slots {
			if d := s.device(); d != nil {
				d.stop()
			}
		}
	}()
	if err != nil {
		return res, err
	}

	// Load under faults.
	hist.Add(Event{Kind: KindPhase, Detail: PhaseLoad})
	cfg.Logf("load under faults for %v", cfg.Duration)
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, s := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(ctx, loadCtx, w, 150*time.Millisecond, 650*time.Millisecond, false)
		}()
	}
	f := &faults{c: c, hist: hist, rng: rand.New(rand.NewPCG(cfg.Seed+1, cfg.Seed)), logf: cfg.Logf,
		plan: faultPlan{Gap: cfg.FaultGap, Down: cfg.FaultDown, Outage: cfg.Outage, EveryFault: cfg.EveryFault}}
	switch {
	case cfg.Rolling:
		res.Restarts = f.rolling(ctx, slots)
	case cfg.GaleraFailover:
		f.galeraFailover(ctx, cfg.Duration)
	default:
		f.run(ctx, cfg.Duration)
	}

	// Recovery: everything runs again; the load goes on a little without
	// faults, then stops.
	hist.Add(Event{Kind: KindPhase, Detail: PhaseRecovery})
	cfg.Logf("recovery")
	sleepCtx(ctx, 10*time.Second)
	stopLoad()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("chaos: run interrupted: %w", err)
	}

	// Outbox: operations whose answers were lost are repeated.
	hist.Add(Event{Kind: KindPhase, Detail: PhaseOutbox})
	res.OutboxLeft = forSlots(slots, func(s *slot) int { return s.flush(ctx) })
	cfg.Logf("outbox flushed, %d left uncertain", res.OutboxLeft)

	// Calm phase: sends only, nothing failing (unless Failpoint breaks
	// deliver on purpose); devices connected throughout must get every
	// message by push.
	if err := waitConnected(ctx, slots); err != nil {
		return res, err
	}
	// Every device syncs first, as after a sign-in: the lists' states are
	// then all built in Redis, so the calm phase's messages are counted
	// incrementally by deliver (not rebuilt from MySQL at the final read)
	// and a job deliver drops shows in unread.
	forSlots(slots, func(s *slot) int {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = s.device().sync(sctx)
		return 0
	})
	before := map[*slot]int{}
	for _, s := range slots {
		before[s] = s.device().session().Connects()
	}
	if cfg.Failpoint != "" {
		name, action, ok := strings.Cut(cfg.Failpoint, "=")
		if !ok {
			return res, fmt.Errorf("chaos: failpoint %q is not name=action", cfg.Failpoint)
		}
		for _, d := range c.Delivers {
			if err := framework.Failpoint(d.AdminAddr, name, action); err != nil {
				return res, err
			}
		}
		cfg.Logf("armed %s on every deliver", cfg.Failpoint)
	}
	hist.Add(Event{Kind: KindPhase, Detail: PhaseCalmStart})
	cfg.Logf("calm phase for %v", cfg.Calm)
	calmCtx, stopCalm := context.WithTimeout(ctx, cfg.Calm)
	for _, s := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(ctx, calmCtx, w, 300*time.Millisecond, 900*time.Millisecond, true)
		}()
	}
	wg.Wait()
	stopCalm()
	res.Undrained = waitDrained(ctx, c, 120*time.Second)
	sleepCtx(ctx, 2*time.Second) // the last pushes on their way
	for _, s := range slots {
		sess := s.device().session()
		cctx, cancel := context.WithCancel(ctx)
		cancel() // Conn answers at once: connected now or not
		_, err := sess.Conn(cctx)
		if err == nil && sess.Connects() == before[s] {
			d := s.device()
			hist.Add(Event{Kind: KindSteady, Device: d.id, User: d.user})
		}
	}
	hist.Add(Event{Kind: KindPhase, Detail: PhaseCalmEnd})
	if res.Undrained != "" {
		cfg.Logf("deliver queue not drained: %s", res.Undrained)
	}

	// Final sync of every device, then every user's list from cursor 0.
	hist.Add(Event{Kind: KindPhase, Detail: PhaseFinalSync})
	forSlots(slots, func(s *slot) int {
		d := s.device()
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err = d.sync(sctx)
			cancel()
			if err == nil {
				hist.Add(Event{Kind: KindDeviceEnd, Device: d.id, User: d.user})
				return 0
			}
			cfg.Logf("final sync of %s: %v", d.id, err)
			sleepCtx(ctx, time.Second)
		}
		// With everything running again, a device that cannot sync is a
		// failure of the system, not of the run.
		hist.Add(Event{Kind: KindDeviceEnd, Device: d.id, User: d.user, Err: err.Error()})
		return 1
	})
	forSlots(slots, func(s *slot) int {
		d := s.device()
		for _, cid := range d.conversations() {
			if err := finalList(ctx, d, cid, hist); err != nil {
				cfg.Logf("final list of %s in %d: %v", d.id, cid, err)
			}
		}
		return 0
	})
	hist.Add(Event{Kind: KindPhase, Detail: PhaseFinalInbox})
	for _, s := range slots {
		if s.name[len(s.name)-1] != 'a' {
			continue // one device per user reads the list
		}
		if err := finalInbox(ctx, s.device(), hist); err != nil {
			cfg.Logf("final inbox of user %d: %v", s.user, err)
			hist.Add(Event{Kind: KindInboxDone, Device: s.device().id, User: s.user, Err: err.Error()})
		}
	}
	hist.Add(Event{Kind: KindPhase, Detail: PhaseDone})

	tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	truth, err := LoadTruth(tctx, c.DB())
	if err != nil {
		return res, err
	}
	res.Events = hist.Events()
	res.Truth = truth
	res.Verdict = Check(res.Events, truth)
	res.Elapsed = time.Since(began)
	if err := hist.Flush(); err != nil {
		return res, err
	}
	return res, nil
}

// setup signs every device in and creates the groups and the P2P pairs.
func setup(ctx context.Context, c *framework.Cluster, cfg Config, rng *rand.Rand, addrs []string, hist *History) (*world, []*slot, error) {
	w := &world{peers: map[int64][]int64{}, groupsOf: map[int64][]group{}}
	for i := 0; i < cfg.Users; i++ {
		w.users = append(w.users, int64(1001+i))
	}
	// Each user talks to the next three users (a ring), so every user
	// has P2P conversations with up to six others.
	for i, u := range w.users {
		for k := 1; k <= 3; k++ {
			p := w.users[(i+k)%len(w.users)]
			if p != u {
				w.peers[u] = append(w.peers[u], p)
				w.peers[p] = append(w.peers[p], u)
			}
		}
	}
	var slots []*slot
	for i, u := range w.users {
		for j, suffix := range []string{"a", "b"} {
			// Each device lists the gates from a different one, so the
			// devices spread over them.
			k := (2*i + j) % len(addrs)
			order := append(append([]string(nil), addrs[k:]...), addrs[:k]...)
			s := &slot{name: fmt.Sprintf("u%d%s", u, suffix), user: u, fresh: suffix == "b", addrs: order, hist: hist,
				rng:    rand.New(rand.NewPCG(cfg.Seed+uint64(2*i+j)+7, uint64(u))),
				tokens: func(string) string { return c.Token(u, "") }}
			d, err := newDevice(ctx, s.name, u, order, s.tokens(s.name), hist)
			if err != nil {
				return w, slots, err
			}
			s.dev = d
			slots = append(slots, s)
			if err := d.start(); err != nil {
				return w, slots, err
			}
		}
	}
	if err := waitConnected(ctx, slots); err != nil {
		return w, slots, err
	}
	for g := 0; g < cfg.Groups; g++ {
		perm := rng.Perm(len(w.users))
		members := make([]int64, 0, cfg.GroupSize)
		for _, p := range perm[:min(cfg.GroupSize, len(perm))] {
			members = append(members, w.users[p])
		}
		owner := slots[2*indexOf(w.users, members[0])].device()
		gctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		conn, err := owner.conn(gctx)
		if err != nil {
			cancel()
			return w, slots, fmt.Errorf("chaos: owner of group %d: %w", g, err)
		}
		ch, err := conn.CreateGroup(gctx, client.NewGroup{Name: fmt.Sprintf("chaos-%d", g), MemberIDs: members[1:]})
		cancel()
		if err != nil {
			return w, slots, fmt.Errorf("chaos: create group %d: %w", g, err)
		}
		gr := group{id: ch.Group.GroupID.Int64(), conv: ch.Group.ConversationID.Int64(), members: members}
		for _, m := range members {
			w.groupsOf[m] = append(w.groupsOf[m], gr)
		}
		hist.Add(Event{Kind: KindPhase, Detail: fmt.Sprintf("group %d conversation %d members %v", gr.id, gr.conv, members)})
	}
	cfg.Logf("%d devices signed in, %d groups", len(slots), cfg.Groups)
	return w, slots, nil
}

func indexOf(s []int64, v int64) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// forSlots runs fn for every slot at once and sums the answers.
func forSlots(slots []*slot, fn func(*slot) int) int {
	var mu sync.Mutex
	var wg sync.WaitGroup
	total := 0
	for _, s := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := fn(s)
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total
}

// waitConnected waits until every slot's device is signed in.
func waitConnected(ctx context.Context, slots []*slot) error {
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, s := range slots {
		d := s.device()
		if _, err := d.conn(wctx); err != nil {
			return fmt.Errorf("chaos: device %s not signed in: %w", d.id, err)
		}
	}
	return nil
}

// waitDrained waits until every deliver partition has no unread and no
// pending entry; it returns "" or what was left at the deadline.
func waitDrained(ctx context.Context, c *framework.Cluster, within time.Duration) string {
	rdb := c.Redis.Client()
	defer rdb.Close()
	deadline := time.Now().Add(within)
	left := ""
	for time.Now().Before(deadline) && ctx.Err() == nil {
		left = ""
		for p := 0; p < partitions; p++ {
			groups, err := rdb.XInfoGroups(ctx, rediskey.Deliver(p)).Result()
			if err != nil {
				left += fmt.Sprintf("partition %d: %v; ", p, err)
				continue
			}
			for _, g := range groups {
				if g.Name == rediskey.DeliverGroup && (g.Pending > 0 || g.Lag > 0) {
					left += fmt.Sprintf("partition %d: %d pending, %d unread; ", p, g.Pending, g.Lag)
				}
			}
		}
		if left == "" {
			return ""
		}
		time.Sleep(500 * time.Millisecond)
	}
	if left == "" && ctx.Err() != nil {
		return ctx.Err().Error()
	}
	return left
}

// finalInbox reads a user's whole conversation list from cursor "0" and
// records each conversation as the server reports it.
func finalInbox(ctx context.Context, d *device, hist *History) error {
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
		c, err := d.conn(ictx)
		if err == nil {
			page, perr := c.SyncInbox(ictx, "0", "0", 100)
			err = perr
			if err == nil {
				cancel()
				for _, cv := range page.Conversations {
					e := Event{Kind: KindInbox, Device: d.id, User: d.user, Conv: cv.ConversationID.Int64(), Msg: cv.LastMsgID.Int64(), Unread: cv.Unread}
					if cv.Preview != nil {
						e.Preview, e.Recalled = cv.Preview.MsgID.Int64(), cv.Preview.Recalled
					}
					hist.Add(e)
				}
				hist.Add(Event{Kind: KindInboxDone, Device: d.id, User: d.user})
				return nil
			}
		}
		cancel()
		last = err
		sleepCtx(ctx, time.Second)
	}
	return errors.Join(fmt.Errorf("chaos: final inbox of %s", d.id), last)
}

// finalList pages a conversation's whole history from 0 and records its
// count and digest; ids must ascend strictly.
func finalList(ctx context.Context, d *device, cid int64, hist *History) error {
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		lctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		c, err := d.conn(lctx)
		if err == nil {
			var msgs []protocol.Message
			msgs, _, err = client.History(lctx, c, cid, 0, 200)
			if err == nil {
				cancel()
				e := Event{Kind: KindFinalList, Device: d.id, User: d.user, Conv: cid, Conn: len(msgs)}
				entries := make([]ListEntry, len(msgs))
				for i, m := range msgs {
					if i > 0 && m.MsgID <= msgs[i-1].MsgID {
						e.Err = fmt.Sprintf("msg_id %d after %d: not ascending", m.MsgID, msgs[i-1].MsgID)
					}
					entries[i] = ListEntry{ID: m.MsgID.Int64(), Recalled: m.Status == 2}
					if !entries[i].Recalled {
						entries[i].Content = canonical(string(m.Content))
					}
				}
				e.Detail = ListDigest(entries)
				hist.Add(e)
				return nil
			}
		}
		cancel()
		last = err
		sleepCtx(ctx, time.Second)
	}
	return last
}
