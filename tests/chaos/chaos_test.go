//go:build chaos

package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// durationFromEnv reads a duration such as "5m" from the environment.
func durationFromEnv(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

// artifactDir is where a run's verdict and history are kept for
// inspection: $SPARK_ARTIFACTS_DIR/chaos/<name> (default .run/artifacts
// of the repository), else the test's temporary directory.
func artifactDir(t *testing.T) string {
	base := os.Getenv("SPARK_ARTIFACTS_DIR")
	if base == "" {
		if wd, err := os.Getwd(); err == nil {
			base = filepath.Join(wd, "..", "..", ".run", "artifacts")
		} else {
			return t.TempDir()
		}
	}
	dir := filepath.Join(base, "chaos", t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runChaos(t *testing.T, cfg Config) Result {
	dir := artifactDir(t)
	hf, err := os.Create(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close()
	cfg.History = hf
	cfg.Logf = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+6*time.Minute)
	defer cancel()
	res, err := Run(ctx, t, cfg)
	if err != nil {
		t.Fatalf("chaos run (seed %d): %v", res.Seed, err)
	}
	if err := WriteReport(dir, cfg, res); err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d, %v; history and verdict in %s\n%s", res.Seed, res.Elapsed.Round(time.Second), dir, res.Verdict)
	return res
}

// TestChaosKillsAndOutagesKeepEveryInvariant runs the mixed load for
// SPARK_CHAOS_DURATION (default 90 s, and on until every kind of fault
// has happened) while processes are killed and restarted every few
// seconds and Redis and MySQL stop once each, and requires the checker's
// PASS and every kind of fault injected (decision 88).
func TestChaosKillsAndOutagesKeepEveryInvariant(t *testing.T) {
	res := runChaos(t, Config{Duration: durationFromEnv(t, "SPARK_CHAOS_DURATION", 90*time.Second),
		FaultGap: 6 * time.Second, FaultDown: 3 * time.Second, EveryFault: true})
	if !res.Verdict.Pass {
		t.Fatalf("chaos verdict FAIL (seed %d):\n%s", res.Seed, res.Verdict)
	}
	if res.Verdict.Stats.Faults == 0 {
		t.Fatalf("no fault was injected")
	}
	if missing := missingFaults(res.Events); len(missing) > 0 {
		t.Fatalf("the run never injected: %s (seed %d); a PASS without them proves less", strings.Join(missing, ", "), res.Seed)
	}
}

// TestChaosRollingRestartOfEveryProcessLosesNothing rolls a release over
// the whole cluster under the mixed load: every gate, then both logic and
// both deliver processes, SIGTERM and restart one at a time, each ready
// before the next. The checker must PASS (no acknowledged message lost or
// doubled, every device converged), every step must succeed, and each
// gate's clients must have moved; the reconnect figures of each step are
// in the verdict and summary.json (the storm's spread).
func TestChaosRollingRestartOfEveryProcessLosesNothing(t *testing.T) {
	res := runChaos(t, Config{Rolling: true})
	if !res.Verdict.Pass {
		t.Fatalf("chaos verdict FAIL after a rolling restart (seed %d):\n%s", res.Seed, res.Verdict)
	}
	if len(res.Restarts) != 7 {
		t.Fatalf("%d restart steps, want 7 (3 gates, 2 logic, 2 deliver): %+v", len(res.Restarts), res.Restarts)
	}
	for _, r := range res.Restarts {
		if r.Err != "" {
			t.Errorf("restart of %s: %s", r.Process, r.Err)
		}
		if strings.HasPrefix(r.Process, "gate") && r.Reconnected == 0 {
			t.Errorf("restart of %s: no device reconnected, yet its clients were kicked", r.Process)
		}
	}
	t.Logf("\n%s", restartTable(res.Restarts))
}

// TestChaosGaleraWriterKillLosesAndDoublesNothing runs the mixed load on
// a three-node Galera cluster, kills the writer node (kill -9) a third
// into the window and moves every logic to another node: the checker must
// find every acknowledged send stored once, in order, and every device
// converged, with the truth read from the new writer.
func TestChaosGaleraWriterKillLosesAndDoublesNothing(t *testing.T) {
	res := runChaos(t, Config{GaleraFailover: true, Duration: durationFromEnv(t, "SPARK_CHAOS_DURATION", 60*time.Second)})
	if !res.Verdict.Pass {
		t.Fatalf("chaos verdict FAIL after the Galera writer's kill (seed %d):\n%s", res.Seed, res.Verdict)
	}
	var killed, moved bool
	for _, e := range res.Events {
		if e.Kind == KindFault && e.Err == "" {
			killed = killed || strings.HasPrefix(e.Detail, "galera writer node")
			moved = moved || strings.HasPrefix(e.Detail, "failover to galera node")
		}
	}
	if !killed || !moved {
		t.Fatalf("the run did not kill the writer (%v) and fail over (%v) without errors", killed, moved)
	}
	t.Logf("acknowledged sends: %d", res.Verdict.Stats.Acked)
}

// missingFaults lists the faults the run should have injected and did
// not: each process kind killed and stopped, Redis and MySQL stopped.
func missingFaults(events []Event) []string {
	seen := map[string]bool{}
	for _, e := range events {
		if e.Kind == KindFault {
			seen[e.Detail] = true
		}
	}
	var want []string
	for _, k := range processKinds {
		for _, h := range processSignals {
			want = append(want, h+" "+k)
		}
	}
	want = append(want, "redis stop", "mysql stop")
	var missing []string
	for _, w := range want {
		found := false
		for d := range seen {
			// "kill -9 gate-2" is a "kill -9 gate".
			if d == w || strings.HasPrefix(d, w+"-") {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, w)
		}
	}
	return missing
}

// TestChaosCheckerFailsWhenDeliverDropsOneJob breaks deliver on purpose:
// in the calm phase each deliver drops one message job (acked with no
// list update and no push). The checker must say FAIL, through the calm
// push expectation and the unread truth, and nothing else may fail.
//
// The failpoint is armed only in the calm phase, so the load under faults
// before it (SPARK_CHAOS_TEETH_DURATION, default 20 s: Redis and MySQL
// still stop once each) only has to leave state for the checks to read.
func TestChaosCheckerFailsWhenDeliverDropsOneJob(t *testing.T) {
	res := runChaos(t, Config{Duration: durationFromEnv(t, "SPARK_CHAOS_TEETH_DURATION", 20*time.Second), Failpoint: DropOneJob})
	v := res.Verdict
	if v.Pass {
		t.Fatalf("verdict PASS with a deliver that drops a job; the checker has no teeth:\n%s", v)
	}
	for _, check := range []string{CheckCalmPush, CheckUnread} {
		if v.Failures[check] == 0 {
			t.Errorf("the dropped job was not caught by %s:\n%s", check, v)
		}
	}
	allowed := map[string]bool{CheckCalmPush: true, CheckUnread: true, CheckConversationList: true, CheckDeviceList: true}
	var other []string
	for check := range v.Failures {
		if !allowed[check] {
			other = append(other, check)
		}
	}
	if len(other) > 0 {
		t.Errorf("checks failed that a dropped job does not explain: %s\n%s", strings.Join(other, ", "), v)
	}
}
