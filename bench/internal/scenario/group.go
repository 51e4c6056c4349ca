package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparkim/spark/bench/internal/hist"
	"github.com/sparkim/spark/bench/internal/session"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
)

// GroupSize is one group run: a group of Members members receiving
// Messages sends, one every Interval.
type GroupSize struct {
	Members  int           `json:"members"`
	Messages int           `json:"messages"`
	Interval time.Duration `json:"interval"`
}

// Group measures group sends (issue 8's targets): for each size of the
// profile, a group created through the business API (CreateGroup, then
// AddGroupMembers 500 at a time, as a business server fills a large
// group), its members online in this process as far as the open-file
// limits allow (the rest are offline members), a few senders with a
// second device each sending at a fixed interval. Per size it reports the
// SEND_ACK latency beside the P2P figure of the same run, the time from
// the SEND_ACK until the last online member device has the message, the
// share of online devices reached, and the CPU of gates, logic and deliver
// per member delivery. Every acked send must reach every online device
// except the sending one, under the acked msg_id and nowhere else
// (groupLedger); anything less fails the scenario.
type Group struct{}

// Name implements Scenario.
func (Group) Name() string { return "group" }

// groupRun is what one size measured.
type groupRun struct {
	Members        int                `json:"members"`
	OnlineMembers  int                `json:"online_members"`
	Devices        int                `json:"online_devices"`
	Senders        int                `json:"senders"`
	GroupID        int64              `json:"group_id,string"`
	ConversationID int64              `json:"conversation_id,string"`
	SetupS         map[string]float64 `json:"setup_s"`
	OfferedRate    float64            `json:"offered_msg_per_s"`
	Interval       time.Duration      `json:"interval"`
	WindowS        float64            `json:"window_s"` // first send until the last device had the last message (or the grace ended)
	Tally          groupTally         `json:"tally"`
	Ack            hist.Summary       `json:"send_ack"`
	LastAfterAck   hist.Summary       `json:"ack_to_last_member"`
	MemberE2E      hist.Summary       `json:"send_to_each_member"`
	CPU            map[string]float64 `json:"cpu_seconds"`
	ServerCPU      float64            `json:"server_cpu_s"` // gates + logic + deliver
	Deliveries     int                `json:"member_deliveries"`
	CPUPerDelivery float64            `json:"cpu_per_member_delivery_us"`
	CPUPerPush     float64            `json:"cpu_per_push_us"`
	ConnectErrors  map[string]int     `json:"connect_errors,omitempty"`
	Closed         int64              `json:"sessions_closed"`
	ErrorCodes     map[string]int     `json:"error_codes,omitempty"`
	BadPushes      int64              `json:"undecodable_pushes"`
	BacklogEnd     Backlog            `json:"backlog_at_end"`
	Profiles       []string           `json:"cpu_profiles,omitempty"`
	Baseline       *hist.Summary      `json:"p2p_baseline_send_ack,omitempty"`
}

// OK is the run's correctness verdict.
func (r groupRun) OK() bool {
	return r.Tally.OK() && r.Closed == 0 && len(r.ConnectErrors) == 0 && r.BadPushes == 0
}

// Run implements Scenario.
func (Group) Run(ctx context.Context, e *Env) (*Result, error) {
	p := e.Profile
	res := &Result{Scenario: "group", Data: map[string]any{}}
	if len(p.GroupSizes) == 0 {
		res.note("the profile has no group sizes")
		res.Passed = true
		return res, nil
	}
	a, err := e.dialAPI()
	if err != nil {
		return res, err
	}
	defer a.close()
	ref, refFrom := e.P2PAck, e.P2PAckFrom
	var runs []groupRun
	for i, sz := range p.GroupSizes {
		e.Log.Info("group", "members", sz.Members, "messages", sz.Messages, "interval", sz.Interval)
		r, err := e.groupRun(ctx, a, sz, groupRunOpts{
			profile:  i == len(p.GroupSizes)-1,
			baseline: ref == nil && i == 0,
		})
		runs = append(runs, r)
		if err != nil {
			res.Data["runs"] = runs
			return res, fmt.Errorf("scenario: group of %d: %w", sz.Members, err)
		}
		if r.Baseline != nil {
			ref, refFrom = r.Baseline, "100 P2P sends in this scenario (no p2p scenario ran)"
		}
	}
	res.Data["runs"] = runs
	if ref != nil {
		res.Data["p2p_send_ack_reference"] = map[string]any{"from": refFrom, "summary": *ref}
		res.headline("P2P SEND_ACK p99 of this run, from "+refFrom, ref.P99Ms, "ms")
	}
	res.Passed = true
	for _, r := range runs {
		groupFigures(res, r, ref)
		if !r.OK() {
			res.Passed = false
		}
	}
	return res, nil
}

