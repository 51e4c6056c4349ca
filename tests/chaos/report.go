package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Summary is the machine-readable outcome of a run (summary.json).
type Summary struct {
	Pass       bool                `json:"pass"`
	Seed       uint64              `json:"seed"`
	Duration   string              `json:"duration"`
	Elapsed    string              `json:"elapsed"`
	Stats      Stats               `json:"stats"`
	Failures   map[string]int      `json:"failures"`
	Examples   map[string][]string `json:"examples"`
	Faults     []string            `json:"faults"`
	Undrained  string              `json:"undrained,omitempty"`
	OutboxLeft int                 `json:"outbox_left"`
	Events     int                 `json:"events"`
	Restarts   []Restart           `json:"restarts,omitempty"`
}

// sampleKeep is how many load events (sends, answers, pushes, syncs) the
// trimmed history keeps, half from the start and half from the end;
// phases, faults and the final state are all kept.
const sampleKeep = 3000

// structural reports whether e describes the run rather than the load:
// the trimmed history keeps all of those.
func structural(e Event) bool {
	switch e.Kind {
	case KindPhase, KindFault, KindInbox, KindInboxDone, KindSteady, KindDeviceEnd:
		return true
	}
	return false
}

// WriteReport writes verdict.txt, summary.json and history-trimmed.jsonl
// (the phases, faults and final lists, and sampleKeep other events) into
// dir. The full history is the History writer's.
func WriteReport(dir string, cfg Config, res Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("chaos: report dir: %w", err)
	}
	cfg.defaults()
	sum := Summary{Pass: res.Verdict.Pass, Seed: res.Seed, Duration: cfg.Duration.String(), Elapsed: res.Elapsed.Round(time.Second).String(),
		Stats: res.Verdict.Stats, Failures: res.Verdict.Failures, Examples: res.Verdict.Examples,
		Undrained: res.Undrained, OutboxLeft: res.OutboxLeft, Events: len(res.Events), Restarts: res.Restarts}
	for _, e := range res.Events {
		if e.Kind == KindFault {
			line := time.UnixMilli(e.T).UTC().Format("15:04:05") + " " + e.Detail
			if e.Err != "" {
				line += ": " + e.Err
			}
			sum.Faults = append(sum.Faults, line)
		}
	}
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return fmt.Errorf("chaos: encode summary: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("chaos: write summary: %w", err)
	}
	window := fmt.Sprintf("load under faults %v", cfg.Duration)
	if cfg.Rolling {
		window = "load under a rolling restart"
		sum.Duration = ""
	}
	verdict := fmt.Sprintf("seed %d, %s, whole run %v\n%s", res.Seed, window, res.Elapsed.Round(time.Second), res.Verdict)
	if res.Undrained != "" {
		verdict += "deliver queue not drained at the end: " + res.Undrained + "\n"
	}
	if len(res.Restarts) > 0 {
		verdict += restartTable(res.Restarts)
	}
	if err := os.WriteFile(filepath.Join(dir, "verdict.txt"), []byte(verdict), 0o644); err != nil {
		return fmt.Errorf("chaos: write verdict: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "history-trimmed.jsonl"))
	if err != nil {
		return fmt.Errorf("chaos: trimmed history: %w", err)
	}
	defer f.Close()
	h := NewHistory(f)
	load := 0
	for _, e := range res.Events {
		if !structural(e) {
			load++
		}
	}
	i := 0
	for _, e := range res.Events {
		if !structural(e) {
			i++
			if i > sampleKeep/2 && i <= load-sampleKeep/2 {
				continue
			}
		}
		h.Add(e)
	}
	return h.Flush()
}
