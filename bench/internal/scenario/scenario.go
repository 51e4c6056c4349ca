// Package scenario holds the benchmark scenarios. Each one is bounded in
// count and time, measures with client timestamps and /proc, and returns a
// Result the report renders; a new scenario (e.g. groups) is one more
// type implementing Scenario added to List.
package scenario

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparkim/spark/bench/internal/cluster"
	"github.com/sparkim/spark/bench/internal/hist"
	"github.com/sparkim/spark/bench/internal/procstat"
	"github.com/sparkim/spark/bench/internal/session"
	"github.com/sparkim/spark/bench/internal/wire"
	"github.com/sparkim/spark/pkg/token"
)

// Scenario is one benchmark.
type Scenario interface {
	Name() string
	Run(ctx context.Context, env *Env) (*Result, error)
}

// List returns the scenarios of a run in order; ceiling runs before p2p so
// p2p can be shown as a fraction of it, and p2p-steady after p2p, at a
// fraction of the rate p2p achieved; the fixed-rate latency runs before
// p2p, on a system no saturating run has left a backlog in; group after both, beside whose
// SEND_ACK it reports its own. A new scenario is one more entry.
func List() []Scenario {
	return []Scenario{Conn{}, Conn{Variant: "tls"}, Conn{Variant: "ws"}, Ceiling{}, P2P{Label: "latency-500", Rate: 500}, P2P{Label: "latency-1000", Rate: 1000},
		P2P{}, P2P{Label: "p2p-webhook", Webhook: true}, P2P{Label: "p2p-steady", Steady: true}, Group{}, Stall{}, Sync{}, Reconnect{}}
}

// Profile sizes every scenario.
type Profile struct {
	Name string `json:"name"`
	// conn
	ConnN          int           `json:"conn_n"`
	ConnPerWorker  int           `json:"conn_per_worker"`
	HBInterval     time.Duration `json:"hb_interval"`
	HBDuration     time.Duration `json:"hb_duration"`
	ConnectWorkers int           `json:"connect_workers"`
	// ConnVariantN is the connections of conn-tls and conn-ws: their
	// targets are per connection, not a count, and their clients hold a
	// goroutine and crypto/tls state each in imbench, so the long
	// profile holds fewer than the plain 50,000.
	ConnVariantN int `json:"conn_variant_n"`
	// p2p
	P2PUsers    int           `json:"p2p_users"`
	P2PRate     int           `json:"p2p_rate"`
	P2PDuration time.Duration `json:"p2p_duration"`
	P2PWindow   int           `json:"p2p_window"` // in-flight sends per user: a person waits for the ack; a deeper window only queues past gate.request_timeout
	Grace       time.Duration `json:"grace"`
	// p2p-steady: P2PSteadyFraction of the rate p2p achieved, for P2PSteadyDuration
	P2PSteadyDuration time.Duration `json:"p2p_steady_duration"`
	P2PSteadyFraction float64       `json:"p2p_steady_fraction"`
	// latency-500 and latency-1000: P2P at a fixed offered rate for
	// P2PLatencyDuration each
	P2PLatencyDuration time.Duration `json:"p2p_latency_duration"`
	// reconnect
	ReconnectN int `json:"reconnect_n"`
	// stall
	StallConns    int           `json:"stall_conns"`
	StallDuration time.Duration `json:"stall_duration"`
	// sync
	SyncMessages int `json:"sync_messages"`
	SyncConvs    int `json:"sync_conversations"`
	// ceiling
	CeilingDuration time.Duration `json:"ceiling_duration"`
	// group: one group per size; GroupSenders members send, each with a
	// second device online that must get their messages too.
	GroupSizes   []GroupSize `json:"group_sizes"`
	GroupSenders int         `json:"group_senders"`
}

