// Command imchaos runs the chaos runner (tests/chaos) outside go test, for
// long runs: a cluster of 3 gates, 2 logic and 2 deliver processes under
// a mixed load while processes are killed and restarted and Redis and
// MySQL stop once each, then the checker's verdict. It writes
// history.jsonl, history-trimmed.jsonl, summary.json and verdict.txt into
// -out and exits 0 on PASS, 1 on FAIL and 2 when the run could not be
// carried out.
//
//	go run ./tests/cmd/imchaos -duration 30m -out tests/chaos/results/$(date -u +%Y%m%d-%H%M%S)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sparkim/spark/tests/chaos"
	"github.com/sparkim/spark/tests/framework"
)

func main() {
	duration := flag.Duration("duration", 5*time.Minute, "load under faults (setup, recovery and checks take about 1.5 minutes more)")
	seed := flag.Uint64("seed", 0, "seed of the load's and the faults' choices (0: from the clock)")
	out := flag.String("out", "", "directory for the history and the verdict (default tests/chaos/results/<UTC timestamp>)")
	fp := flag.String("failpoint", "", "name=action armed on every deliver at the calm phase, e.g. "+chaos.DropOneJob+" (binaries with -tags failpoints)")
	flag.Parse()
	if *out == "" {
		*out = filepath.Join("tests", "chaos", "results", time.Now().UTC().Format("20060102-150405"))
	}
	os.Exit(run(*duration, *seed, *out, *fp))
}

func run(duration time.Duration, seed uint64, out, fp string) int {
	if err := os.MkdirAll(out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "imchaos:", err)
		return 2
	}
	hf, err := os.Create(filepath.Join(out, "history.jsonl"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "imchaos:", err)
		return 2
	}
	defer hf.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	logf := func(format string, args ...any) {
		fmt.Printf("%s %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	cfg := chaos.Config{Duration: duration, Seed: seed, Failpoint: fp, History: hf, Logf: logf}
	tb := framework.NewCommandTB("imchaos", logf)
	var res chaos.Result
	var runErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, runErr = chaos.Run(ctx, tb, cfg)
	}()
	<-done
	tb.RunCleanups()
	switch {
	case tb.Failed():
		fmt.Fprintln(os.Stderr, "imchaos: the cluster failed:", tb.Failure())
		return 2
	case runErr != nil:
		fmt.Fprintln(os.Stderr, "imchaos:", runErr)
		return 2
	}
	if err := chaos.WriteReport(out, cfg, res); err != nil {
		fmt.Fprintln(os.Stderr, "imchaos:", err)
		return 2
	}
	fmt.Printf("seed %d, whole run %v, history in %s\n%s", res.Seed, res.Elapsed.Round(time.Second), out, res.Verdict)
	if !res.Verdict.Pass {
		return 1
	}
	return 0
}