// groupFigures adds one size's figures, targets and notes.
func groupFigures(res *Result, r groupRun, ref *hist.Summary) {
	n := fmt.Sprintf("%d members: ", r.Members)
	all := r.OnlineMembers == r.Members
	t := r.Tally
	res.headline(n+"online members (devices)", float64(r.OnlineMembers), fmt.Sprintf("(%d devices)", r.Devices))
	res.headline(n+"sends acked", float64(t.Acked), fmt.Sprintf("of %d, %.2g msg/s offered", t.Sent, r.OfferedRate))
	res.headline(n+"SEND_ACK p50", r.Ack.P50Ms, "ms")
	if r.Members >= 10000 && ref != nil && ref.P99Ms > 0 {
		res.atMost(n+"SEND_ACK p99 (target: 1.5 × the P2P p99)", r.Ack.P99Ms, "ms", math.Round(15*ref.P99Ms)/10)
	} else {
		res.headline(n+"SEND_ACK p99", r.Ack.P99Ms, "ms")
	}
	res.headline(n+"SEND_ACK → last online member p50", r.LastAfterAck.P50Ms, "ms")
	if r.Members == 1000 && all {
		res.atMost(n+"SEND_ACK → last online member p99 (all online)", r.LastAfterAck.P99Ms, "ms", 300)
	} else {
		res.headline(n+"SEND_ACK → last online member p99", r.LastAfterAck.P99Ms, "ms")
	}
	res.add(n+"send → each member p50", r.MemberE2E.P50Ms, "ms")
	res.add(n+"send → each member p99", r.MemberE2E.P99Ms, "ms")
	res.headline(n+"online devices reached (must be 100)", 100*t.Share(), "%")
	res.atMost(n+"CPU per member delivery (gate+logic+deliver)", r.CPUPerDelivery, "µs", 40)
	res.add(n+"CPU per push received (gate+logic+deliver)", r.CPUPerPush, "µs")
	res.add(n+"pushes repeated (same msg_id to a device again; de-duplicated by clients)", float64(t.Repeated), "")
	res.add(n+"pushes to the sending device, under another msg_id, or outside the group", float64(t.Echo+t.WrongID+t.Misroute), "")
	res.add(n+"deliver backlog at the end (XLEN)", float64(r.BacklogEnd.Length), "jobs")
	res.note("%d members: %d online (%d devices: %d senders with a second device each) over three gates, the other %d offline; group %d created through logic.v1.Api in %.1f s (users %.1f s), members connected in %.1f s; %d sends, one every %v from the senders in turn, window %.1f s until the last device had the last message; %d (message, device) pushes expected, %d reached, %d messages complete (%d of them with the last push before the SEND_ACK, counted as 0)",
		r.Members, r.OnlineMembers, r.Devices, r.Senders, r.Members-r.OnlineMembers, r.GroupID, r.SetupS["group"], r.SetupS["users"], r.SetupS["connect"],
		t.Sent, r.Interval, r.WindowS, t.Expected, t.Reached, t.Complete, t.BeforeAck)
	res.note("%d members: CPU seconds over the window: %s; member deliveries = acked sends × (members − 1) = %d",
		r.Members, fmtCPU(r.CPU), r.Deliveries)
	if !r.OK() {
		res.note("FAIL %d members: acked %d of %d (codes %v), reached %d of %d (first missing: %v), %d to the sending device, %d under another msg_id, %d misrouted, %d sessions closed, connect errors %v, %d undecodable pushes",
			r.Members, t.Acked, t.Sent, r.ErrorCodes, t.Reached, t.Expected, t.FirstUnreached, t.Echo, t.WrongID, t.Misroute, r.Closed, r.ConnectErrors, r.BadPushes)
	}
	if len(r.Profiles) > 0 {
		res.note("%d members: CPU profiles of the window (go tool pprof): %v", r.Members, r.Profiles)
	}
}