// Profiles are the named sizes: short for `make bench`, long for the
// figures the targets are stated at; tiny for development.
func Profiles() map[string]Profile {
	return map[string]Profile{
		"tiny": {Name: "tiny", ConnN: 600, ConnVariantN: 600, ConnPerWorker: 300, HBInterval: time.Second, HBDuration: 3 * time.Second, ConnectWorkers: 64,
			P2PUsers: 40, P2PRate: 300, P2PDuration: 5 * time.Second, P2PWindow: 16, Grace: 10 * time.Second, P2PSteadyDuration: 4 * time.Second, P2PSteadyFraction: 0.6, P2PLatencyDuration: 5 * time.Second,
			ReconnectN: 200, StallConns: 200, StallDuration: 9 * time.Second, SyncMessages: 200, SyncConvs: 5, CeilingDuration: 3 * time.Second,
			GroupSizes: []GroupSize{{Members: 20, Messages: 10, Interval: 100 * time.Millisecond}, {Members: 200, Messages: 10, Interval: 200 * time.Millisecond}}, GroupSenders: 2},
		"short": {Name: "short", ConnN: 10000, ConnVariantN: 10000, ConnPerWorker: 5000, HBInterval: 5 * time.Second, HBDuration: 10 * time.Second, ConnectWorkers: 128,
			P2PUsers: 200, P2PRate: 3000, P2PDuration: 60 * time.Second, P2PWindow: 2, Grace: 15 * time.Second,
			P2PSteadyDuration: 20 * time.Second, P2PSteadyFraction: 0.6, P2PLatencyDuration: 30 * time.Second,
			ReconnectN: 2000, StallConns: 1000, StallDuration: 20 * time.Second, SyncMessages: 2000, SyncConvs: 20, CeilingDuration: 15 * time.Second,
			GroupSizes: []GroupSize{{Members: 100, Messages: 100, Interval: 100 * time.Millisecond}, {Members: 1000, Messages: 50, Interval: 200 * time.Millisecond},
				{Members: 10000, Messages: 10, Interval: 3 * time.Second}}, GroupSenders: 4},
		"long": {Name: "long", ConnN: 50000, ConnVariantN: 20000, ConnPerWorker: 15000, HBInterval: 10 * time.Second, HBDuration: 30 * time.Second, ConnectWorkers: 128,
			P2PUsers: 1000, P2PRate: 5000, P2PDuration: 5 * time.Minute, P2PWindow: 2, Grace: 30 * time.Second,
			P2PSteadyDuration: time.Minute, P2PSteadyFraction: 0.6, P2PLatencyDuration: time.Minute,
			ReconnectN: 10000, StallConns: 2000, StallDuration: 30 * time.Second, SyncMessages: 10000, SyncConvs: 50, CeilingDuration: 30 * time.Second,
			GroupSizes: []GroupSize{{Members: 100, Messages: 300, Interval: 50 * time.Millisecond}, {Members: 1000, Messages: 200, Interval: 100 * time.Millisecond},
				{Members: 10000, Messages: 60, Interval: 3 * time.Second}}, GroupSenders: 4},
	}
}

// Env is what scenarios share in one run.
type Env struct {
	C       *cluster.Cluster
	Engine  *wire.Engine
	Profile Profile
	Log     *slog.Logger
	Self    string       // this executable, re-run as conn workers
	Locals  []netip.Addr // loopback source addresses to spread connections over
	OutDir  string       // where plots go
	// Ceiling is filled by the ceiling scenario: raw send transactions/s.
	Ceiling float64
	// BatchCeiling is the ceiling scenario's best raw batched rate (msg/s,
	// the statements of logic's group commit) and BatchCeilingSize the
	// batch size that reached it.
	BatchCeiling     float64
	BatchCeilingSize int
	// P2PAchieved is filled by the saturating p2p run: acked msg/s.
	P2PAchieved float64
	// P2PAck is the SEND_ACK latency of the p2p run the group scenario
	// compares with: p2p-steady's (not overloaded) when it ran, else
	// p2p's; P2PAckFrom names it.
	P2PAck     *hist.Summary
	P2PAckFrom string
	nextUser   atomic.Int64
}

// NewEnv prepares the shared state; user ids start at a random base so a
// rerun on a reused database never collides.
func NewEnv(c *cluster.Cluster, e *wire.Engine, p Profile, log *slog.Logger, self, out string) *Env {
	env := &Env{C: c, Engine: e, Profile: p, Log: log, Self: self, OutDir: out}
	for i := 2; i <= 9; i++ {
		env.Locals = append(env.Locals, netip.AddrFrom4([4]byte{127, 0, 0, byte(i)}))
	}
	env.nextUser.Store(1_000_000 + rand.Int64N(1_000_000)*1000)
	return env
}

// Users allocates n fresh user ids.
func (e *Env) Users(n int) []int64 {
	last := e.nextUser.Add(int64(n))
	out := make([]int64, n)
	for i := range out {
		out[i] = last - int64(n) + int64(i) + 1
	}
	return out
}

// Token mints a development token for uid/device.
func (e *Env) Token(uid int64, device string) (string, error) {
	s, _, err := token.Mint([]byte(e.C.JWTSecret), uid, device, 24*time.Hour, time.Now())
	if err != nil {
		return "", fmt.Errorf("scenario: token: %w", err)
	}
	return s, nil
}

