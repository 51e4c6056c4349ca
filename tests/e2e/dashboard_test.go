package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/metricname"
	"github.com/sparkim/spark/tests/framework"
)

// dashboardPath is the shipped Grafana dashboard, relative to this file.
const dashboardPath = "../../deploy/grafana/spark.json"

// promQLWords are identifiers in an expression that name no metric:
// aggregation modifiers, set operators and vector matching keywords.
var promQLWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
}

var (
	// promQLGrouping is a "by (...)" or "without (...)" label list.
	promQLGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// promQLMatchers, promQLRanges and promQLStrings are label matchers,
	// range or subquery selectors and string literals.
	promQLMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promQLRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promQLStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	// promQLIdent is an identifier and whether a "(" follows it (then it
	// is a function, not a metric).
	promQLIdent = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)\s*(\()?`)
)

// exprMetrics returns the metric names a PromQL expression selects.
func exprMetrics(expr string) []string {
	s := promQLStrings.ReplaceAllString(expr, " ")
	s = promQLMatchers.ReplaceAllString(s, " ")
	s = promQLRanges.ReplaceAllString(s, " ")
	s = promQLGrouping.ReplaceAllString(s, " ")
	var names []string
	for _, m := range promQLIdent.FindAllStringSubmatchIndex(s, -1) {
		// An identifier glued to a preceding digit or dot is part of a
		// number (1e3, 0.5).
		if m[0] > 0 && strings.ContainsAny(s[m[0]-1:m[0]], "0123456789.") {
			continue
		}
		name := s[m[2]:m[3]]
		if m[4] >= 0 || promQLWords[strings.ToLower(name)] {
			continue
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

// The parser finds every metric of the expression shapes the dashboard
// uses, and nothing else: a parser that dropped names would let the
// dashboard test pass over a missing metric.
func TestDashboardExprMetricNames(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string][]string{
		`sum by (instance) (spark_gate_connections)`:                                                                {"spark_gate_connections"},
		`histogram_quantile(0.99, sum by (le) (rate(spark_gate_forward_latency_seconds_bucket[$__rate_interval])))`: {"spark_gate_forward_latency_seconds_bucket"},
		`sum(rate(a_sum[5m])) / sum(rate(a_count[5m]))`:                                                             {"a_sum", "a_count"},
		`sum by (code) (rate(spark_logic_requests_total{code!="0", command=~"SEND|AUTH"}[1m])) > 1e3`:               {"spark_logic_requests_total"},
		`max by (partition) (spark_deliver_queue_length) or on (partition) vector(0)`:                               {"spark_deliver_queue_length"},
	} {
		if got := exprMetrics(expr); !reflect.DeepEqual(got, want) {
			t.Errorf("exprMetrics(%q) = %q, want %q", expr, got, want)
		}
	}
}

// dashboardExprs returns every target expression of the dashboard, with
// the title of its panel, rows' nested panels included.
func dashboardExprs(t *testing.T) map[string]string {
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), dashboardPath))
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	exprs := map[string]string{}
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatalf("%s: panel: %v", dashboardPath, err)
			}
			for _, tg := range p.Targets {
				exprs[tg.Expr] = p.Title
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return exprs
}

// scrapeFamilies returns the metric families an admin listener's
// /metrics exposes (name → type). client_golang leaves out a labelled
// family with no series yet, so a name is here only if a scrape shows it.
func scrapeFamilies(addr string) (map[string]string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("%s/metrics: %s: %s", addr, resp.Status, b)
	}
	fams := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// "# TYPE name type" precedes the samples of every family.
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			fams[f[2]] = f[3]
		}
	}
	return fams, sc.Err()
}

// exposed reports whether name is a family of fams or a sample series of
// one (the _bucket, _sum and _count of a histogram, _sum and _count of a
// summary).
func exposed(fams map[string]string, name string) bool {
	if _, ok := fams[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		switch fams[base] {
		case "histogram":
			return true
		case "summary":
			return suffix != "_bucket"
		}
	}
	return false
}

// Every metric the Grafana dashboard queries is exposed by a gate, logic or
// deliver of a running cluster once it has served an AUTH, a send with its
// push and a sync, so no panel of the shipped dashboard is empty because of
// a renamed or missing metric; and every metric each process exposes
// follows the scheme of pkg/metricname.
func TestDashboardAndRunbookMetricsAllExposedByCluster(t *testing.T) {
	t.Parallel()
	exprs := dashboardExprs(t)
	alerts := runbookExprs(t)
	if len(alerts) < 5 {
		t.Fatalf("docs/runbook.md has only %d PromQL expressions; have its alerts moved?", len(alerts))
	}
	for expr, title := range alerts {
		exprs[expr] = title
	}
	needed := map[string][]string{} // metric → panel titles
	for expr, title := range exprs {
		names := exprMetrics(expr)
		if len(names) == 0 {
			t.Errorf("panel %q: no metric found in %q", title, expr)
		}
		for _, n := range names {
			if !slices.Contains(needed[n], title) {
				needed[n] = append(needed[n], title)
			}
		}
	}
	if len(needed) < 20 {
		t.Fatalf("the dashboard names only %d metrics; has it lost its panels?", len(needed))
	}

	c := framework.NewCluster(t, framework.Options{Gates: 1, Logics: 1, Delivers: 1, Partitions: 4})
	ctx := ctxT(t, time.Minute)
	const alice, bob = 31001, 31002
	a := c.Login(t, 0, alice, "dash-a")
	b := c.Login(t, 0, bob, "dash-b")
	if _, err := a.Send(ctx, sendTo(bob, "dash-1", text(t, "metrics"))); err != nil {
		t.Fatal(err)
	}
	if _, err := collect(b, 1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := framework.NewReplica().Sync(ctx, b); err != nil {
		t.Fatal(err)
	}

	admins := map[string]string{
		"gate":    c.Gates[0].AdminAddr,
		"logic":   c.Logics[0].AdminAddr,
		"deliver": c.Delivers[0].AdminAddr,
	}
	// Deliver samples its queues on a timer and counts a job after its
	// push, so the scrape is retried for a few seconds before failing.
	var missing []string
	byProc := map[string]map[string]string{} // process → its families
	deadline := time.Now().Add(15 * time.Second)
	for {
		all := map[string]string{}
		for proc, addr := range admins {
			fams, err := scrapeFamilies(addr)
			if err != nil {
				t.Fatalf("%s: %v", proc, err)
			}
			if len(fams) == 0 {
				t.Fatalf("%s: /metrics exposes no metric family", proc)
			}
			byProc[proc] = fams
			for n, typ := range fams {
				all[n] = typ
			}
		}
		missing = missing[:0]
		for n, titles := range needed {
			if !exposed(all, n) {
				missing = append(missing, fmt.Sprintf("%s (panels %q)", n, titles))
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	// What a whole process exposes follows the metric scheme, the Go
	// runtime and process collectors of its admin listener included.
	for proc, fams := range byProc {
		for n, typ := range fams {
			if err := metricname.Check(proc, n, typ); err != nil {
				t.Error(err)
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("%d metrics the dashboard queries are exposed by no process:\n  %s",
			len(missing), strings.Join(missing, "\n  "))
	}
	t.Logf("all %d metrics of %d dashboard expressions are exposed", len(needed), len(exprs))
}

// runbookPath is the runbook whose alerts' PromQL must select metrics the
// processes expose, relative to this file.
const runbookPath = "../../docs/runbook.md"

// runbookExprs returns each line of the runbook's promql code blocks,
// titled "runbook: <expr>".
func runbookExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(runbookPath)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "```promql"):
			in = true
		case strings.HasPrefix(line, "```"):
			in = false
		case in && strings.TrimSpace(line) != "":
			out[strings.TrimSpace(line)] = "runbook: " + strings.TrimSpace(line)
		}
	}
	return out
}
