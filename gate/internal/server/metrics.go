package server

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the gate's counters. They are plain atomics so the hot path
// never touches a label map, and Stats can read them without scraping;
// Prometheus reads the same values through func collectors.
type Metrics struct {
	Connections atomic.Int64
	// CarrierConns splits Connections by carrier, indexed like carriers.
	CarrierConns     [len(carriers)]atomic.Int64
	Authenticated    atomic.Int64
	FramesIn         atomic.Uint64
	FramesOut        atomic.Uint64
	PushesDropped    atomic.Uint64
	ResponsesDropped atomic.Uint64
	BusyRejects      atomic.Uint64
	// ConnInflightRejects counts the part of BusyRejects that hit a
	// connection's own in-flight cap.
	ConnInflightRejects atomic.Uint64
	PushAcks            atomic.Uint64
	// ProxyRejects counts connections closed in the PROXY stage
	// (untrusted source, malformed or late header).
	ProxyRejects atomic.Uint64
	// TLSHandshakeFailures counts handshakes that failed or timed out;
	// TLSHandshakeRejects connections closed because
	// gate.tls_max_handshakes were already in progress.
	TLSHandshakeFailures atomic.Uint64
	TLSHandshakeRejects  atomic.Uint64
	// CertReloads counts certificates installed after their files
	// changed, CertReloadFailures changed files that did not load.
	CertReloads        atomic.Uint64
	CertReloadFailures atomic.Uint64
	LateResponses      atomic.Uint64
	ClosedDropped      atomic.Uint64
	StreamsUp          atomic.Int64
	// Resyncs counts Resync requests from logic; RebindsSent the bindings
	// reported in answer.
	Resyncs     atomic.Uint64
	RebindsSent atomic.Uint64
	// UpstreamFrames counts the frames that carried Requests and Closed
	// events to logic, UpstreamItems those items: their ratio is the mean
	// batch size.
	UpstreamFrames atomic.Uint64
	UpstreamItems  atomic.Uint64
	// Closes counts closed sessions by their close reason.
	Closes [numCloseReasons]atomic.Uint64

	// ForwardLatency measures Request sent → Response received.
	ForwardLatency prometheus.Histogram
}

// carriers are the values of spark_gate_carrier_connections' carrier label: a
// fixed set, so the label cannot grow.
var carriers = [...]string{"tcp", "tls", "ws", "wss", "other"}

// carrierConns returns the gauge of the carrier a Transport's Kind names;
// unknown kinds (test transports) share "other".
func (m *Metrics) carrierConns(kind string) *atomic.Int64 {
	for i, k := range carriers[:len(carriers)-1] {
		if k == kind {
			return &m.CarrierConns[i]
		}
	}
	return &m.CarrierConns[len(carriers)-1]
}

// NewMetrics registers the gate's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ForwardLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "spark",
			Subsystem: "gate",
			Name:      "forward_latency_seconds",
			Help:      "Time from forwarding a request to logic until its response arrives.",
			Buckets:   prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	gauge := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "spark", Subsystem: "gate", Name: name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	counter := func(name, help string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "spark", Subsystem: "gate", Name: name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	for i, k := range carriers {
		v := &m.CarrierConns[i]
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "spark", Subsystem: "gate", Name: "carrier_connections",
			Help: "Open client connections, by carrier (tcp, tls, ws, wss).", ConstLabels: prometheus.Labels{"carrier": k}},
			func() float64 { return float64(v.Load()) }))
	}
	for r := range closeReason(numCloseReasons) {
		v := &m.Closes[r]
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "spark", Subsystem: "gate", Name: "connections_closed_total",
			Help: "Client sessions closed, by close reason.", ConstLabels: prometheus.Labels{"reason": r.label()}},
			func() float64 { return float64(v.Load()) }))
	}
	reg.MustRegister(
		m.ForwardLatency,
		gauge("connections", "Open client connections.", &m.Connections),
		gauge("authenticated_connections", "Authenticated client connections.", &m.Authenticated),
		gauge("logic_streams_up", "Gateway streams to logic that are connected.", &m.StreamsUp),
		counter("frames_in_total", "Frames received from clients.", &m.FramesIn),
		counter("frames_out_total", "Frames written to clients.", &m.FramesOut),
		counter("pushes_dropped_total", "Pushes dropped because an outbound queue was full.", &m.PushesDropped),
		counter("responses_dropped_total", "Request answers dropped because an outbound queue was full.", &m.ResponsesDropped),
		counter("busy_rejects_total", "Requests the gate answered 50301 itself.", &m.BusyRejects),
		counter("conn_inflight_rejects_total", "Requests answered 50301 because their connection was at gate.max_inflight_per_conn.", &m.ConnInflightRejects),
		counter("proxy_rejects_total", "Connections closed before a valid PROXY header arrived (untrusted source, malformed, too slow).", &m.ProxyRejects),
		counter("logic_stream_frames_total", "Frames that carried requests and Closed events to logic (one per batch).", &m.UpstreamFrames),
		counter("logic_stream_items_total", "Requests and Closed events sent to logic.", &m.UpstreamItems),
		counter("tls_handshake_failures_total", "TLS handshakes that failed or timed out.", &m.TLSHandshakeFailures),
		counter("tls_handshake_rejects_total", "TLS connections closed because gate.tls_max_handshakes handshakes were in progress.", &m.TLSHandshakeRejects),
		counter("tls_cert_reloads_total", "TLS certificates reloaded after their files changed.", &m.CertReloads),
		counter("tls_cert_reload_failures_total", "Changed TLS certificate files that did not load (the previous certificate was kept).", &m.CertReloadFailures),
		counter("push_acks_total", "PUSH_ACK frames received.", &m.PushAcks),
		counter("late_responses_total", "Responses from logic that arrived after their request was answered.", &m.LateResponses),
		counter("closed_dropped_total", "Closed notifications that could not be queued to logic.", &m.ClosedDropped),
		counter("resyncs_total", "Resync requests received from logic.", &m.Resyncs),
		counter("rebind_bindings_total", "Bindings re-reported to logic in Rebind frames.", &m.RebindsSent),
	)
	return m
}
