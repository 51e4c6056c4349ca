package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sparkim/spark/pkg/metricname"
)

// Every metric of deliver's collectors follows the scheme
// (spark_deliver_…, counters in _total); InitPartitions gives the
// per-partition families their series, so that the check sees them.
func TestMetricNamesFollowScheme(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg).InitPartitions(1)
	if err := metricname.CheckGathered("deliver", reg); err != nil {
		t.Error(err)
	}
}
