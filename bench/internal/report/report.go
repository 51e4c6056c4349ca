// Package report writes a run's JSON and Markdown report and the summary
// table printed at the end of `make bench`.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/sparkim/spark/bench/internal/scenario"
)

// Run is everything one imbench run measured.
type Run struct {
	Started  time.Time          `json:"started"`
	Seconds  float64            `json:"seconds"`
	Profile  scenario.Profile   `json:"profile"`
	Machine  map[string]string  `json:"machine"`
	Results  []*scenario.Result `json:"results"`
	Failures []string           `json:"failures,omitempty"`
}

// Machine describes where the run happened.
func Machine() map[string]string {
	m := map[string]string{"go": runtime.Version(), "cpus": fmt.Sprint(runtime.NumCPU()), "os": runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m["kernel"] = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, v, _ := strings.Cut(l, ":")
				m["cpu"] = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// WriteJSON writes run.json into dir.
func WriteJSON(dir string, r *Run) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "run.json"), b, 0o644)
}

func fmtValue(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000 || v == float64(int64(v)):
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 0.1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func status(f scenario.Figure) string {
	if f.Met == nil {
		return ""
	}
	if *f.Met {
		return "met"
	}
	return "**NOT MET**"
}

// Summary writes the table of every figure with a target, plus each
// scenario's correctness verdict.
func Summary(w io.Writer, r *Run) {
	fmt.Fprintln(w, "| scenario | figure | value | target | |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- |")
	for _, res := range r.Results {
		verdict := "checks passed"
		if !res.Passed {
			verdict = "**CHECKS FAILED**"
		}
		if res.Error != "" {
			verdict = "**ERROR**: " + res.Error
		}
		fmt.Fprintf(w, "| %s | correctness | %s | | |\n", res.Scenario, verdict)
		for _, f := range res.Figures {
			if f.Target == "" && !f.Headline && !headline(f.Name) {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s %s | %s | %s |\n", res.Scenario, f.Name, fmtValue(f.Value), f.Unit, f.Target, status(f))
		}
	}
}

// headline figures appear in the summary although they have no target.
func headline(name string) bool {
	for _, h := range []string{"connect+AUTH rate", "HEARTBEAT p99", "SEND_ACK p50", "end-to-end p50", "end-to-end p999",
		"lost", "duplicates", "raw send transactions (MySQL)", "raw XADD (Redis)", "time to converge", "CPU per delivered message (gate+logic+deliver)",
		"errors (non-0 answers + no answer)", "offered rate", "achieved rate", "delivered rate", "pushed in time", "pushed late", "only by sync", "also pushed",
		"deliver backlog at the end of the window (XLEN)"} {
		if strings.HasPrefix(name, h) {
			return true
		}
	}
	return false
}

// Markdown writes the full report; imgPrefix is prepended to plot file
// names (for latest.md, which lives one directory up).
func Markdown(w io.Writer, r *Run, imgPrefix string) {
	fmt.Fprintf(w, "# Benchmark run %s (profile %s)\n\n", r.Started.UTC().Format("2006-01-02 15:04:05 UTC"), r.Profile.Name)
	fmt.Fprintf(w, "Machine: %s, %s CPUs, Linux %s, %s. Everything — load generator, three gates, logic, deliver, MariaDB, Redis — shares these CPUs; the run took %.0f s.\n\n",
		r.Machine["cpu"], r.Machine["cpus"], r.Machine["kernel"], r.Machine["go"], r.Seconds)
	fmt.Fprintln(w, "Latencies come from client timestamps in imbench (end-to-end: the send time is carried in `client_msg_id` and read back from the recipient's MESSAGE); memory from `/proc/<pid>/status` VmRSS; CPU from `/proc/<pid>/stat` utime+stime over the measured window. Targets are printed next to each figure; a target not met is reported, not hidden.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Summary")
	fmt.Fprintln(w)
	Summary(w, r)
	if len(r.Failures) > 0 {
		fmt.Fprintln(w)
		for _, f := range r.Failures {
			fmt.Fprintf(w, "- FAILED: %s\n", f)
		}
	}
	for _, res := range r.Results {
		fmt.Fprintf(w, "\n## %s (%.0f s)\n\n", res.Scenario, res.Seconds)
		if res.Error != "" {
			fmt.Fprintf(w, "Error: %s\n\n", res.Error)
		}
		fmt.Fprintln(w, "| figure | value | target | |")
		fmt.Fprintln(w, "| --- | --- | --- | --- |")
		for _, f := range res.Figures {
			fmt.Fprintf(w, "| %s | %s %s | %s | %s |\n", f.Name, fmtValue(f.Value), f.Unit, f.Target, status(f))
		}
		if cpu, ok := res.Data["cpu_seconds"].(map[string]float64); ok {
			fmt.Fprintln(w)
			fmt.Fprint(w, "CPU seconds over the measured window:")
			for _, k := range sortedKeys(cpu) {
				fmt.Fprintf(w, " %s %.1f;", k, cpu[k])
			}
			fmt.Fprintln(w)
		}
		if len(res.Notes) > 0 {
			fmt.Fprintln(w)
			for _, n := range res.Notes {
				fmt.Fprintf(w, "- %s\n", n)
			}
		}
		writeProfiles(w, res.Profiles, imgPrefix)
		for _, p := range res.Plots {
			fmt.Fprintf(w, "\n![%s](%s%s)\n", p.Title, imgPrefix, p.File)
		}
	}
}

// writeProfiles lists each CPU profile's top entries by flat time (the
// function's own samples), so the report names where the window's CPU
// went without opening pprof; the file is linked for the rest.
func writeProfiles(w io.Writer, ps []scenario.CPUProfile, prefix string) {
	for _, p := range ps {
		fmt.Fprintf(w, "\n**CPU profile of %s** ([%s](%s%s), %d s", p.Process, p.File, prefix, p.File, p.Seconds)
		if p.Summary != "" {
			fmt.Fprintf(w, "; %s", p.Summary)
		}
		fmt.Fprintln(w, ")")
		if p.Err != "" {
			fmt.Fprintf(w, "\nNot listed: %s\n", p.Err)
			continue
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| flat | flat% | sum% | cum | cum% | function |")
		fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- |")
		for _, t := range p.Top {
			fmt.Fprintf(w, "| %s | %.1f%% | %.1f%% | %s | %.1f%% | `%s` |\n", t.Flat, t.FlatPct, t.SumPct, t.Cum, t.CumPct, t.Func)
		}
	}
}

func sortedKeys(m map[string]float64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	for i := 1; i < len(ks); i++ {
		for j := i; j > 0 && ks[j] < ks[j-1]; j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
	return ks
}
