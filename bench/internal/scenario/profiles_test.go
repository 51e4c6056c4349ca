package scenario

import (
	"strings"
	"testing"
)

// The text of a real `go tool pprof -top -nodecount=4` run (go1.26).
const pprofTopOutput = `File: hist.test
Build ID: a62b75b6ffadf2b6c640f210ea6b57813ec33388
Type: cpu
Time: 2026-12-02 03:29:03 UTC
Duration: 246.63ms, Total samples = 140ms (56.76%)
Showing nodes accounting for 140ms, 100% of 140ms total
Showing top 4 nodes out of 19
      flat  flat%   sum%        cum   cum%
      70ms 50.00% 50.00%       80ms 57.14%  sort.partition_func
      20ms 14.29% 64.29%       20ms 14.29%  math/rand/v2.(*PCG).Uint64
      10ms  7.14%   100%       10ms  7.14%  runtime.memclrNoHeapPointers
         0     0%   100%       10ms  7.14%  math/rand/v2.(*Rand).Int64N (inline)
`

func TestParsePprofTop(t *testing.T) {
	summary, top, err := parsePprofTop(strings.NewReader(pprofTopOutput))
	if err != nil {
		t.Fatal(err)
	}
	if summary != "Duration: 246.63ms, Total samples = 140ms (56.76%)" {
		t.Fatalf("summary %q", summary)
	}
	want := []ProfileTop{
		{Flat: "70ms", FlatPct: 50, SumPct: 50, Cum: "80ms", CumPct: 57.14, Func: "sort.partition_func"},
		{Flat: "20ms", FlatPct: 14.29, SumPct: 64.29, Cum: "20ms", CumPct: 14.29, Func: "math/rand/v2.(*PCG).Uint64"},
		{Flat: "10ms", FlatPct: 7.14, SumPct: 100, Cum: "10ms", CumPct: 7.14, Func: "runtime.memclrNoHeapPointers"},
		{Flat: "0", FlatPct: 0, SumPct: 100, Cum: "10ms", CumPct: 7.14, Func: "math/rand/v2.(*Rand).Int64N (inline)"},
	}
	if len(top) != len(want) {
		t.Fatalf("got %d entries, want %d: %+v", len(top), len(want), top)
	}
	for i := range want {
		if top[i] != want[i] {
			t.Errorf("entry %d: got %+v, want %+v", i, top[i], want[i])
		}
	}
	if _, _, err := parsePprofTop(strings.NewReader("File: x\nno table\n")); err == nil {
		t.Fatal("output without a table accepted")
	}
}
