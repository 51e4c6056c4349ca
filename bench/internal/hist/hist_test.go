package hist

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// exact returns the nearest-rank quantile of sorted values.
func exact(sorted []int64, q float64) int64 {
	r := int(math.Ceil(q * float64(len(sorted))))
	if r < 1 {
		r = 1
	}
	return sorted[r-1]
}

func within(t *testing.T, name string, got, want int64) {
	t.Helper()
	tol := float64(want) / subCount
	if tol < 1 {
		tol = 1
	}
	if math.Abs(float64(got-want)) > tol {
		t.Errorf("%s = %d, want %d ± %.0f", name, got, want, tol)
	}
}

func TestQuantilesOfKnownDistributions(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := map[string]func() int64{
		"uniform 1..100000":    func() int64 { return 1 + rng.Int64N(100000) },
		"exponential mean 2ms": func() int64 { return int64(rng.ExpFloat64() * 2e6) },
		"lognormal":            func() int64 { return int64(math.Exp(rng.NormFloat64()*1.5 + 13)) },
		"small exact 0..127":   func() int64 { return rng.Int64N(128) },
	}
	for name, gen := range cases {
		h := New()
		vals := make([]int64, 200000)
		for i := range vals {
			vals[i] = gen()
			h.Record(vals[i])
		}
		sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
		if h.Count() != uint64(len(vals)) {
			t.Fatalf("%s: count %d", name, h.Count())
		}
		for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999, 1} {
			within(t, name, h.Quantile(q), exact(vals, q))
		}
		if h.Max() != vals[len(vals)-1] || h.Min() != vals[0] {
			t.Errorf("%s: min/max %d/%d want %d/%d", name, h.Min(), h.Max(), vals[0], vals[len(vals)-1])
		}
	}
}

func TestUniformPercentilesExactValues(t *testing.T) {
	// 1..1000 once each: p50 is 500, p99 990, p999 999 (nearest rank).
	h := New()
	for v := int64(1); v <= 1000; v++ {
		h.Record(v)
	}
	within(t, "p50", h.Quantile(0.5), 500)
	within(t, "p99", h.Quantile(0.99), 990)
	within(t, "p999", h.Quantile(0.999), 999)
	if h.Mean() != 500.5 {
		t.Errorf("mean %v", h.Mean())
	}
}

func TestBucketsAreContiguous(t *testing.T) {
	prevHi := int64(-1)
	for i := 0; i < (20+2)<<SubBits; i++ {
		lo, hi := bounds(i)
		if int64(lo) != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if index(lo) != i || index(hi) != i {
			t.Fatalf("bucket %d: index(lo)=%d index(hi)=%d", i, index(lo), index(hi))
		}
		prevHi = int64(hi)
	}
}

func TestMergeAndJSONRoundTrip(t *testing.T) {
	a, b, all := New(), New(), New()
	for i := int64(0); i < 5000; i++ {
		a.Record(i * 1000)
		b.Record(i * 7919)
		all.Record(i * 1000)
		all.Record(i * 7919)
	}
	raw, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	var b2 Histogram
	if err := json.Unmarshal(raw, &b2); err != nil {
		t.Fatal(err)
	}
	a.Merge(&b2)
	for _, q := range []float64{0.5, 0.99, 0.999} {
		if a.Quantile(q) != all.Quantile(q) {
			t.Errorf("q%v: merged %d, direct %d", q, a.Quantile(q), all.Quantile(q))
		}
	}
	if a.Count() != 10000 {
		t.Errorf("count %d", a.Count())
	}
	if err := json.Unmarshal([]byte(`{"buckets":[[1,2]],"n":3}`), &b2); err == nil {
		t.Error("a histogram whose buckets do not add up was accepted")
	}
}
