package ratelimit

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sparkim/spark/pkg/metricname"
)

// Every metric of the rate limiter follows logic's scheme
// (spark_logic_…, counters in _total); its labelled families are created
// for every class and scope from the start.
func TestMetricNamesFollowScheme(t *testing.T) {
	reg := prometheus.NewRegistry()
	newMetrics(reg)
	if err := metricname.CheckGathered("logic", reg); err != nil {
		t.Error(err)
	}
}
