package hist

import (
	"sync"
	"time"
)

// Series is a thread-safe total histogram plus one histogram per time
// window since a start time, for "latency over time" plots.
type Series struct {
	mu      sync.Mutex
	start   time.Time
	window  time.Duration
	total   *Histogram
	windows []*Histogram
}

// NewSeries starts a series at start with windows of the given width.
func NewSeries(start time.Time, window time.Duration) *Series {
	return &Series{start: start, window: window, total: New()}
}

// Record adds d, observed at time at, to the total and to at's window.
func (s *Series) Record(at time.Time, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total.RecordDuration(d)
	i := int(at.Sub(s.start) / s.window)
	if i < 0 {
		i = 0
	}
	for len(s.windows) <= i {
		s.windows = append(s.windows, nil)
	}
	if s.windows[i] == nil {
		s.windows[i] = New()
	}
	s.windows[i].RecordDuration(d)
}

// Total returns a copy of the total histogram.
func (s *Series) Total() *Histogram {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := New()
	c.Merge(s.total)
	return c
}

// Point is one window of a series.
type Point struct {
	T     float64 `json:"t_s"` // window start, seconds since the series start
	Count uint64  `json:"count"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
}

// Points returns one point per window (empty windows have Count 0).
func (s *Series) Points() []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Point, len(s.windows))
	for i, w := range s.windows {
		p := Point{T: float64(i) * s.window.Seconds()}
		if w != nil {
			p.Count = w.Count()
			p.P50Ms = ms(w.Quantile(0.5))
			p.P99Ms = ms(w.Quantile(0.99))
			p.P999 = ms(w.Quantile(0.999))
		}
		out[i] = p
	}
	return out
}
