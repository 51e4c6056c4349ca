package chaos

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestHistoryFileReadsBackTheRecordedEvents(t *testing.T) {
	ev, _ := scenario()
	path := filepath.Join(t.TempDir(), "history.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHistory(f)
	for _, e := range ev {
		h.Add(e)
	}
	if err := h.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, ev) {
		t.Fatalf("read back %d events, differing from the %d recorded:\n%v\n%v", len(got), len(ev), got, ev)
	}
}

func TestTrimmedHistoryKeepsTheRunAndSamplesTheLoad(t *testing.T) {
	var ev []Event
	ev = append(ev, Event{T: 1, Kind: KindPhase, Detail: PhaseLoad})
	for i := 0; i < 2*sampleKeep; i++ {
		ev = append(ev, Event{T: int64(2 + i), Kind: KindPush, Device: "d", Msg: int64(i + 1)})
		if i == sampleKeep {
			ev = append(ev, Event{T: int64(2 + i), Kind: KindFault, Detail: "kill -9 gate-1"})
		}
	}
	ev = append(ev, Event{T: 1 << 40, Kind: KindDeviceEnd, Device: "d"})
	dir := t.TempDir()
	res := Result{Events: ev, Elapsed: time.Second, Verdict: Verdict{Pass: true}}
	if err := WriteReport(dir, Config{}, res); err != nil {
		t.Fatal(err)
	}
	got, err := ReadHistory(filepath.Join(dir, "history-trimmed.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	load, structuralKept := 0, 0
	for _, e := range got {
		if structural(e) {
			structuralKept++
		} else {
			load++
		}
	}
	if load != sampleKeep || structuralKept != 3 {
		t.Fatalf("kept %d load and %d run events, want %d and 3", load, structuralKept, sampleKeep)
	}
	if got[1].Msg != 1 || got[len(got)-2].Msg != int64(2*sampleKeep) {
		t.Fatalf("the sample does not start with the first push and end with the last: first %d, last %d", got[1].Msg, got[len(got)-2].Msg)
	}
	for _, name := range []string{"verdict.txt", "summary.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("report file: %v", err)
		}
	}
}
