package scenario

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sparkim/spark/bench/internal/hist"
	"github.com/sparkim/spark/bench/internal/plots"
	"github.com/sparkim/spark/bench/internal/procstat"
	"github.com/sparkim/spark/bench/internal/session"
	"github.com/sparkim/spark/bench/internal/wire"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/token"
)

// Conn holds N idle authenticated connections over every gate, spread over
// worker processes (the open-file limit is per process), and measures gate
// memory per connection, the connect+AUTH rate and HEARTBEAT round trips.
// Variant picks the gates' listener: "" plain TCP (Profile.ConnN
// connections), "tls" the TLS listener, "ws" the WebSocket one
// (Profile.ConnVariantN connections each); each variant has its own
// memory target.
type Conn struct {
	Variant string
}

// Name implements Scenario.
func (c Conn) Name() string {
	if c.Variant == "" {
		return "conn"
	}
	return "conn-" + c.Variant
}

// Variant targets, KiB of gate RSS per idle authenticated connection: plain
// TCP issue 9's, TLS and WebSocket issue 10's.
var connTargetKiB = map[string]float64{"": 6, "tls": 16, "ws": 8}

// carrier is how a worker reaches the gates for a variant; caPEM is the
// gates' certificate (TLS only).
func carrier(variant, caPEM string) (wire.Carrier, error) {
	switch variant {
	case "", "tcp":
		return wire.Carrier{}, nil
	case "tls":
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(caPEM)) {
			return wire.Carrier{}, fmt.Errorf("scenario: conn-tls: no certificate to trust")
		}
		// Client sessions are not cached: each connection is a full
		// handshake, as many devices connecting once each would be.
		return wire.Carrier{TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}, nil
	case "ws":
		return wire.Carrier{WSPath: "/ws"}, nil
	}
	return wire.Carrier{}, fmt.Errorf("scenario: unknown conn variant %q", variant)
}

// ConnJob is what the parent tells a conn worker (first stdin line).
type ConnJob struct {
	Gates      []string      `json:"gates"`
	Locals     []string      `json:"locals"`
	Users      []int64       `json:"users"`
	Offset     int           `json:"offset"` // global index of Users[0], spreads gates and source addresses
	Conc       int           `json:"conc"`
	HBInterval time.Duration `json:"hb_interval"`
	HBDuration time.Duration `json:"hb_duration"`
	// Variant is Conn.Variant; CACert the PEM certificate a "tls" worker
	// trusts (the gates' own, generated for the run).
	Variant string `json:"variant,omitempty"`
	CACert  string `json:"ca_cert,omitempty"`
}

// WorkerMsg is one stdout line of a conn worker.
type WorkerMsg struct {
	Type      string          `json:"type"` // progress, connected, heartbeat, error
	N         int             `json:"n,omitempty"`
	Errors    map[string]int  `json:"errors,omitempty"`
	ElapsedS  float64         `json:"elapsed_s,omitempty"`
	Connect   *hist.Histogram `json:"connect,omitempty"`
	HB        *hist.Histogram `json:"hb,omitempty"`
	HBSent    int64           `json:"hb_sent,omitempty"`
	HBTimeout int64           `json:"hb_timeout,omitempty"`
	Closed    int64           `json:"closed,omitempty"`
	Err       string          `json:"err,omitempty"`
}

// JWTEnv carries the token secret to workers (not on the command line).
const JWTEnv = "IMBENCH_JWT_SECRET"

