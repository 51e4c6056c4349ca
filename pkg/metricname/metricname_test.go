package metricname

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		process, name, typ string
		ok                 bool
	}{
		{"gate", "spark_gate_connections", "gauge", true},
		{"gate", "spark_gate_frames_in_total", "counter", true},
		{"logic", "spark_logic_send_ack_seconds", "histogram", true},
		{"deliver", "spark_deliver_queue_length", "gauge", true},
		{"gate", "go_goroutines", "gauge", true},
		{"logic", "process_cpu_seconds_total", "counter", true},
		{"gate", "gate_connections", "gauge", false},             // no namespace
		{"gate", "spark_logic_requests_total", "counter", false}, // another process's prefix
		{"deliver", "spark_deliver_jobs", "counter", false},      // counter without _total
		{"deliver", "spark_deliver_owned_total", "gauge", false}, // _total on a gauge
		{"logic", "spark_logic_sendLatency_seconds", "histogram", false},
		{"logic", "spark_logic__send_seconds", "histogram", false},
		{"gate", "spark_gate_forward_latency_ms", "histogram", false},
		{"gate", "spark_gate_", "gauge", false},
	} {
		err := Check(tc.process, tc.name, tc.typ)
		if (err == nil) != tc.ok {
			t.Errorf("Check(%q, %q, %q) = %v, want ok %v", tc.process, tc.name, tc.typ, err, tc.ok)
		}
	}
}

func TestCheckGathered(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Namespace: "spark", Subsystem: "gate", Name: "frames_in_total"}))
	if err := CheckGathered("gate", reg); err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Namespace: "gate", Name: "frames_out"}))
	if err := CheckGathered("gate", reg); err == nil {
		t.Fatal("gate_frames_out passed the check")
	}
	if err := CheckGathered("gate", prometheus.NewRegistry()); err == nil {
		t.Fatal("an empty registry passed the check")
	}
}
