// Command imbench benchmarks the Spark IM server on this machine: it
// builds nothing itself but runs the real binaries of bin/ against a fresh
// database, drives them with an event-driven load generator, measures the
// storage ceilings in the same run and writes a JSON and Markdown report
// with plots to bench/results/<timestamp>/ and bench/results/latest.md.
//
//	imbench [-profile short|long|tiny] [-scenarios conn,p2p,...] [-root DIR]
//
// `imbench -worker conn` is the worker mode the conn scenario re-executes
// itself in (the open-file limit is per process).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sparkim/spark/bench/internal/cluster"
	"github.com/sparkim/spark/bench/internal/report"
	"github.com/sparkim/spark/bench/internal/scenario"
	"github.com/sparkim/spark/bench/internal/wire"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	profile := flag.String("profile", "short", "short (make bench), long (the targets' sizes) or tiny (development)")
	only := flag.String("scenarios", "", "comma-separated subset of "+names())
	root := flag.String("root", "", "repository root (default: found from the working directory)")
	out := flag.String("out", "", "results directory (default <root>/bench/results)")
	workerMode := flag.String("worker", "", "internal: run as a worker of the named scenario")
	rate := flag.Int("p2p-rate", 0, "override the profile's p2p target rate (msg/s)")
	grace := flag.Duration("grace", -1, "override the profile's grace period for late pushes (e.g. 0 to exercise the sync check)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *workerMode != "" {
		if err := scenario.ConnWorker(ctx, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "imbench worker:", err)
			os.Exit(1)
		}
		return
	}
	p, ok := scenario.Profiles()[*profile]
	if !ok {
		log.Error("imbench", "err", fmt.Sprintf("unknown profile %q", *profile))
		os.Exit(2)
	}
	if *rate > 0 {
		p.P2PRate = *rate
	}
	if *grace >= 0 {
		p.Grace = *grace
	}
	if err := run(ctx, log, p, *only, *root, *out); err != nil {
		log.Error("imbench", "err", err)
		os.Exit(1)
	}
}

func names() string {
	var n []string
	for _, s := range scenario.List() {
		n = append(n, s.Name())
	}
	return strings.Join(n, ",")
}

func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("imbench: no go.work above the working directory; pass -root")
		}
		dir = parent
	}
}

func run(ctx context.Context, log *slog.Logger, p scenario.Profile, only, root, out string) error {
	began := time.Now()
	if root == "" {
		var err error
		if root, err = findRoot(); err != nil {
			return err
		}
	}
	if out == "" {
		out = filepath.Join(root, "bench/results")
	}
	stamp := began.UTC().Format("20060102-150405")
	dir := filepath.Join(out, stamp)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("imbench: %w", err)
	}
	scratch, err := os.MkdirTemp("", "imbench-")
	if err != nil {
		return fmt.Errorf("imbench: %w", err)
	}
	// The processes' logs are what explains a failed check, so they stay
	// when one failed; a clean run leaves nothing behind.
	keepLogs := false
	defer func() {
		if keepLogs {
			log.Warn("a check failed: the system's logs are kept", "dir", scratch)
			return
		}
		_ = os.RemoveAll(scratch)
	}()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("imbench: %w", err)
	}
	svc, err := cluster.FindServices(ctx, root)
	if err != nil {
		return err
	}
	log.Info("starting the system", "profile", p.Name, "mysql", svc.ServerDSN, "redis", svc.RedisAddr, "logs", scratch)
	c, err := cluster.Start(ctx, cluster.Options{Root: root, Dir: scratch, Gates: 3, Services: svc,
		// The per-device send limit protects production from one noisy
		// device; here it would cap the benchmark instead of the system.
		ExtraEnv: []string{"IM_LOGIC_RATE_LIMIT_SEND_DEVICE_RATE=1000000", "IM_LOGIC_RATE_LIMIT_SEND_DEVICE_BURST=1000000"}}, log)
	if err != nil {
		return err
	}
	defer c.Close()
	eng, err := wire.New(2)
	if err != nil {
		return err
	}
	defer eng.Close()
	env := scenario.NewEnv(c, eng, p, log, self, dir)
	r := &report.Run{Started: began, Profile: p, Machine: report.Machine()}
	var want []string
	if only != "" {
		want = strings.Split(only, ",")
	}
	for _, s := range scenario.List() {
		if want != nil && !slices.Contains(want, s.Name()) {
			continue
		}
		log.Info("scenario", "name", s.Name())
		t0 := time.Now()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		res, err := s.Run(sctx, env)
		cancel()
		if res == nil {
			res = &scenario.Result{Scenario: s.Name()}
		}
		res.Seconds = time.Since(t0).Seconds()
		if err != nil {
			res.Error = err.Error()
			res.Passed = false
			log.Error("scenario failed", "name", s.Name(), "err", err)
		}
		if !res.Passed {
			r.Failures = append(r.Failures, s.Name())
		}
		r.Results = append(r.Results, res)
		if ctx.Err() != nil {
			break
		}
	}
	r.Seconds = time.Since(began).Seconds()
	keepLogs = len(r.Failures) > 0
	if err := report.WriteJSON(dir, r); err != nil {
		return err
	}
	var md bytes.Buffer
	report.Markdown(&md, r, "")
	if err := os.WriteFile(filepath.Join(dir, "report.md"), md.Bytes(), 0o644); err != nil {
		return fmt.Errorf("imbench: %w", err)
	}
	md.Reset()
	report.Markdown(&md, r, stamp+"/")
	if err := os.WriteFile(filepath.Join(out, "latest.md"), md.Bytes(), 0o644); err != nil {
		return fmt.Errorf("imbench: %w", err)
	}
	fmt.Printf("\nimbench %s profile, %.0f s — report %s\n\n", p.Name, r.Seconds, filepath.Join(dir, "report.md"))
	report.Summary(os.Stdout, r)
	if len(r.Failures) > 0 {
		return fmt.Errorf("imbench: scenarios failed their checks: %s", strings.Join(r.Failures, ", "))
	}
	return nil
}
