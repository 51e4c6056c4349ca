// Package webhook delivers events to business servers as signed JSON POSTs
// (Standard Webhooks, pkg/stdwebhook), at least once and in order per
// endpoint. Message events are read from t_messages itself and the rarer
// ones from t_webhook_events, merged by id behind a settle bound, so a
// send writes nothing for them; each endpoint has one dispatcher at a time
// (a Redis lease) and a cursor and retry state in MySQL, so a killed logic
// loses nothing (docs/decisions.md 91).
package webhook

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/lease"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/retry"
	"github.com/sparkim/spark/pkg/stdwebhook"
)

// PruneEvery is how often a dispatcher (or, with webhooks off, the
// upstream service) deletes recorded events older than any retry could
// still need (Prune).
const PruneEvery = 10 * time.Minute

// Prune deletes up to 10,000 recorded events older than retry_for plus a
// day: past any retry or replay an endpoint could still need.
func Prune(ctx context.Context, st *store.Store, cfg config.Webhook) error {
	_, err := st.PruneWebhookEvents(ctx, time.Now().Add(-cfg.RetryFor-24*time.Hour), 10000)
	return err
}

// Metrics are the dispatcher's collectors.
type Metrics struct {
	// Deliveries counts attempts by result: ok, retry (failed, will be
	// retried), gone (410: endpoint disabled), dead (retries exhausted).
	Deliveries *prometheus.CounterVec
	// Latency is the time of one POST.
	Latency prometheus.Histogram
	// Lag is, per endpoint, how old the last delivered event is.
	Lag *prometheus.GaugeVec
}

// NewMetrics creates and registers the collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "logic", Name: "webhook_deliveries_total",
			Help: "Webhook POST attempts by result (ok, retry, gone, dead).",
		}, []string{"result"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "spark", Subsystem: "logic", Name: "webhook_post_duration_seconds",
			Help: "Time of one webhook POST.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "spark", Subsystem: "logic", Name: "webhook_lag_seconds",
			Help: "Age of the last event delivered to the endpoint when it was delivered.",
		}, []string{"endpoint"}),
	}
	if reg != nil {
		reg.MustRegister(m.Deliveries, m.Latency, m.Lag)
	}
	return m
}

// Dispatcher runs a delivery loop for every active endpoint whose lease it
// gets.
type Dispatcher struct {
	st     *store.Store
	rdb    redis.UniversalClient
	cfg    config.Webhook
	client *http.Client
	log    *zap.Logger
	m      *Metrics
	sched  Schedule

	mu      sync.Mutex
	running map[int64]bool
	wg      sync.WaitGroup
}

// NewDispatcher builds a dispatcher; Run starts it.
func NewDispatcher(st *store.Store, rdb redis.UniversalClient, cfg config.Webhook, log *zap.Logger, m *Metrics) *Dispatcher {
	return &Dispatcher{
		st: st, rdb: rdb, cfg: cfg, client: NewHTTPClient(cfg), log: log.Named("webhook"), m: m,
		sched:   Schedule{Base: cfg.RetryBase, MaxInterval: cfg.RetryMaxInterval, For: cfg.RetryFor},
		running: map[int64]bool{},
	}
}

// NewHTTPClient is the client of every POST: bounded by cfg.Timeout, no
// redirects (a 3xx is a failure: the receiver moved and must be updated),
// and, unless private URLs are allowed, a dialer that refuses non-public
// addresses after DNS.
func NewHTTPClient(cfg config.Webhook) *http.Client {
	d := &net.Dialer{Timeout: cfg.Timeout}
	if !cfg.AllowPrivateURLs {
		d.Control = dialControl
	}
	tr := &http.Transport{
		DialContext: d.DialContext, MaxIdleConnsPerHost: 8, IdleConnTimeout: 90 * time.Second,
		TLSHandshakeTimeout: cfg.Timeout, ResponseHeaderTimeout: cfg.Timeout, ForceAttemptHTTP2: true,
	}
	return &http.Client{Transport: tr, Timeout: cfg.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// Run polls for endpoints until ctx ends, then waits for the loops.
func (d *Dispatcher) Run(ctx context.Context) {
	defer d.wg.Wait()
	var lastPrune time.Time
	for {
		eps, err := d.st.ListWebhookEndpoints(ctx)
		if err != nil && ctx.Err() == nil {
			d.log.Warn("list webhook endpoints", zap.Error(err))
		}
		for _, ep := range eps {
			if ep.Status == store.EndpointActive {
				d.start(ctx, ep.ID)
			}
		}
		if time.Since(lastPrune) > PruneEvery {
			lastPrune = time.Now()
			if err := Prune(ctx, d.st, d.cfg); err != nil && ctx.Err() == nil {
				d.log.Warn("prune webhook events", zap.Error(err))
			}
		}
		if retry.Sleep(ctx, d.cfg.PollInterval) != nil {
			return
		}
	}
}

func (d *Dispatcher) start(ctx context.Context, id int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running[id] {
		return
	}
	d.running[id] = true
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer func() { d.mu.Lock(); delete(d.running, id); d.mu.Unlock() }()
		d.serve(ctx, id)
	}()
}

// serve delivers to one endpoint while this process holds its lease and
// the endpoint is active.
func (d *Dispatcher) serve(ctx context.Context, id int64) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l, err := lease.Acquire(ctx, d.rdb, rediskey.WebhookLease(id), lease.Options{
		TTL:    d.cfg.LeaseTTL,
		OnLost: func(error) { cancel() },
	})
	if err != nil {
		if !errors.Is(err, lease.ErrHeld) && ctx.Err() == nil {
			d.log.Warn("webhook lease", zap.Int64("endpoint", id), zap.Error(err))
		}
		return
	}
	defer func() {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = l.Release(rctx)
		rcancel()
	}()
	for ctx.Err() == nil {
		if err := l.Check(); err != nil {
			return
		}
		wait, done, err := d.step(ctx, l, id)
		if done {
			return
		}
		if err != nil && ctx.Err() == nil {
			d.log.Warn("webhook dispatch", zap.Int64("endpoint", id), zap.Error(err))
			wait = d.cfg.PollInterval
		}
		if wait > 0 && retry.Sleep(ctx, wait) != nil {
			return
		}
	}
}