// ConnWorker is the body of `imbench -worker conn`: it holds its share of
// connections and reports over out as JSON lines, driven by in.
func ConnWorker(ctx context.Context, in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	enc := json.NewEncoder(out)
	var mu sync.Mutex
	emit := func(m WorkerMsg) { mu.Lock(); _ = enc.Encode(m); mu.Unlock() }
	if !sc.Scan() {
		return fmt.Errorf("scenario: worker: no job on stdin")
	}
	var job ConnJob
	if err := json.Unmarshal(sc.Bytes(), &job); err != nil {
		return fmt.Errorf("scenario: worker job: %w", err)
	}
	secret := []byte(os.Getenv(JWTEnv))
	via, err := carrier(job.Variant, job.CACert)
	if err != nil {
		return err
	}
	eng, err := wire.New(2)
	if err != nil {
		return err
	}
	defer eng.Close()
	var closed atomic.Int64
	ss := make([]*session.Session, len(job.Users))
	for i, u := range job.Users {
		ss[i] = session.New(job.Offset+i, u, fmt.Sprintf("d%d", u))
		ss[i].OnClosed = func(*session.Session, error) { closed.Add(1) }
	}
	connectH := hist.New()
	var hmu sync.Mutex
	var done atomic.Int64
	errs := map[string]int{}
	start := time.Now()
	stopProgress := make(chan struct{})
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				emit(WorkerMsg{Type: "progress", N: int(done.Load())})
			case <-stopProgress:
				return
			}
		}
	}()
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < job.Conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				s := ss[i]
				g := job.Offset + i
				tok, _, err := token.Mint(secret, s.UserID, s.Device, 24*time.Hour, time.Now())
				if err == nil {
					cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
					var d time.Duration
					d, err = s.ConnectVia(cctx, eng, netip.MustParseAddr(job.Locals[g%len(job.Locals)]), netip.MustParseAddrPort(job.Gates[g%len(job.Gates)]), via, tok)
					cancel()
					hmu.Lock()
					if err == nil {
						connectH.RecordDuration(d)
						done.Add(1)
					}
					hmu.Unlock()
				}
				if err != nil {
					hmu.Lock()
					errs[trimErr(err)]++
					hmu.Unlock()
				}
			}
		}()
	}
	for i := range ss {
		work <- i
	}
	close(work)
	wg.Wait()
	close(stopProgress)
	emit(WorkerMsg{Type: "connected", N: int(done.Load()), Errors: errs, ElapsedS: time.Since(start).Seconds(), Connect: connectH})

	for sc.Scan() {
		switch strings.TrimSpace(sc.Text()) {
		case "heartbeat":
			hb, sent, timeouts := heartbeatAll(ctx, ss, job.HBInterval, job.HBDuration)
			emit(WorkerMsg{Type: "heartbeat", HB: hb, HBSent: sent, HBTimeout: timeouts, Closed: closed.Load()})
		case "close":
			return nil
		}
	}
	return nil
}

// heartbeatAll sends every session one HEARTBEAT per interval, spread
// evenly over the interval, for d; it returns the round trips.
func heartbeatAll(ctx context.Context, ss []*session.Session, interval, d time.Duration) (*hist.Histogram, int64, int64) {
	h := hist.New()
	var mu sync.Mutex
	var sent, timeouts int64
	const tick = 10 * time.Millisecond
	perTick := float64(len(ss)) * float64(tick) / float64(interval)
	t := time.NewTicker(tick)
	defer t.Stop()
	end := time.Now().Add(d)
	next, owed := 0, 0.0
	for time.Now().Before(end) && ctx.Err() == nil {
		<-t.C
		owed += perTick
		for ; owed >= 1; owed-- {
			s := ss[next%len(ss)]
			next++
			if s.Conn == nil {
				continue
			}
			err := s.Request(protocol.CmdHeartbeat, nil, func(r session.Reply) {
				mu.Lock()
				defer mu.Unlock()
				if r.Err != nil {
					timeouts++
					return
				}
				h.RecordDuration(r.RTT)
			})
			if err == nil {
				sent++
			}
		}
	}
	time.Sleep(2 * time.Second)
	cutoff := time.Now().Add(-2 * time.Second)
	for _, s := range ss {
		s.ExpireOlder(cutoff)
	}
	mu.Lock()
	defer mu.Unlock()
	return h, sent, timeouts
}

type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	msgs  chan WorkerMsg
}

func (e *Env) startWorker(ctx context.Context, job ConnJob) (*worker, error) {
	cmd := exec.CommandContext(ctx, e.Self, "-worker", "conn")
	cmd.Env = append(os.Environ(), JWTEnv+"="+e.C.JWTSecret)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("scenario: worker: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("scenario: worker: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("scenario: start worker: %w", err)
	}
	w := &worker{cmd: cmd, stdin: stdin, msgs: make(chan WorkerMsg, 64)}
	go func() {
		defer close(w.msgs)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var m WorkerMsg
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = WorkerMsg{Type: "error", Err: "bad worker line: " + err.Error()}
			}
			w.msgs <- m
		}
	}()
	b, _ := json.Marshal(job)
	if _, err := w.stdin.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("scenario: worker job: %w", err)
	}
	return w, nil
}

