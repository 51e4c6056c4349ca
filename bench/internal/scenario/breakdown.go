package scenario

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// stage is one step of a message's way through the system, measured by a
// histogram a process already exposes on its admin /metrics.
type stage struct {
	name    string // as the report shows it
	process string // "logic", "deliver" or "gates" (summed over the gates)
	metric  string // the histogram, with its labels, without _sum/_count
	per     string // what one observation is: a send, a batch, a round, …
}

// breakdownStages are the stages in the order a message passes them. The
// send's: the gate forwards the SEND_MESSAGE and waits for its answer
// (everything in logic inside that), logic checks its rate limit, its
// arguments and permissions, queues it for a commit worker, commits the
// batch in MySQL and enqueues its jobs. The push's: deliver reads the job
// (the lag is from the enqueue's millisecond timestamp, so within 1 ms),
// looks up routes and done markers, updates the conversation lists and
// pushes through the gates. The rest of a client's latency — the
// client's and the gates' sockets and waiting for a CPU — is what these
// leave of the client's figures.
var breakdownStages = []stage{
	{"gate: SEND forwarded → answer back (gate ⇄ logic round trip)", "gates", "spark_gate_forward_latency_seconds", "request"},
	{"logic: SEND arrived → answer queued", "logic", "spark_logic_send_ack_seconds", "send"},
	{"logic: rate limit (Redis)", "logic", `spark_logic_send_stage_seconds{stage="ratelimit"}`, "send"},
	{"logic: checks and permissions", "logic", `spark_logic_send_stage_seconds{stage="checks"}`, "send"},
	{"logic: queued for a commit worker", "logic", `spark_logic_send_stage_seconds{stage="queue"}`, "send"},
	{"logic: MySQL (idempotency lookup, transaction, COMMIT)", "logic", `spark_logic_send_stage_seconds{stage="mysql"}`, "batch"},
	{"logic: enqueue (XADD)", "logic", `spark_logic_send_stage_seconds{stage="enqueue"}`, "batch"},
	{"deliver: enqueued → read (ms clock)", "deliver", "spark_deliver_queue_lag_seconds", "job"},
	{"deliver: routes and done markers (Redis)", "deliver", `spark_deliver_batch_stage_seconds{stage="lookup"}`, "round"},
	{"deliver: conversation lists (Redis)", "deliver", `spark_deliver_batch_stage_seconds{stage="lists"}`, "round"},
	{"deliver: pushes through the gates", "deliver", `spark_deliver_batch_stage_seconds{stage="push"}`, "round"},
	{"deliver: one Push RPC to a gate", "deliver", "spark_deliver_push_seconds", "RPC"},
}

// sample is the name of a histogram's _sum or _count sample as /metrics
// prints it: the suffix goes before the labels.
func sample(metric, part string) string {
	if i := strings.IndexByte(metric, '{'); i >= 0 {
		return metric[:i] + "_" + part + metric[i:]
	}
	return metric + "_" + part
}

// readBreakdown reads every stage's _sum and _count, keyed by process and
// sample; the gates' are summed.
func (e *Env) readBreakdown(ctx context.Context) (map[string]float64, error) {
	names := map[string][]string{}
	for _, st := range breakdownStages {
		names[st.process] = append(names[st.process], sample(st.metric, "sum"), sample(st.metric, "count"))
	}
	out := map[string]float64{}
	var errs []error
	put := func(process string, m map[string]float64, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		for k, v := range m {
			out[process+" "+k] += v
		}
	}
	m, err := e.logicMetric(ctx, names["logic"]...)
	put("logic", m, err)
	m, err = e.deliverMetric(ctx, names["deliver"]...)
	put("deliver", m, err)
	for _, g := range e.C.Gates {
		m, err = readMetrics(ctx, g.ID, g.AdminAddr, names["gates"]...)
		put("gates", m, err)
	}
	return out, errors.Join(errs...)
}

// breakdownRow is one stage's mean over the window.
type breakdownRow struct {
	Stage  string  `json:"stage"`
	Per    string  `json:"per"`
	MeanMs float64 `json:"mean_ms"`
	Count  float64 `json:"count"`
}

// addBreakdown reports each stage's mean over the window (a stage with no
// observation, e.g. one a build before it did not measure, is left out),
// beside the client's SEND_ACK and end-to-end p50.
func addBreakdown(res *Result, before, after map[string]float64, ackP50, e2eP50 float64) []breakdownRow {
	var rows []breakdownRow
	var parts []string
	for _, st := range breakdownStages {
		sum, count := st.process+" "+sample(st.metric, "sum"), st.process+" "+sample(st.metric, "count")
		n := after[count] - before[count]
		if n <= 0 {
			continue
		}
		mean := (after[sum] - before[sum]) / n * 1000
		rows = append(rows, breakdownRow{Stage: st.name, Per: st.per, MeanMs: mean, Count: n})
		res.add(fmt.Sprintf("stage %s, mean per %s", st.name, st.per), mean, "ms")
		parts = append(parts, fmt.Sprintf("%s %.2f ms", st.name, mean))
	}
	if len(parts) > 0 {
		res.note("where a message's time goes (means over the window from the processes' histograms; the client saw SEND_ACK p50 %.2f ms, end-to-end p50 %.2f ms): %s",
			ackP50, e2eP50, strings.Join(parts, "; "))
	}
	return rows
}