// GateAddr is the TCP address of gate i (modulo the gate count).
func (e *Env) GateAddr(i int) netip.AddrPort {
	return netip.MustParseAddrPort(e.C.Gates[i%len(e.C.Gates)].TCPAddr)
}

// ConnectAll dials and authenticates every session with conc goroutines
// (only while connecting: established sessions cost no goroutine), recording
// dial+AUTH latency in h. It returns the errors by message.
func (e *Env) ConnectAll(ctx context.Context, ss []*session.Session, gateOf func(int) int, conc int, h *hist.Series) map[string]int {
	var mu sync.Mutex
	errs := map[string]int{}
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				s := ss[i]
				tok, err := e.Token(s.UserID, s.Device)
				if err == nil {
					cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
					var d time.Duration
					d, err = s.Connect(cctx, e.Engine, e.Locals[i%len(e.Locals)], e.GateAddr(gateOf(i)), tok)
					cancel()
					if err == nil && h != nil {
						h.Record(time.Now(), d)
					}
				}
				if err != nil {
					mu.Lock()
					errs[trimErr(err)]++
					mu.Unlock()
				}
			}
		}()
	}
	for i := range ss {
		select {
		case work <- i:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	return errs
}

// trimErr keys errors by kind, not by user id or port.
func trimErr(err error) string {
	s := err.Error()
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

// CPUSnap is the CPU time of each process at one moment.
type CPUSnap map[string]time.Duration

// CPU reads every process of the system under test plus this one.
func (e *Env) CPU() CPUSnap {
	s := CPUSnap{}
	add := func(name string, pid int) {
		if pid == 0 {
			return
		}
		if d, err := procstat.CPU(pid); err == nil {
			s[name] = d
		}
	}
	for _, g := range e.C.Gates {
		add(g.ID, g.Pid())
	}
	add("logic", e.C.Logic.Pid())
	add("deliver", e.C.Deliver.Pid())
	add("mysql", e.C.MySQLPID)
	add("redis", e.C.RedisPID)
	add("imbench", selfPID())
	return s
}

// Sub returns the CPU seconds spent per process between a and b.
func (b CPUSnap) Sub(a CPUSnap) map[string]float64 {
	out := map[string]float64{}
	for k, v := range b {
		if av, ok := a[k]; ok {
			out[k] = (v - av).Seconds()
		}
	}
	return out
}

// Figure is one reported number with its target.
type Figure struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target,omitempty"`
	// Met is nil when the figure has no target.
	Met *bool `json:"met,omitempty"`
	// Headline puts a figure without a target in the summary table.
	Headline bool `json:"headline,omitempty"`
}

// Plot is a PNG written by a scenario.
type Plot struct {
	Title string `json:"title"`
	File  string `json:"file"`
}

// Result is what a scenario measured.
type Result struct {
	Scenario string         `json:"scenario"`
	Passed   bool           `json:"passed"` // correctness checks (losses, errors), not targets
	Error    string         `json:"error,omitempty"`
	Seconds  float64        `json:"seconds"`
	Figures  []Figure       `json:"figures"`
	Notes    []string       `json:"notes,omitempty"`
	Data     map[string]any `json:"data,omitempty"`
	Plots    []Plot         `json:"plots,omitempty"`
	// Profiles are CPU profiles of the measured window (p2p's of gate 1,
	// logic and deliver) with their top entries.
	Profiles []CPUProfile `json:"profiles,omitempty"`
}

func (r *Result) add(name string, v float64, unit string) {
	r.Figures = append(r.Figures, Figure{Name: name, Value: v, Unit: unit})
}

// headline adds a figure without a target that the summary shows.
func (r *Result) headline(name string, v float64, unit string) {
	r.Figures = append(r.Figures, Figure{Name: name, Value: v, Unit: unit, Headline: true})
}

// atMost adds a figure whose target is v ≤ limit.
func (r *Result) atMost(name string, v float64, unit string, limit float64) {
	met := v <= limit
	r.Figures = append(r.Figures, Figure{Name: name, Value: v, Unit: unit, Target: fmt.Sprintf("≤ %g", limit), Met: &met})
}

// atLeast adds a figure whose target is v ≥ limit.
func (r *Result) atLeast(name string, v float64, unit string, limit float64) {
	met := v >= limit
	r.Figures = append(r.Figures, Figure{Name: name, Value: v, Unit: unit, Target: fmt.Sprintf("≥ %g", limit), Met: &met})
}

func (r *Result) note(format string, a ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, a...)) }

func sortedKeys[M ~map[string]V, V any](m M) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func sumMap(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func msOf(d time.Duration) float64 { return float64(d) / 1e6 }
