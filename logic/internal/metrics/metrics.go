// Package metrics holds logic's Prometheus collectors, registered on the
// process's own registry.
package metrics

import "github.com/prometheus/client_golang/prometheus"

// Metrics are logic's collectors.
type Metrics struct {
	// Requests counts answered gateway requests by command and code.
	Requests *prometheus.CounterVec
	// SendLatency is the time of SEND_MESSAGE from start to answer.
	SendLatency *prometheus.HistogramVec
	// EnqueueFailures counts sends whose every XADD attempt failed.
	EnqueueFailures prometheus.Counter
	// EnqueueAttemptFailures counts failed XADD attempts.
	EnqueueAttemptFailures prometheus.Counter
	// Kicks counts kicks of replaced connections by result.
	Kicks *prometheus.CounterVec
	// Streams is the number of open gateway streams.
	Streams prometheus.Gauge
	// GatewayBatchSize is the number of Responses per frame sent to a
	// gate (one frame carries what was queued when the stream was free).
	GatewayBatchSize prometheus.Histogram
	// SendBatchSize is the number of sends per group-commit batch (the
	// sends a worker took at once, retries answered from its lookup
	// included).
	SendBatchSize prometheus.Histogram
	// SendCommits counts group-commit transactions by result: ok,
	// fallback (rolled back, committed one by one) or error.
	SendCommits *prometheus.CounterVec
	// SendAck is the time from a SEND_MESSAGE arriving on a gateway
	// stream to its answer being queued back: SendLatency plus the wait
	// behind the same connection's earlier requests.
	SendAck prometheus.Histogram
	// DrainRejects counts requests answered 50301 without being handled
	// because the process was draining (they never reach Requests).
	DrainRejects prometheus.Counter
	// HookCalls counts before-send hook calls by send kind (p2p, group,
	// api) and result: allow, reject, modify, invalid (a rewrite that
	// failed validation, also counted as modify), error, timeout, or
	// open (refused by the breaker, no call made).
	HookCalls *prometheus.CounterVec
	// HookLatency is the time of one before-send hook call.
	HookLatency prometheus.Histogram
	// HookBreakerState is the hook breaker's state: 0 closed, 1
	// half-open, 2 open.
	HookBreakerState prometheus.Gauge
	// HookFallbacks counts sends the failure policy decided, by cause
	// (error, timeout, open) and policy (allow, reject).
	HookFallbacks *prometheus.CounterVec
	// SendStage is the time a SEND_MESSAGE spends in each stage of its
	// path through logic (Stage* labels), so a bench can say where a
	// send's milliseconds go: per send for ratelimit, checks and queue,
	// per group-commit batch for mysql and enqueue.
	SendStage *prometheus.HistogramVec
}

// The stages of SendStage.
const (
	// StageRateLimit: the per-device rate-limit check (one Redis round
	// trip shared by the checks waiting at that moment).
	StageRateLimit = "ratelimit"
	// StageChecks: validation, conversation resolution, the permission
	// checks and the before-send hook when it is on, up to the send's
	// queueing for a committer.
	StageChecks = "checks"
	// StageQueue: queued until a commit worker took the send.
	StageQueue = "queue"
	// StageMySQL: a batch's idempotency lookup and transaction, COMMIT
	// (and its fsync) included.
	StageMySQL = "mysql"
	// StageEnqueue: a batch's pipelined XADDs.
	StageEnqueue = "enqueue"
)

// New creates and registers the collectors on reg (nil: not registered).
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "logic", Name: "requests_total",
			Help: "Gateway requests answered, by command and response code.",
		}, []string{"command", "code"}),
		SendLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "spark", Subsystem: "logic", Name: "send_duration_seconds",
			Help:    "SEND_MESSAGE handling time, by response code.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"code"}),
		EnqueueFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "logic", Name: "enqueue_failures_total",
			Help: "Sends answered 50301 because every deliver-queue XADD attempt failed.",
		}),
		EnqueueAttemptFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "logic", Name: "enqueue_attempt_failures_total",
			Help: "Failed deliver-queue XADD attempts.",
		}),
		Kicks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "logic", Name: "kicks_total",
			Help: "Kicks of connections replaced by a new AUTH, by result.",
		}, []string{"result"}),
		Streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "spark", Subsystem: "logic", Name: "gateway_streams",
			Help: "Open Gateway/Connect streams.",
		}),
		GatewayBatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "spark", Subsystem: "logic", Name: "gateway_batch_size",
			Help:    "Responses per frame sent on a Gateway stream.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		}),
		SendBatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "spark", Subsystem: "logic", Name: "send_batch_size",
			Help:    "Sends per group-commit batch (retries answered from its lookup included).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		SendCommits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "logic", Name: "send_commits_total",
			Help: "Group-commit transactions of sends, by result (ok, fallback, error).",
		}, []string{"result"}),
		SendAck: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "spark", Subsystem: "logic", Name: "send_ack_seconds",
			Help:    "Time from a SEND_MESSAGE arriving on a gateway stream to its answer being queued to the gate.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		DrainRejects: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "logic", Name: "drain_rejects_total",
			Help: "Requests answered 50301 unhandled because logic was draining.",
		}),
		HookCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "logic", Name: "hook_calls_total",
			Help: "Before-send hook calls, by send kind and result (allow, reject, modify, invalid, error, timeout, open).",
		}, []string{"kind", "result"}),
		HookLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "spark", Subsystem: "logic", Name: "hook_call_seconds",
			Help:    "Time of one before-send hook call.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		HookBreakerState: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "spark", Subsystem: "logic", Name: "hook_breaker_state",
			Help: "Before-send hook breaker: 0 closed, 1 half-open, 2 open.",
		}),
		HookFallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "logic", Name: "hook_fallbacks_total",
			Help: "Sends decided by the before-send hook's failure policy, by cause (error, timeout, open) and policy (allow, reject).",
		}, []string{"cause", "policy"}),
		SendStage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "spark", Subsystem: "logic", Name: "send_stage_seconds",
			Help:    "Time of a SEND_MESSAGE in one stage of logic: per send (ratelimit, checks, queue) or per group-commit batch (mysql, enqueue).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"stage"}),
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.SendLatency, m.EnqueueFailures, m.EnqueueAttemptFailures, m.Kicks, m.Streams,
			m.GatewayBatchSize, m.SendBatchSize, m.SendCommits, m.SendAck, m.DrainRejects,
			m.HookCalls, m.HookLatency, m.HookBreakerState, m.HookFallbacks, m.SendStage)
	}
	// The fixed result sets are exported from the start (at 0), so a
	// failure rate is a series before the first failure.
	for _, r := range []string{"ok", "fallback", "error"} {
		m.SendCommits.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error"} {
		m.Kicks.WithLabelValues(r)
	}
	for _, st := range []string{StageRateLimit, StageChecks, StageQueue, StageMySQL, StageEnqueue} {
		m.SendStage.WithLabelValues(st)
	}
	return m
}
