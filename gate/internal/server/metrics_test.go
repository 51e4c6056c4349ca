package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/metricname"
)

// Every metric a gate registers follows the scheme (spark_gate_…,
// counters in _total): the gate has no labelled family, so the registry
// New fills shows them all.
func TestMetricNamesFollowScheme(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(Options{Gate: config.Default().Gate, ClusterSecret: testSecret, Logger: zap.NewNop(), Registry: reg}); err != nil {
		t.Fatal(err)
	}
	if err := metricname.CheckGathered("gate", reg); err != nil {
		t.Error(err)
	}
}
