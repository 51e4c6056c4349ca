// Package metricname is the naming scheme of the Prometheus metrics the
// processes register: spark_<process>_<subsystem>_<name>_<unit>, in base
// units (seconds, bytes), counters ending in _total (docs/decisions.md,
// "One metric scheme"). Tests of each process check their registries with
// Check, so a metric outside the scheme fails before a dashboard misses it.
package metricname

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace is the first word of every metric name.
const Namespace = "spark"

// standard are the name prefixes of the Go runtime and process collectors
// pkg/admin registers in every process: Prometheus's own names, kept so
// that the usual Go dashboards and CPU alerts work unchanged.
var standard = []string{"go_", "process_"}

// word is one lower-case word; a name is words joined by underscores.
var word = regexp.MustCompile(`^[a-z0-9]+(_[a-z0-9]+)*$`)

// Check returns why the metric family name of type typ (as the text
// exposition spells it: counter, gauge, histogram, summary, untyped),
// registered by process, breaks the scheme, or nil.
func Check(process, name, typ string) error {
	for _, p := range standard {
		if strings.HasPrefix(name, p) {
			return nil
		}
	}
	prefix := Namespace + "_" + process + "_"
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return fmt.Errorf("metric %s of %s: does not start with %s", name, process, prefix)
	}
	if !word.MatchString(rest) {
		return fmt.Errorf("metric %s of %s: not lower-case words joined by underscores", name, process)
	}
	total := strings.HasSuffix(name, "_total")
	switch {
	case typ == "counter" && !total:
		return fmt.Errorf("metric %s of %s: a counter must end in _total", name, process)
	case typ != "counter" && total:
		return fmt.Errorf("metric %s of %s: only a counter may end in _total (it is a %s)", name, process, typ)
	}
	for _, u := range []string{"_milliseconds", "_ms", "_microseconds", "_us", "_nanoseconds", "_ns", "_kilobytes", "_megabytes", "_percent"} {
		if strings.HasSuffix(strings.TrimSuffix(name, "_total"), u) {
			return fmt.Errorf("metric %s of %s: not in base units (seconds, bytes, ratios)", name, process)
		}
	}
	return nil
}

// CheckGathered checks every metric family g gathers as process's. A
// labelled family shows only once it has a series, so a caller creates the
// label values it wants checked first.
func CheckGathered(process string, g prometheus.Gatherer) error {
	mfs, err := g.Gather()
	if err != nil {
		return fmt.Errorf("gather %s metrics: %w", process, err)
	}
	if len(mfs) == 0 {
		return fmt.Errorf("%s registered no metric", process)
	}
	var errs []error
	for _, mf := range mfs {
		errs = append(errs, Check(process, mf.GetName(), strings.ToLower(mf.GetType().String())))
	}
	return errors.Join(errs...)
}