// await returns the next message of type typ, passing progress to onProgress.
func (w *worker) await(ctx context.Context, typ string, onProgress func(int)) (WorkerMsg, error) {
	for {
		select {
		case m, ok := <-w.msgs:
			if !ok {
				return m, fmt.Errorf("scenario: worker exited before %q", typ)
			}
			if m.Type == "progress" {
				if onProgress != nil {
					onProgress(m.N)
				}
				continue
			}
			if m.Type == typ {
				return m, nil
			}
			if m.Type == "error" {
				return m, fmt.Errorf("scenario: worker: %s", m.Err)
			}
		case <-ctx.Done():
			return WorkerMsg{}, ctx.Err()
		}
	}
}

func (e *Env) gatesRSS() (int64, map[string]int64) {
	var sum int64
	per := map[string]int64{}
	for _, g := range e.C.Gates {
		if r, err := procstat.RSS(g.Pid()); err == nil {
			per[g.ID] = r
			sum += r
		}
	}
	return sum, per
}

// Run implements Scenario.
func (c Conn) Run(ctx context.Context, e *Env) (*Result, error) {
	p := e.Profile
	res := &Result{Scenario: c.Name(), Data: map[string]any{}}
	want := p.ConnN
	var gates, locals []string
	for _, g := range e.C.Gates {
		switch c.Variant {
		case "tls":
			gates = append(gates, g.TLSAddr)
		case "ws":
			gates = append(gates, g.WSAddr)
		default:
			gates = append(gates, g.TCPAddr)
		}
	}
	if c.Variant != "" {
		want = p.ConnVariantN
		// A gate that held connections before keeps their freed heap
		// (the runtime returns it to the OS slowly) and would grow into it
		// instead of the RSS this variant's connections cost: every
		// variant starts on gates as fresh as plain conn's, which runs
		// first.
		for i := range e.C.Gates {
			if err := e.C.RestartGate(ctx, i, syscall.SIGTERM, nil); err != nil {
				return res, fmt.Errorf("scenario: %s: %w", c.Name(), err)
			}
		}
		time.Sleep(time.Second)
	}
	users := e.Users(want)
	for _, l := range e.Locals {
		locals = append(locals, l.String())
	}
	before, beforePer := e.gatesRSS()
	var ws []*worker
	defer func() {
		for _, w := range ws {
			_ = w.stdin.Close()
			_ = w.cmd.Wait()
		}
	}()
	for off := 0; off < len(users); off += p.ConnPerWorker {
		end := min(off+p.ConnPerWorker, len(users))
		w, err := e.startWorker(ctx, ConnJob{Gates: gates, Locals: locals, Users: users[off:end], Offset: off,
			Conc: max(1, p.ConnectWorkers/max(1, (len(users)+p.ConnPerWorker-1)/p.ConnPerWorker)), HBInterval: p.HBInterval, HBDuration: p.HBDuration,
			Variant: c.Variant, CACert: string(e.C.CertPEM)})
		if err != nil {
			return res, err
		}
		ws = append(ws, w)
	}
	res.Data["workers"] = len(ws)
	// Sample gate memory against established connections while connecting.
	progress := make([]int64, len(ws))
	var sx, sy []float64
	sampleStop := make(chan struct{})
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				var n int64
				for i := range progress {
					n += atomic.LoadInt64(&progress[i])
				}
				rss, _ := e.gatesRSS()
				sx = append(sx, float64(n))
				sy = append(sy, float64(rss-before)/(1<<20))
			case <-sampleStop:
				return
			}
		}
	}()
	connectH := hist.New()
	errs := map[string]int{}
	connected := 0
	var slowest float64
	for i, w := range ws {
		m, err := w.await(ctx, "connected", func(n int) { atomic.StoreInt64(&progress[i], int64(n)) })
		if err != nil {
			close(sampleStop)
			<-sampleDone
			return res, err
		}
		atomic.StoreInt64(&progress[i], int64(m.N))
		connected += m.N
		connectH.Merge(m.Connect)
		for k, v := range m.Errors {
			errs[k] += v
		}
		slowest = max(slowest, m.ElapsedS)
	}
	time.Sleep(2 * time.Second) // let the gates settle (GC, buffers returned)
	close(sampleStop)
	<-sampleDone
	afterConn, afterConnPer := e.gatesRSS()
	for _, w := range ws {
		if _, err := io.WriteString(w.stdin, "heartbeat\n"); err != nil {
			return res, fmt.Errorf("scenario: worker: %w", err)
		}
	}
	// Memory while every connection is heartbeating: the steady state.
	time.Sleep(p.HBDuration / 2)
	afterHB, afterHBPer := e.gatesRSS()
	hb := hist.New()
	var hbSent, hbTimeout, closed int64
	for _, w := range ws {
		m, err := w.await(ctx, "heartbeat", nil)
		if err != nil {
			return res, err
		}
		hb.Merge(m.HB)
		hbSent += m.HBSent
		hbTimeout += m.HBTimeout
		closed += m.Closed
	}
	for _, w := range ws {
		_, _ = io.WriteString(w.stdin, "close\n")
	}

	n := float64(max(connected, 1))
	kibConn := float64(afterConn-before) / n / 1024
	kibHB := float64(afterHB-before) / n / 1024
	if c.Variant == "" {
		res.atLeast("connections held", float64(connected), "", 50000)
	} else {
		res.headline("connections held", float64(connected), "")
	}
	res.atMost("gate RSS per connection (heartbeating)", kibHB, "KiB", connTargetKiB[c.Variant])
	res.add("gate RSS per connection (idle, after connect)", kibConn, "KiB")
	res.add("connect+AUTH rate", float64(connected)/slowest, "conn/s")
	cs := connectH.Summarize()
	res.add("connect+AUTH p50", cs.P50Ms, "ms")
	res.add("connect+AUTH p99", cs.P99Ms, "ms")
	hs := hb.Summarize()
	res.add("HEARTBEAT p50", hs.P50Ms, "ms")
	res.add("HEARTBEAT p99", hs.P99Ms, "ms")
	res.add("HEARTBEAT sent", float64(hbSent), "")
	res.Passed = connected == want && hbTimeout == 0 && closed == 0 && uint64(hbSent) == hb.Count()
	if !res.Passed {
		res.note("connected %d of %d, heartbeats sent %d answered %d timed out %d, connections closed %d; errors %v",
			connected, want, hbSent, hb.Count(), hbTimeout, closed, errs)
	}
	switch c.Variant {
	case "":
		if p.ConnN < 50000 {
			res.note("this profile holds %d connections; the 50,000 target is measured by the long profile", p.ConnN)
		}
	case "tls":
		res.note("over each gate's TLS listener (TLS 1.3, the run's self-signed ECDSA P-256 certificate, a full handshake per connection, counted in connect+AUTH); the gates were restarted first so the RSS baseline holds no earlier connections' heap")
	case "ws":
		res.note("over each gate's WebSocket listener (ws://…/ws, one frame per binary message, no compression); the gates were restarted first so the RSS baseline holds no earlier connections' heap")
	}
	res.Data["rss_before"] = beforePer
	res.Data["rss_after_connect"] = afterConnPer
	res.Data["rss_heartbeating"] = afterHBPer
	res.Data["connect"] = cs
	res.Data["heartbeat"] = hs
	res.Data["errors"] = errs
	file := strings.ReplaceAll(c.Name(), "-", "_") + "_memory.png"
	var kx, ky []float64
	for i := range sx {
		if sx[i] > 500 {
			kx = append(kx, sx[i])
			ky = append(ky, sy[i]*1024/sx[i])
		}
	}
	if err := plots.Lines(filepath.Join(e.OutDir, file), "Gate memory while connecting ("+c.Name()+")", "connections established", "RSS growth (MiB) / KiB per connection", false,
		[]plots.Line{{Name: "RSS growth, all gates (MiB)", X: sx, Y: sy}, {Name: "KiB per connection", X: kx, Y: ky}}); err != nil {
		res.note("plot: %v", err)
	} else {
		res.Plots = append(res.Plots, Plot{Title: "Gate memory per connection (" + c.Name() + ")", File: file})
	}
	return res, nil
}