// step reads the endpoint and delivers what is due: it returns how long to
// wait before the next step, and done when the endpoint is no longer
// active.
func (d *Dispatcher) step(ctx context.Context, l *lease.Lease, id int64) (time.Duration, bool, error) {
	ep, err := d.st.GetWebhookEndpoint(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return 0, true, nil
	}
	if err != nil {
		return 0, false, err
	}
	if ep.Status != store.EndpointActive {
		return 0, true, nil
	}
	now := time.Now()
	if ep.NextAttemptAt.Valid && ep.NextAttemptAt.Time.After(now) {
		// Re-read at least every poll, so a replay or a disable is seen.
		return min(ep.NextAttemptAt.Time.Sub(now), d.cfg.PollInterval), false, nil
	}
	bound, err := ReadBound(ctx, d.st, d.cfg.Settle, now, ep.CursorID)
	if err != nil {
		return 0, false, err
	}
	if bound <= ep.CursorID {
		return d.cfg.PollInterval, false, nil
	}
	// A stream the endpoint takes nothing from is not read (it counts as
	// read to the bound).
	subs := subscriptions(ep.Events)
	var msgs []store.WebhookMessage
	if subs.has(EventMessageSent) {
		if msgs, err = d.st.WebhookMessagesAfter(ctx, ep.CursorID, bound, d.cfg.Batch); err != nil {
			return 0, false, err
		}
	}
	var evs []store.WebhookEvent
	if subs.hasOtherThan(EventMessageSent) {
		if evs, err = d.st.WebhookEventsAfter(ctx, ep.CursorID, bound, d.cfg.Batch); err != nil {
			return 0, false, err
		}
	}
	items, upTo, err := merge(msgs, evs, d.cfg.Batch, bound)
	if err != nil {
		return 0, false, err
	}
	secrets, err := signingSecrets(ep, now)
	if err != nil {
		return 0, false, err
	}
	delivered := ep.CursorID
	for _, it := range items {
		if !subs.has(it.typ) {
			delivered = it.id
			continue
		}
		if err := l.Check(); err != nil {
			return 0, true, d.advance(ctx, ep, delivered)
		}
		res := d.post(ctx, ep.URL, it, secrets)
		if res.err == nil {
			delivered = it.id
			d.m.Lag.WithLabelValues(strconv.FormatInt(ep.ID, 10)).Set(time.Since(msgid.TimeOf(it.id)).Seconds())
			continue
		}
		if ctx.Err() != nil {
			return 0, true, d.advance(ctx, ep, delivered)
		}
		if delivered != ep.CursorID {
			// Earlier events went through: the failing one is a new one,
			// with a fresh retry state.
			if err := d.advance(ctx, ep, delivered); err != nil {
				return 0, false, err
			}
			ep.CursorID, ep.Attempts, ep.FailingSince = delivered, 0, sql.NullTime{}
		}
		return 0, false, d.fail(ctx, ep, it, res)
	}
	if len(items) == 0 {
		// Nothing committed past the cursor yet; the cursor is not
		// written while idle.
		return d.cfg.PollInterval, false, nil
	}
	if err := d.advance(ctx, ep, upTo); err != nil {
		return 0, false, err
	}
	if len(items) < d.cfg.Batch {
		// Caught up to the bound: wait for more.
		return d.cfg.PollInterval, false, nil
	}
	return 0, false, nil
}

// ReadBound is the highest id a reader of t_messages or t_webhook_events
// may read up to at now: behind the settle bound and behind every
// statement still running, so a commit stalled in MySQL past the settle
// bound is waited for, never passed over (decision 93). A reader whose
// cursor is at or past the settle bound gets it back without asking
// MySQL. The upstream pull reads by the same rule.
func ReadBound(ctx context.Context, st *store.Store, settle time.Duration, now time.Time, cursor int64) (int64, error) {
	if msgid.MaxAt(now.Add(-settle)) <= cursor {
		return cursor, nil
	}
	age, err := st.OldestStatementAge(ctx)
	if err != nil {
		return 0, err
	}
	return msgid.MaxAt(now.Add(-settle - age)), nil
}

