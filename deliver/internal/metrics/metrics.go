// Package metrics holds deliver's Prometheus collectors, registered on the
// process's own registry (never the global one).
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Job results for Metrics.Jobs.
const (
	ResultPushed    = "pushed"
	ResultDuplicate = "duplicate"
	ResultMalformed = "malformed"
	ResultUnknown   = "unknown_kind"
	// ResultSignal is a SIGNAL job pushed (READ, RECALL, DELETE, settings).
	ResultSignal = "signal"
)

// List update results for Metrics.ListUpdates.
const (
	// ListApplied: the recipient's state existed and took the message.
	ListApplied = "applied"
	// ListSkipped: the state was absent (only its version was bumped, the
	// next sync rebuilds it) or already held the message (a redelivery).
	ListSkipped = "skipped"
)

// Mailbox results for Metrics.MailboxEvents.
const (
	MailboxAppended = "appended"
	MailboxFailed   = "failed"
	// MailboxSkipped: logic failed moments ago, so the call was not tried.
	MailboxSkipped = "skipped"
)

// Stages of a batch for Metrics.Stage: read and ack are one partition's
// batch; lookup, lists, push and mailbox one round, which may hold several
// partitions' batches (fanout.rounds). Their means say where the time goes.
const (
	// StageRead: XREADGROUP or XAUTOCLAIM calls that returned jobs.
	StageRead = "read"
	// StageLookup: group member expansion, done markers and routes.
	StageLookup = "lookup"
	// StageLists: conversation-list and unread updates (and member work).
	StageLists = "lists"
	// StagePush: PushBatch calls to the gates and stale-route removal.
	StagePush = "push"
	// StageMailbox: recording missed pushes through logic.
	StageMailbox = "mailbox"
	// StageAck: done markers, XACK and XDEL.
	StageAck = "ack"
)

