package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sparkim/spark/pkg/metricname"
)

// Every metric of logic's collectors follows the scheme (spark_logic_…,
// counters in _total); the families labelled only as requests are
// answered get a series first, so that the check sees them.
func TestMetricNamesFollowScheme(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.Requests.WithLabelValues("SEND_MESSAGE", "0")
	m.SendLatency.WithLabelValues("0")
	if err := metricname.CheckGathered("logic", reg); err != nil {
		t.Error(err)
	}
}
