package scenario

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CPUProfile is a CPU profile a scenario saved for its measured window,
// with the top entries by flat time as `go tool pprof -top` lists them.
type CPUProfile struct {
	Process string `json:"process"`
	File    string `json:"file"` // relative to the run's directory
	Seconds int    `json:"seconds"`
	// Summary is pprof's "Duration: …, Total samples = …" line.
	Summary string       `json:"summary,omitempty"`
	Top     []ProfileTop `json:"top,omitempty"`
	Err     string       `json:"error,omitempty"`
}

// ProfileTop is one line of `go tool pprof -top`: flat is the time spent
// in the function itself, cum including what it called.
type ProfileTop struct {
	Flat    string  `json:"flat"`
	FlatPct float64 `json:"flat_pct"`
	SumPct  float64 `json:"sum_pct"`
	Cum     string  `json:"cum"`
	CumPct  float64 `json:"cum_pct"`
	Func    string  `json:"func"`
}

// profileTopN is how many entries the report lists per profile.
const profileTopN = 10

// profiler fetches CPU profiles of several processes over one window.
type profiler struct {
	wg       sync.WaitGroup
	profiles []*CPUProfile
}

// startProfiles starts a CPU profile of secs seconds of gate 1, logic and
// deliver through their admin pprof endpoints, saved under
// <run>/profiles/<prefix><process>.pprof; wait returns them.
func (e *Env) startProfiles(ctx context.Context, prefix string, secs int) *profiler {
	pr := &profiler{}
	dir := filepath.Join(e.OutDir, "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		pr.profiles = append(pr.profiles, &CPUProfile{Process: "all", Err: err.Error()})
		return pr
	}
	g := e.C.Gates[0]
	for _, t := range []struct{ name, addr string }{
		{strings.TrimPrefix(g.ID, "bench-"), g.AdminAddr}, {"logic", e.C.LogicAdmin}, {"deliver", e.C.DeliverAdmin},
	} {
		p := &CPUProfile{Process: t.name, File: "profiles/" + prefix + t.name + ".pprof", Seconds: secs}
		pr.profiles = append(pr.profiles, p)
		pr.wg.Add(1)
		go func() {
			defer pr.wg.Done()
			if err := saveCPUProfile(ctx, t.addr, secs, filepath.Join(e.OutDir, p.File)); err != nil {
				p.Err = err.Error()
			}
		}()
	}
	return pr
}

// wait waits for the profiles and lists each one's top entries.
func (pr *profiler) wait(ctx context.Context, outDir string) []CPUProfile {
	pr.wg.Wait()
	out := make([]CPUProfile, 0, len(pr.profiles))
	for _, p := range pr.profiles {
		if p.Err == "" {
			summary, top, err := pprofTop(ctx, filepath.Join(outDir, p.File), profileTopN)
			p.Summary, p.Top = summary, top
			if err != nil {
				p.Err = err.Error()
			}
		}
		out = append(out, *p)
	}
	return out
}

// pprofTop runs `go tool pprof -top` on file (the Go toolchain `make
// bench` builds with; a Go CPU profile carries its symbols, so no binary
// is needed) and parses its first n entries by flat time.
func pprofTop(ctx context.Context, file string, n int) (string, []ProfileTop, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", nil, fmt.Errorf("scenario: pprof top: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, goBin, "tool", "pprof", "-top", "-nodecount="+strconv.Itoa(n), file)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", nil, fmt.Errorf("scenario: go tool pprof -top %s: %w: %s", filepath.Base(file), err, strings.TrimSpace(stderr.String()))
	}
	return parsePprofTop(bytes.NewReader(out))
}

// parsePprofTop reads the text of `go tool pprof -top`: header lines, the
// column line ("flat  flat%   sum%        cum   cum%"), then one line per
// function.
func parsePprofTop(r io.Reader) (string, []ProfileTop, error) {
	sc := bufio.NewScanner(r)
	var summary string
	var top []ProfileTop
	inTable := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "Duration:"):
			summary = line
		case strings.HasPrefix(line, "flat") && strings.Contains(line, "cum%"):
			inTable = true
		case inTable && line != "":
			f := strings.Fields(line)
			if len(f) < 6 {
				return summary, top, fmt.Errorf("scenario: pprof top: unexpected line %q", line)
			}
			pct := func(s string) float64 { v, _ := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64); return v }
			top = append(top, ProfileTop{Flat: f[0], FlatPct: pct(f[1]), SumPct: pct(f[2]), Cum: f[3], CumPct: pct(f[4]), Func: strings.Join(f[5:], " ")})
		}
	}
	if err := sc.Err(); err != nil {
		return summary, top, fmt.Errorf("scenario: pprof top: %w", err)
	}
	if !inTable {
		return summary, top, fmt.Errorf("scenario: pprof top: no table in the output")
	}
	return summary, top, nil
}

// logicMetric reads samples of logic's Prometheus text exposition by
// their exact name as exposed (e.g. "spark_logic_send_batch_size_sum";
// labels, if any, are part of the name).
func (e *Env) logicMetric(ctx context.Context, names ...string) (map[string]float64, error) {
	return readMetrics(ctx, "logic", e.C.LogicAdmin, names...)
}

// deliverMetric is logicMetric for deliver.
func (e *Env) deliverMetric(ctx context.Context, names ...string) (map[string]float64, error) {
	return readMetrics(ctx, "deliver", e.C.DeliverAdmin, names...)
}

func readMetrics(ctx context.Context, process, adminAddr string, names ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+adminAddr+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("scenario: metrics request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scenario: %s metrics: %w", process, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scenario: %s metrics: %s", process, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, n := range names {
			if rest, ok := strings.CutPrefix(line, n+" "); ok {
				v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
				if err != nil {
					return nil, fmt.Errorf("scenario: %s metric %s: %w", process, n, err)
				}
				out[n] = v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scenario: %s metrics: %w", process, err)
	}
	return out, nil
}