// Metrics are deliver's collectors.
type Metrics struct {
	// Stage is the time one batch spent in each stage (Stage* labels).
	Stage *prometheus.HistogramVec
	// Jobs counts finished jobs by result.
	Jobs *prometheus.CounterVec
	// PushSeconds is the latency of one Push RPC to one gate.
	PushSeconds prometheus.Histogram
	// PushErrors counts Push RPCs that failed; their devices count as offline.
	PushErrors prometheus.Counter
	// Delivered counts targets a gate queued the frame for.
	Delivered prometheus.Counter
	// Missing counts targets a gate no longer holds (their routes are removed).
	Missing prometheus.Counter
	// PushJobs counts notification-work entries queued for offline push.
	PushJobs prometheus.Counter
	// Dropped counts targets whose outbound queue on the gate was full.
	Dropped prometheus.Counter
	// StaleRoutes counts route entries removed (missing, dead gate, malformed).
	StaleRoutes prometheus.Counter
	// QueueLag is now minus the job's enqueued_at_ms when it is processed.
	QueueLag prometheus.Histogram
	// OwnedPartitions is the number of partition leases held.
	OwnedPartitions prometheus.Gauge
	// RedisErrors counts failed Redis operations (they are retried).
	RedisErrors prometheus.Counter
	// ListUpdates counts per-recipient conversation-list updates by result.
	ListUpdates *prometheus.CounterVec
	// MailboxEvents counts MISSED_MESSAGE events by result.
	MailboxEvents *prometheus.CounterVec
	// Reclaimed counts pending entries taken over by XAUTOCLAIM: a
	// previous owner's unacknowledged jobs, or this instance's own after
	// a read whose reply was lost.
	Reclaimed prometheus.Counter
	// QueueLength, QueuePending and QueueOldestAge are sampled per
	// partition on a timer (see consumer.SampleQueues), never per job.
	// Labels are partition numbers, a set fixed by queue.partitions.
	QueueLength    *prometheus.GaugeVec
	QueuePending   *prometheus.GaugeVec
	QueueOldestAge *prometheus.GaugeVec
}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Stage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "batch_stage_seconds",
			Help:    "Time spent in a stage: by one partition's batch (read, ack) or by one round of several partitions' batches (lookup, lists, push, mailbox).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"stage"}),
		Jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "jobs_total", Help: "Deliver jobs finished, by result.",
		}, []string{"result"}),
		PushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "push_seconds", Help: "Latency of one Push RPC to a gate.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		PushErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "push_errors_total", Help: "Push RPCs that failed.",
		}),
		Delivered: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "push_delivered_total", Help: "Targets whose frame a gate queued.",
		}),
		PushJobs: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "push_notification_jobs_total",
			Help: "Notification-work entries queued on the push streams for offline devices (push.enabled).",
		}),
		Missing: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "push_missing_total", Help: "Targets a gate reported missing.",
		}),
		Dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "push_dropped_total", Help: "Targets a gate dropped (outbound queue full).",
		}),
		StaleRoutes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "stale_routes_removed_total", Help: "Route entries removed as stale.",
		}),
		QueueLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "queue_lag_seconds", Help: "Time from enqueue to processing.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		OwnedPartitions: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "owned_partitions", Help: "Partition leases held by this instance.",
		}),
		RedisErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "redis_errors_total", Help: "Failed Redis operations (retried).",
		}),
		ListUpdates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "list_updates_total", Help: "Per-recipient conversation-list updates, by result.",
		}, []string{"result"}),
		MailboxEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "mailbox_events_total", Help: "MISSED_MESSAGE mailbox events, by result.",
		}, []string{"result"}),
		Reclaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "jobs_reclaimed_total",
			Help: "Pending jobs taken over by XAUTOCLAIM (a previous owner's unacknowledged jobs, or ours after a lost read reply).",
		}),
		QueueLength: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "queue_length",
			Help: "Jobs in a partition's stream not yet acknowledged (read or not), sampled.",
		}, []string{"partition"}),
		QueuePending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "queue_pending",
			Help: "Jobs of a partition read by a consumer and not yet acknowledged (XPENDING), sampled.",
		}, []string{"partition"}),
		QueueOldestAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "spark", Subsystem: "deliver", Name: "queue_oldest_age_seconds",
			Help: "Age of the oldest unacknowledged job of a partition (0 when empty), sampled.",
		}, []string{"partition"}),
	}
	reg.MustRegister(m.Stage, m.Jobs, m.PushSeconds, m.PushErrors, m.Delivered, m.Missing, m.PushJobs, m.Dropped,
		m.StaleRoutes, m.QueueLag, m.OwnedPartitions, m.RedisErrors, m.ListUpdates, m.MailboxEvents,
		m.Reclaimed, m.QueueLength, m.QueuePending, m.QueueOldestAge)
	// Every result of the fixed result sets is exported from the start
	// (at 0), so rate() and alerts see a series before its first event:
	// a mailbox failure must not be invisible because it never happened
	// since the last restart.
	for _, r := range []string{ResultPushed, ResultDuplicate, ResultMalformed, ResultUnknown, ResultSignal} {
		m.Jobs.WithLabelValues(r)
	}
	for _, st := range []string{StageRead, StageLookup, StageLists, StagePush, StageMailbox, StageAck} {
		m.Stage.WithLabelValues(st)
	}
	for _, r := range []string{ListApplied, ListSkipped} {
		m.ListUpdates.WithLabelValues(r)
	}
	for _, r := range []string{MailboxAppended, MailboxFailed, MailboxSkipped} {
		m.MailboxEvents.WithLabelValues(r)
	}
	return m
}

// Since observes the time since start in stage st.
func (m *Metrics) Since(st string, start time.Time) {
	m.Stage.WithLabelValues(st).Observe(time.Since(start).Seconds())
}

// InitPartitions creates the per-partition series of partitions 0..n-1 at
// zero, so a dashboard and an alert see every partition from the first
// scrape instead of only after its first sample.
func (m *Metrics) InitPartitions(n int) {
	for p := 0; p < n; p++ {
		l := strconv.Itoa(p)
		m.QueueLength.WithLabelValues(l)
		m.QueuePending.WithLabelValues(l)
		m.QueueOldestAge.WithLabelValues(l)
	}
}