func fmtCPU(m map[string]float64) string {
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// groupGrace is the least time allowed after the last answer for every
// online device to get every message.
const groupGrace = 30 * time.Second

type groupRunOpts struct {
	profile  bool // save CPU profiles of deliver, logic and a gate over the window
	baseline bool // measure a P2P SEND_ACK baseline first (no p2p scenario ran)
}

// groupPushes routes MESSAGE pushes to the current ledger.
type groupPushes struct {
	cur atomic.Pointer[groupLedger]
	bad atomic.Int64
}

func (g *groupPushes) onPush(s *session.Session, h frame.Header, body []byte) {
	if h.Command != protocol.CmdMessage {
		return // CONTROL_EVENTs of the group's creation, for instance
	}
	now := time.Now()
	var env struct {
		Data pushMsg `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		g.bad.Add(1)
		return
	}
	seq, ok := groupSeq(env.Data.ClientMsgID)
	if !ok {
		return // not a group send of this run (the P2P baseline)
	}
	if l := g.cur.Load(); l != nil {
		l.pushed(seq, s.Index, int64(env.Data.MsgID), now)
	}
}

// groupSends sends into the group and records the answers.
type groupSends struct {
	gid, cid int64
	ack      *hist.Series
	answered atomic.Int64
	mu       sync.Mutex
	codes    map[string]int
}

// newGroupSends sends into group gid (conversation cid), its SEND_ACK
// series starting at start. The warm-up and the window have one each, so
// a late answer of the warm-up never lands in the window's figures.
func newGroupSends(gid, cid int64, start time.Time) *groupSends {
	return &groupSends{gid: gid, cid: cid, ack: hist.NewSeries(start, time.Second), codes: map[string]int{}}
}

func (g *groupSends) code(c string) {
	g.mu.Lock()
	g.codes[c]++
	g.mu.Unlock()
}

// send sends group message seq from s into ledger l.
func (g *groupSends) send(s *session.Session, l *groupLedger, seq int) {
	now := time.Now()
	l.sent(seq, s.Index, now)
	body := fmt.Appendf(nil, `{"group_id":"%d","client_msg_id":"%s","message_type":1,"content":{"t":1,"text":"group benchmark message %d"}}`,
		g.gid, groupCMID(now, seq), seq)
	err := s.Request(protocol.CmdSendMessage, body, func(r session.Reply) {
		at := time.Now()
		g.answered.Add(1)
		var id int64
		switch {
		case r.Err != nil:
			g.code("no answer")
		case r.Code != "0":
			g.code(r.Code)
		default:
			var a protocol.SendAck
			if err := json.Unmarshal(r.Data, &a); err != nil || a.MsgID == 0 {
				g.code("bad SEND_ACK")
				break
			}
			if int64(a.ConversationID) != g.cid {
				g.code("SEND_ACK of another conversation")
				break
			}
			id = int64(a.MsgID)
			g.ack.Record(at, r.RTT)
		}
		l.acked(seq, id, at)
	})
	if err != nil {
		g.answered.Add(1)
		g.code("write failed")
		l.acked(seq, 0, now)
	}
}

// groupRun creates one group, brings its members online, sends and
// accounts.
func (e *Env) groupRun(ctx context.Context, a *api, sz GroupSize, o groupRunOpts) (groupRun, error) {
	p := e.Profile
	r := groupRun{Members: sz.Members, SetupS: map[string]float64{}}
	if sz.Members < 2 || sz.Messages < 1 || sz.Interval <= 0 {
		return r, fmt.Errorf("scenario: group size %+v: need 2+ members, 1+ messages and an interval", sz)
	}
	users := e.Users(sz.Members)
	owner := users[0]
	senders := max(1, min(p.GroupSenders, sz.Members-1))
	limit, open, err := openFiles()
	if err != nil {
		return r, err
	}
	devices := onlineCap(sz.Members+senders, limit, open)
	if devices < 2*senders+1 {
		return r, fmt.Errorf("scenario: only %d descriptors free (limit %d, %d open) for %d senders' devices", devices, limit, open, senders)
	}
	r.Senders, r.Devices, r.OnlineMembers = senders, devices, devices-senders

	t0 := time.Now()
	if err := a.ensureUsers(ctx, users, 16); err != nil {
		return r, err
	}
	r.SetupS["users"] = time.Since(t0).Seconds()
	g, err := a.createGroup(ctx, owner, users[1:], fmt.Sprintf("bench %d", sz.Members))
	if err != nil {
		return r, err
	}
	r.SetupS["group"] = time.Since(t0).Seconds()
	r.GroupID, r.ConversationID = g.GetGroupId(), g.GetConversationId()

	// Devices 2j and 2j+1 are sender j's (on different gates); then one
	// device for each further member until the cap.
	ss := make([]*session.Session, devices)
	pushes := &groupPushes{}
	var closed atomic.Int64 // connections that ended before the run did
	var closing atomic.Bool
	for i := range ss {
		var uid int64
		dev := ""
		if i < 2*senders {
			uid = users[i/2]
			dev = fmt.Sprintf("d%d", uid)
			if i%2 == 1 {
				dev += "-web"
			}
		} else {
			uid = users[i-senders]
			dev = fmt.Sprintf("d%d", uid)
		}
		ss[i] = session.New(i, uid, dev)
		ss[i].OnPush = pushes.onPush
		ss[i].OnClosed = func(*session.Session, error) {
			if !closing.Load() {
				closed.Add(1)
			}
		}
	}
	defer func() {
		closing.Store(true)
		for _, s := range ss {
			s.Close()
		}
		time.Sleep(time.Second) // the gates drop the connections before the next run
	}()
	t1 := time.Now()
	r.ConnectErrors = e.ConnectAll(ctx, ss, func(i int) int { return i }, 64, nil)
	r.SetupS["connect"] = time.Since(t1).Seconds()
	if len(r.ConnectErrors) > 0 {
		return r, fmt.Errorf("scenario: %d connections failed: %v", sumMap(r.ConnectErrors), r.ConnectErrors)
	}

	// Warm up: deliver loads its member cache, every member's list gets
	// the conversation; then the creation's control events drain.
	warm := newGroupLedger(devices, 1)
	pushes.cur.Store(warm)
	newGroupSends(r.GroupID, r.ConversationID, time.Now()).send(ss[0], warm, 0)
	waitGroupLedger(ctx, warm, 30*time.Second)
	if wt := warm.tally(nil); !wt.OK() {
		e.Log.Warn("group warm-up incomplete", "members", sz.Members, "tally", fmt.Sprintf("%+v", wt))
	}
	if o.baseline {
		b := e.p2pBaseline(ctx, ss[0], ss[2*senders].UserID, 100, 20*time.Millisecond)
		r.Baseline = &b
	}
	e.waitBacklog(ctx, 60*time.Second)

	l := newGroupLedger(devices, sz.Messages)
	pushes.cur.Store(l)
	start := time.Now()
	sends := newGroupSends(r.GroupID, r.ConversationID, start)
	var profWG sync.WaitGroup
	if o.profile {
		secs := int(min(30, max(1, (time.Duration(sz.Messages)*sz.Interval+time.Second)/time.Second)))
		for _, t := range []struct{ name, addr string }{{"deliver", e.C.DeliverAdmin}, {"logic", e.C.LogicAdmin}, {e.C.Gates[0].ID, e.C.Gates[0].AdminAddr}} {
			file := fmt.Sprintf("group_%d_%s.pprof", sz.Members, t.name)
			r.Profiles = append(r.Profiles, file)
			profWG.Add(1)
			go func() {
				defer profWG.Done()
				if err := saveCPUProfile(ctx, t.addr, secs, filepath.Join(e.OutDir, file)); err != nil {
					e.Log.Warn("cpu profile", "process", t.name, "err", err)
				}
			}()
		}
	}
	cpu0 := e.CPU()
	for k := 0; k < sz.Messages && ctx.Err() == nil; k++ {
		if d := time.Until(start.Add(time.Duration(k) * sz.Interval)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		sends.send(ss[2*(k%senders)], l, k)
	}
	sent := int64(l.countSent())
	for deadline := time.Now().Add(15 * time.Second); sends.answered.Load() < sent && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(10 * time.Millisecond)
	}
	for j := 0; j < 2*senders; j += 2 {
		ss[j].ExpireOlder(time.Now())
	}
	// An online device the push never reached fails the run, so the wait
	// is generous; it ends as soon as the last device has the last message.
	waitGroupLedger(ctx, l, max(p.Grace, groupGrace))
	cpu1 := e.CPU()
	r.WindowS = time.Since(start).Seconds()
	profWG.Wait()
	r.BacklogEnd, _ = e.DeliverBacklog(ctx)

	last := hist.New()
	r.Tally = l.tally(last)
	r.Ack = sends.ack.Total().Summarize()
	r.LastAfterAck = last.Summarize()
	r.MemberE2E = l.memberLatency().Summarize()
	r.OfferedRate, r.Interval = 1/sz.Interval.Seconds(), sz.Interval
	r.CPU = cpu1.Sub(cpu0)
	r.ServerCPU = r.CPU["logic"] + r.CPU["deliver"]
	for _, g := range e.C.Gates {
		r.ServerCPU += r.CPU[g.ID]
	}
	r.Deliveries = r.Tally.Acked * (sz.Members - 1)
	r.CPUPerDelivery = 1e6 * r.ServerCPU / float64(max(r.Deliveries, 1))
	r.CPUPerPush = 1e6 * r.ServerCPU / float64(max(r.Tally.Reached+r.Tally.Repeated, 1))
	r.Closed = closed.Load()
	r.BadPushes = pushes.bad.Load()
	sends.mu.Lock()
	if len(sends.codes) > 0 {
		r.ErrorCodes = maps.Clone(sends.codes)
	}
	sends.mu.Unlock()
	return r, nil
}

// countSent is how many sends were registered.
func (l *groupLedger) countSent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if m != nil {
			n++
		}
	}
	return n
}

// waitGroupLedger waits until every acked send reached every online
// device, or d passes. It polls often: the CPU window ends when it returns.
func waitGroupLedger(ctx context.Context, l *groupLedger, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if l.waiting() == 0 && l.allAnswered() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// allAnswered reports whether every registered send has its answer.
func (l *groupLedger) allAnswered() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if m != nil && m.ackAt.IsZero() && !m.failed {
			return false
		}
	}
	return true
}

// p2pBaseline measures the SEND_ACK of n one-to-one sends from s to
// user to, one every gap, for a reference when no p2p scenario ran.
func (e *Env) p2pBaseline(ctx context.Context, s *session.Session, to int64, n int, gap time.Duration) hist.Summary {
	h := hist.NewSeries(time.Now(), time.Second)
	var wg sync.WaitGroup
	for k := 0; k < n && ctx.Err() == nil; k++ {
		now := time.Now()
		body := fmt.Appendf(nil, `{"to_user_id":"%d","client_msg_id":"b%d-p-%d","message_type":1,"content":{"t":1,"text":"p2p baseline %d"}}`,
			to, now.UnixNano(), k, k)
		wg.Add(1)
		if err := s.Request(protocol.CmdSendMessage, body, func(r session.Reply) {
			defer wg.Done()
			if r.Err == nil && r.Code == "0" {
				h.Record(time.Now(), r.RTT)
			}
		}); err != nil {
			wg.Done()
		}
		time.Sleep(gap)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		s.ExpireOlder(time.Now())
		<-done
	case <-ctx.Done():
		s.ExpireOlder(time.Now())
		<-done
	}
	return h.Total().Summarize()
}

// saveCPUProfile fetches a CPU profile of secs seconds from a process's
// admin pprof endpoint into file, so a report's CPU figure can be traced
// to the functions that spent it.
func saveCPUProfile(ctx context.Context, admin string, secs int, file string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs+30)*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, secs), nil)
	if err != nil {
		return fmt.Errorf("scenario: pprof request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("scenario: pprof %s: %w", admin, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scenario: pprof %s: %s", admin, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("scenario: %w", err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return fmt.Errorf("scenario: pprof %s: %w", admin, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("scenario: %w", err)
	}
	return nil
}
