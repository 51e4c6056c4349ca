// Package hist is a log-bucket (HDR-style) latency histogram: values below
// 2^SubBits are counted exactly, larger ones in buckets whose width is at
// most 1/2^SubBits of their value, so every percentile is within that
// relative error whatever the range. Histograms merge exactly, which lets
// worker processes ship theirs to the parent as JSON.
package hist

import (
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"time"
)

// SubBits sets the precision: 7 gives buckets at most 1/128 (0.78 %) wide.
const SubBits = 7

const subCount = 1 << SubBits

// maxShift covers values up to 2^63.
const maxShift = 63 - SubBits

// Histogram counts non-negative int64 values (nanoseconds for latencies).
// It is not safe for concurrent use; callers lock (see Locked).
type Histogram struct {
	counts []uint64
	n      uint64
	min    int64
	max    int64
	sum    float64
}

// New returns an empty histogram.
func New() *Histogram {
	return &Histogram{counts: make([]uint64, (maxShift+2)<<SubBits), min: math.MaxInt64}
}

func index(v uint64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - SubBits - 1
	m := v >> uint(shift)
	return (shift+1)<<SubBits + int(m-subCount)
}

// bounds returns the smallest and largest value of bucket i.
func bounds(i int) (lo, hi uint64) {
	if i < subCount {
		return uint64(i), uint64(i)
	}
	shift := i>>SubBits - 1
	m := uint64(i&(subCount-1)) + subCount
	lo = m << uint(shift)
	hi = (m+1)<<uint(shift) - 1
	return lo, hi
}

// Record adds one value; negative values count as 0.
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[index(uint64(v))]++
	h.n++
	h.sum += float64(v)
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
}

// RecordDuration adds d in nanoseconds.
func (h *Histogram) RecordDuration(d time.Duration) { h.Record(int64(d)) }

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Min is the smallest recorded value (0 when empty).
func (h *Histogram) Min() int64 {
	if h.n == 0 {
		return 0
	}
	return h.min
}

// Max is the largest recorded value.
func (h *Histogram) Max() int64 { return h.max }

// Mean is the exact mean.
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Quantile returns the value at rank ceil(q·n) (nearest-rank definition),
// as the middle of its bucket clamped to the observed min and max; q in
// [0,1]. An empty histogram gives 0.
func (h *Histogram) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	if rank > h.n {
		rank = h.n
	}
	var seen uint64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		seen += c
		if seen >= rank {
			lo, hi := bounds(i)
			v := int64(lo + (hi-lo)/2)
			if v < h.min {
				v = h.min
			}
			if v > h.max {
				v = h.max
			}
			return v
		}
	}
	return h.max
}

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	if o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
}

// Summary is the usual figures of a latency histogram in milliseconds.
type Summary struct {
	Count uint64  `json:"count"`
	MinMs float64 `json:"min_ms"`
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	P99Ms float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	MaxMs float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// Summarize returns the summary of a histogram of nanoseconds.
func (h *Histogram) Summarize() Summary {
	return Summary{
		Count: h.n, MinMs: ms(h.Min()), P50Ms: ms(h.Quantile(0.5)), P90Ms: ms(h.Quantile(0.9)),
		P99Ms: ms(h.Quantile(0.99)), P999: ms(h.Quantile(0.999)), MaxMs: ms(h.max), Mean: h.Mean() / 1e6,
	}
}

type wireForm struct {
	Buckets [][2]uint64 `json:"buckets"` // sparse [index, count]
	N       uint64      `json:"n"`
	Min     int64       `json:"min"`
	Max     int64       `json:"max"`
	Sum     float64     `json:"sum"`
}

// MarshalJSON writes the non-empty buckets only.
func (h *Histogram) MarshalJSON() ([]byte, error) {
	w := wireForm{N: h.n, Min: h.min, Max: h.max, Sum: h.sum}
	for i, c := range h.counts {
		if c != 0 {
			w.Buckets = append(w.Buckets, [2]uint64{uint64(i), c})
		}
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON wrote and checks the counts add up.
func (h *Histogram) UnmarshalJSON(b []byte) error {
	var w wireForm
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("hist: %w", err)
	}
	*h = *New()
	var total uint64
	sort.Slice(w.Buckets, func(i, j int) bool { return w.Buckets[i][0] < w.Buckets[j][0] })
	for _, bc := range w.Buckets {
		if bc[0] >= uint64(len(h.counts)) {
			return fmt.Errorf("hist: bucket %d out of range", bc[0])
		}
		h.counts[bc[0]] += bc[1]
		total += bc[1]
	}
	if total != w.N {
		return fmt.Errorf("hist: buckets hold %d values, header says %d", total, w.N)
	}
	h.n, h.min, h.max, h.sum = w.N, w.Min, w.Max, w.Sum
	if h.n == 0 {
		h.min = math.MaxInt64
	}
	return nil
}