// advance stores the cursor when it moved, clearing the retry state of
// the event that was failing; a replay or disable made meanwhile wins and
// is picked up by the next step.
func (d *Dispatcher) advance(ctx context.Context, ep store.WebhookEndpoint, to int64) error {
	if to == ep.CursorID {
		return nil
	}
	_, err := d.st.AdvanceWebhookCursor(context.WithoutCancel(ctx), ep.ID, ep.CursorID, to)
	return err
}

// fail records a failed attempt at it: the endpoint is retried on the
// schedule, disabled on 410, dead once the schedule is spent.
func (d *Dispatcher) fail(ctx context.Context, ep store.WebhookEndpoint, it item, res postResult) error {
	now := time.Now()
	f := store.WebhookFailure{Attempts: ep.Attempts + 1, FailingSince: now, Error: res.err.Error(), Status: store.EndpointActive}
	if ep.FailingSince.Valid {
		f.FailingSince = ep.FailingSince.Time
	}
	result := "retry"
	var dead bool
	f.NextAttempt, dead = d.sched.Next(f.Attempts, f.FailingSince, now, res.retryAfter)
	switch {
	case res.status == http.StatusGone:
		f.Status, result = store.EndpointGone, "gone"
	case dead:
		f.Status, result = store.EndpointDead, "dead"
	}
	d.m.Deliveries.WithLabelValues(result).Inc()
	d.log.Info("webhook attempt failed", zap.Int64("endpoint", ep.ID), zap.String("webhook_id", it.webhookID),
		zap.Int("attempts", f.Attempts), zap.String("result", result), zap.Time("next_attempt", f.NextAttempt), zap.Error(res.err))
	_, err := d.st.RecordWebhookFailure(context.WithoutCancel(ctx), ep.ID, ep.CursorID, f)
	return err
}

// postResult is the outcome of one POST: err nil on a 2xx.
type postResult struct {
	status     int
	retryAfter time.Duration
	err        error
}

// post sends one event, signed with every secret.
func (d *Dispatcher) post(ctx context.Context, url string, it item, secrets []stdwebhook.Secret) postResult {
	start := time.Now()
	defer func() { d.m.Latency.Observe(time.Since(start).Seconds()) }()
	res := postOnce(ctx, d.client, url, it.webhookID, it.body, secrets)
	if res.err == nil {
		d.m.Deliveries.WithLabelValues("ok").Inc()
	}
	return res
}

// postOnce sends body to url as one signed attempt at webhookID.
func postOnce(ctx context.Context, client *http.Client, url, webhookID string, body []byte, secrets []stdwebhook.Secret) postResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return postResult{err: fmt.Errorf("webhook: request: %w", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "spark-webhook/1")
	stdwebhook.SetHeaders(req.Header, webhookID, time.Now().Unix(), body, secrets...)
	resp, err := client.Do(req)
	if err != nil {
		return postResult{err: fmt.Errorf("webhook: post: %w", err)}
	}
	defer resp.Body.Close()
	// Read a little of the answer so the connection can be reused; the
	// body means nothing to us.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return postResult{status: resp.StatusCode}
	}
	ra, _ := ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	return postResult{status: resp.StatusCode, retryAfter: ra, err: fmt.Errorf("webhook: endpoint answered %s", resp.Status)}
}

// signingSecrets are the endpoint's secrets that sign now: the current
// one first, the old one too during its grace period.
func signingSecrets(ep store.WebhookEndpoint, now time.Time) ([]stdwebhook.Secret, error) {
	cur, err := stdwebhook.ParseSecret(ep.Secret)
	if err != nil {
		return nil, fmt.Errorf("webhook: endpoint %d secret: %w", ep.ID, err)
	}
	out := []stdwebhook.Secret{cur}
	if ep.OldSecret != "" && ep.OldSecretUntil.Valid && now.Before(ep.OldSecretUntil.Time) {
		old, err := stdwebhook.ParseSecret(ep.OldSecret)
		if err != nil {
			return nil, fmt.Errorf("webhook: endpoint %d old secret: %w", ep.ID, err)
		}
		out = append(out, old)
	}
	return out, nil
}

// subscription is the set of event types an endpoint receives; empty
// means all but the upstream ones: a device's frame for a service goes
// only to an endpoint that names the service's type.
type subscription []string

func subscriptions(events string) subscription {
	if events == "" {
		return nil
	}
	return strings.Split(events, ",")
}

func (s subscription) has(typ string) bool {
	if len(s) == 0 {
		return !strings.HasPrefix(typ, store.EventUpstreamPrefix)
	}
	return slices.Contains(s, typ)
}

// hasOtherThan reports whether s takes any type but typ.
func (s subscription) hasOtherThan(typ string) bool {
	return len(s) == 0 || slices.ContainsFunc(s, func(t string) bool { return t != typ })
}
