package push

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/failpoint"
	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/retry"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// WorkerConfig is what the worker takes from the push section.
type WorkerConfig struct {
	// Name is this worker's consumer name in the push group (unique per
	// process run).
	Name             string
	Partitions       int
	CollapseInterval time.Duration
	TTL              time.Duration
	ClaimIdle        time.Duration
	SendTimeout      time.Duration
	MaxAttempts      int
}

// Providers are the configured providers (nil: that platform's tokens get
// nothing, counted as unconfigured).
type Providers struct {
	APNs     Provider
	FCM      Provider
	Gateways map[string]Provider
}

// Worker sends the notifications of the push streams: one goroutine per
// partition reads new entries and takes over entries another worker left
// unacknowledged for ClaimIdle. An entry is acknowledged once every
// device of it is done; each device's notification is guarded by an
// idempotency key (rediskey.PushSent), so an entry run twice notifies a
// device once.
type Worker struct {
	rdb       redis.UniversalClient
	store     *store.Store
	providers Providers
	cfg       WorkerConfig
	log       *zap.Logger
	m         *Metrics
	claim     *redis.Script
	collapse  *redis.Script
	now       func() time.Time
	// sleep waits between retries of a provider (a seam for tests).
	sleep func(ctx context.Context, d time.Duration) error
}

// NewWorker returns a worker; cfg's durations and counts must be
// positive (config.Push.Validate).
func NewWorker(rdb redis.UniversalClient, st *store.Store, p Providers, cfg WorkerConfig, log *zap.Logger, m *Metrics) (*Worker, error) {
	if cfg.Partitions < 1 || cfg.MaxAttempts < 1 || cfg.ClaimIdle <= 0 || cfg.SendTimeout <= 0 || cfg.TTL <= 0 || cfg.CollapseInterval <= 0 || cfg.Name == "" {
		return nil, fmt.Errorf("push: worker config %+v: every value must be set", cfg)
	}
	return &Worker{rdb: rdb, store: st, providers: p, cfg: cfg, log: log, m: m,
		claim: redis.NewScript(claimScript), collapse: redis.NewScript(collapseScript), now: time.Now, sleep: retry.Sleep}, nil
}

// claimScript takes the idempotency key of one notification for owner:
// 1 when it may send (free, or already its own), 0 when it was sent, -1
// when another worker is sending it now (the entry is left for later).
const claimScript = `
local v = redis.call('GET', KEYS[1])
if not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if v == 'sent' then return 0 end
return -1`

// collapseScript lets one message per interval notify a user of a
// conversation: 1 when msg_id is that message (new, or the same one run
// again), 0 when another message took the interval.
const collapseScript = `
local v = redis.call('GET', KEYS[1])
if not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
if v == ARGV[1] then return 1 end
return 0`

// sentTTL is how long a sent notification's key stays: well past any
// redelivery of its entry.
const sentTTL = 24 * time.Hour

// readBlock is how long one XREADGROUP waits, so Run notices ctx ending.
const readBlock = 2 * time.Second

// readCount is the entries one read takes.
const readCount = 16

var workerRetry = retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2, Jitter: true}

// Run works every partition until ctx ends.
func (w *Worker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for p := 0; p < w.cfg.Partitions; p++ {
		wg.Go(func() { w.runPartition(ctx, p) })
	}
	wg.Go(func() { w.sampleQueues(ctx) })
	wg.Wait()
}

// sampleEvery is how often the push queue gauges are read: a typical
// scrape interval.
const sampleEvery = 5 * time.Second

// sampleQueues sets the push queue gauges of every partition now and then
// every sampleEvery until ctx ends: three pipelined commands per
// partition per interval, never per job.
func (w *Worker) sampleQueues(ctx context.Context) {
	streams := make([]string, w.cfg.Partitions)
	for p := range streams {
		streams[p] = rediskey.Push(p)
	}
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		states, err := queue.Sample(ctx, w.rdb, streams, rediskey.PushGroup, time.Now())
		if err != nil && ctx.Err() == nil {
			w.log.Debug("sample push queues", zap.Error(err))
		}
		for p, st := range states {
			l := strconv.Itoa(p)
			if st.LengthOK {
				w.m.QueueLength.WithLabelValues(l).Set(float64(st.Length))
			}
			if st.PendingOK {
				w.m.QueuePending.WithLabelValues(l).Set(float64(st.Pending))
			}
			if st.AgeOK {
				w.m.QueueOldestAge.WithLabelValues(l).Set(st.OldestAgeSeconds)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Worker) runPartition(ctx context.Context, p int) {
	stream := rediskey.Push(p)
	log := w.log.With(zap.Int("push_partition", p))
	bo := retry.NewBackoff(workerRetry)
	lastClaim := time.Time{}
	for ctx.Err() == nil {
		if err := w.rdb.XGroupCreateMkStream(ctx, stream, rediskey.PushGroup, "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			log.Warn("create push consumer group", zap.Error(err))
			bo.Sleep(ctx)
			continue
		}
		break
	}
	for ctx.Err() == nil {
		var msgs []redis.XMessage
		var err error
		if time.Since(lastClaim) >= w.cfg.ClaimIdle/2 {
			lastClaim = time.Now()
			msgs, _, err = w.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: stream, Group: rediskey.PushGroup, Consumer: w.cfg.Name,
				MinIdle: w.cfg.ClaimIdle, Start: "0", Count: readCount}).Result()
			if len(msgs) > 0 {
				w.m.Reclaimed.Add(float64(len(msgs)))
			}
		}
		if err == nil && len(msgs) == 0 {
			var res []redis.XStream
			res, err = w.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: rediskey.PushGroup, Consumer: w.cfg.Name,
				Streams: []string{stream, ">"}, Count: readCount, Block: readBlock}).Result()
			if errors.Is(err, redis.Nil) {
				err = nil
			}
			for _, s := range res {
				msgs = append(msgs, s.Messages...)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("read push stream", zap.Error(err))
			bo.Sleep(ctx)
			continue
		}
		bo.Reset()
		for _, msg := range msgs {
			// An entry left unacknowledged stays pending: a claim takes
			// it again after ClaimIdle.
			w.handle(ctx, stream, msg, log)
		}
	}
}

// handle runs one entry and acknowledges it when every device is done.
func (w *Worker) handle(ctx context.Context, stream string, msg redis.XMessage, log *zap.Logger) {
	job, err := decodePushJob(msg)
	if err != nil {
		log.Error("malformed push job dropped", zap.String("entry_id", msg.ID), zap.Error(err))
		w.m.Jobs.WithLabelValues("malformed").Inc()
		w.ack(ctx, stream, msg.ID, log)
		return
	}
	done, err := w.Process(ctx, job)
	if err != nil || !done {
		if err != nil && ctx.Err() == nil {
			log.Warn("push job not finished, left for a retry", zap.Int64("msg_id", job.GetMsgId()), zap.Error(err))
		}
		w.m.Jobs.WithLabelValues("deferred").Inc()
		return
	}
	if err := failpoint.Inject("logic/push/beforeAck"); err != nil {
		return
	}
	w.m.Jobs.WithLabelValues("done").Inc()
	w.ack(ctx, stream, msg.ID, log)
}

// ack acknowledges and deletes an entry; a failure leaves it pending, to
// be claimed again (its devices are keyed sent).
func (w *Worker) ack(ctx context.Context, stream, id string, log *zap.Logger) {
	_, err := w.rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		tx.XAck(ctx, stream, rediskey.PushGroup, id)
		tx.XDel(ctx, stream, id)
		return nil
	})
	if err != nil {
		log.Warn("ack push job", zap.String("entry_id", id), zap.Error(err))
	}
}

func decodePushJob(msg redis.XMessage) (*queuev1.PushJob, error) {
	raw, ok := msg.Values[queue.Field].(string)
	if !ok {
		return nil, errors.New("no job field")
	}
	var j queuev1.PushJob
	if err := proto.Unmarshal([]byte(raw), &j); err != nil {
		return nil, err
	}
	if j.GetMsgId() <= 0 || j.GetConversationId() <= 0 {
		return nil, errors.New("no msg_id or conversation_id")
	}
	return &j, nil
}

// usersPerQuery bounds the users of one token query.
const usersPerQuery = 500

// Process sends job's notifications: for each user not muted in the
// conversation, each device with a token that did not take the message
// online, unless another message of the conversation notified the user
// within the collapse interval. done is false when some device could not
// be finished now (another worker is sending it, or a Redis or MySQL
// error): the entry is then run again later, and the devices already
// done are skipped by their keys.
func (w *Worker) Process(ctx context.Context, job *queuev1.PushJob) (done bool, err error) {
	if job.GetSenderId() == 0 {
		// A push a connection never acked (Unacked): the message's
		// details come from MySQL, and a message gone or recalled
		// meanwhile notifies nobody.
		m, err := w.store.GetMessage(ctx, job.GetMsgId(), job.GetConversationId())
		if errors.Is(err, store.ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if m.Status != store.MessageNormal {
			return true, nil
		}
		pj, err := dialog.EncodePreview(dialog.PreviewOf(m.ID, m.SenderID, m.MessageType, m.Content))
		if err != nil {
			return false, err
		}
		job = proto.CloneOf(job)
		job.SenderId, job.MessageType, job.Preview = m.SenderID, int32(m.MessageType), pj
	}
	online := make(map[int64]map[string]bool, len(job.GetUsers()))
	only := make(map[int64]map[string]bool)
	uids := make([]int64, 0, len(job.GetUsers()))
	for _, u := range job.GetUsers() {
		if u.GetUserId() == job.GetSenderId() {
			continue // never notified of one's own message
		}
		devs := make(map[string]bool, len(u.GetOnlineDevices()))
		for _, d := range u.GetOnlineDevices() {
			devs[d] = true
		}
		online[u.GetUserId()] = devs
		if len(u.GetOnlyDevices()) > 0 {
			only[u.GetUserId()] = make(map[string]bool, len(u.GetOnlyDevices()))
			for _, d := range u.GetOnlyDevices() {
				only[u.GetUserId()][d] = true
			}
		}
		uids = append(uids, u.GetUserId())
	}
	var prev dialog.Preview
	if len(job.GetPreview()) > 0 {
		_ = json.Unmarshal(job.GetPreview(), &prev) // a bad preview still notifies, without text
	}
	sender := ""
	done = true
	for lo := 0; lo < len(uids); lo += usersPerQuery {
		targets, err := w.store.PushTargets(ctx, job.GetConversationId(), uids[lo:min(lo+usersPerQuery, len(uids))])
		if err != nil {
			return false, err
		}
		byUser := map[int64][]store.PushTarget{}
		var order []int64
		for _, t := range targets {
			if online[t.UserID][t.DeviceID] || (only[t.UserID] != nil && !only[t.UserID][t.DeviceID]) {
				continue
			}
			if _, ok := byUser[t.UserID]; !ok {
				order = append(order, t.UserID)
			}
			byUser[t.UserID] = append(byUser[t.UserID], t)
		}
		for _, uid := range order {
			ok, err := w.collapse.Run(ctx, w.rdb, []string{rediskey.PushCollapse(uid, job.GetConversationId())},
				job.GetMsgId(), w.cfg.CollapseInterval.Milliseconds()).Int()
			if err != nil {
				return false, fmt.Errorf("push: collapse: %w", err)
			}
			if ok == 0 {
				w.m.Collapsed.Add(float64(len(byUser[uid])))
				continue
			}
			if sender == "" && job.GetSenderId() > 0 {
				sender = w.senderName(ctx, job.GetSenderId())
			}
			badge, err := w.badge(ctx, uid)
			if err != nil {
				return false, err
			}
			for _, t := range byUser[uid] {
				title, body := text(t.Preview, sender, prev)
				n := Notification{
					Key: strconv.FormatInt(job.GetMsgId(), 10) + ":" + strconv.FormatInt(uid, 10) + ":" + t.DeviceID, Token: t.PushToken,
					Title: title, Body: body, Badge: badge, ConversationID: job.GetConversationId(), MsgID: job.GetMsgId(),
					SenderID: job.GetSenderId(), Expires: w.now().Add(w.cfg.TTL),
				}
				ok, err := w.notify(ctx, job.GetMsgId(), n)
				if err != nil {
					return false, err
				}
				done = done && ok
			}
		}
	}
	if ms := job.GetEnqueuedAtMs(); ms > 0 && done {
		w.m.Lag.Observe(time.Since(time.UnixMilli(ms)).Seconds())
	}
	return done, nil
}

// text is a notification's title and body under the user's preview
// setting.
func text(preview int, sender string, p dialog.Preview) (string, string) {
	switch preview {
	case store.PreviewNone:
		return "", "New message"
	case store.PreviewSender:
		return sender, "New message"
	}
	body := p.Text
	if body == "" {
		body = "New message"
	}
	return sender, body
}

// senderName is the sender's nickname, or "User <id>".
func (w *Worker) senderName(ctx context.Context, uid int64) string {
	if p, err := w.store.GetProfile(ctx, uid); err == nil && p.Nickname != "" {
		return p.Nickname
	}
	return "User " + strconv.FormatInt(uid, 10)
}

// badgeConversations bounds the conversations the badge sums.
const badgeConversations = 500

// badge is the user's total unread: over their most recently changed
// conversations when their list is in Redis (the list deliver just
// updated; a muted conversation counts none), else counted in MySQL.
func (w *Worker) badge(ctx context.Context, uid int64) (int64, error) {
	epoch, err := dialog.Epoch(ctx, w.rdb, uid)
	if err != nil {
		return 0, fmt.Errorf("push: badge of %d: %w", uid, err)
	}
	if epoch == "" {
		return w.store.TotalUnread(ctx, uid)
	}
	cids, err := w.rdb.ZRevRange(ctx, dialog.ListKey(uid), 0, badgeConversations-1).Result()
	if err != nil {
		return 0, fmt.Errorf("push: badge of %d: %w", uid, err)
	}
	if len(cids) == 0 {
		return 0, nil
	}
	cmds := make([]*redis.StringCmd, len(cids))
	_, err = w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range cids {
			cid, _ := strconv.ParseInt(c, 10, 64)
			cmds[i] = p.HGet(ctx, dialog.StateKey(uid, cid), dialog.FieldUnread)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("push: badge of %d: %w", uid, err)
	}
	var sum int64
	for _, c := range cmds {
		if n, err := c.Int64(); err == nil && n > 0 {
			sum += n
		}
	}
	return sum, nil
}

// provider picks the provider of a token and its metric label.
func (w *Worker) provider(t store.PushToken) (Provider, string) {
	switch t.Platform {
	case PlatformAPNs:
		return w.providers.APNs, "apns"
	case PlatformFCM:
		return w.providers.FCM, "fcm"
	case PlatformGateway:
		return w.providers.Gateways[t.Gateway], "gateway"
	}
	return nil, "unknown"
}

// notify sends one device's notification under its idempotency key. ok
// is false when another worker is sending it right now.
func (w *Worker) notify(ctx context.Context, msgID int64, n Notification) (ok bool, err error) {
	key := rediskey.PushSent(msgID, n.Token.UserID, n.Token.DeviceID)
	c, err := w.claim.Run(ctx, w.rdb, []string{key}, w.cfg.Name, w.cfg.ClaimIdle.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("push: claim %s: %w", key, err)
	}
	switch c {
	case 0:
		w.m.Duplicates.Inc()
		return true, nil
	case -1:
		return false, nil
	}
	prov, label := w.provider(n.Token)
	var ans Answer
	if prov == nil {
		ans = Answer{Result: AuthError, Reason: "no " + label + " provider configured" + gatewayName(n.Token)}
	} else {
		ans = w.send(ctx, prov, label, n)
	}
	if ans.Result == Retry && ctx.Err() != nil {
		return false, ctx.Err() // shutting down: the entry is run again
	}
	if ans.Result == Sent {
		if err := failpoint.Inject("logic/push/afterSend"); err != nil {
			return false, err
		}
	}
	log := w.log.With(zap.String("provider", label), zap.Int64("user_id", n.Token.UserID), zap.String("device_id", n.Token.DeviceID),
		zap.Int64("msg_id", msgID), zap.String("reason", ans.Reason))
	switch ans.Result {
	case DeadToken:
		gone, err := w.store.DeletePushToken(ctx, n.Token.UserID, n.Token.DeviceID, n.Token.Token)
		if err != nil {
			return false, err
		}
		if gone {
			w.m.TokensRemoved.WithLabelValues(label).Inc()
		}
		log.Info("push token dead, removed")
	case AuthError:
		// An operator must fix the credentials; retrying would only
		// repeat the refusal for every message.
		log.Error("push provider refused our credentials or configuration; notification dropped")
	case Rejected:
		log.Warn("push provider rejected the notification; dropped")
	case Retry:
		log.Warn("push provider still failing after push.max_attempts; notification dropped")
	}
	w.m.Notifications.WithLabelValues(label, finalResult(ans.Result)).Inc()
	if err := w.rdb.Set(ctx, key, "sent", sentTTL).Err(); err != nil {
		return false, fmt.Errorf("push: mark %s sent: %w", key, err)
	}
	return true, nil
}

func gatewayName(t store.PushToken) string {
	if t.Platform == PlatformGateway {
		return " (gateway " + t.Gateway + ")"
	}
	return ""
}

// finalResult is the metric label of a notification's last answer.
func finalResult(r Result) string {
	if r == Retry {
		return "gave_up"
	}
	return r.String()
}

// send tries a notification up to MaxAttempts times while the provider
// answers Retry, waiting its Retry-After or the backoff's wait, whichever
// is longer (a wait over half of ClaimIdle gives up: the claim would
// lapse).
func (w *Worker) send(ctx context.Context, prov Provider, label string, n Notification) Answer {
	bo := retry.NewBackoff(workerRetry)
	var ans Answer
	key := rediskey.PushSent(n.MsgID, n.Token.UserID, n.Token.DeviceID)
	for attempt := 0; attempt < w.cfg.MaxAttempts; attempt++ {
		if attempt > 0 {
			// Renew the claim, so no worker that took the entry over sends
			// while this one retries.
			if c, err := w.claim.Run(ctx, w.rdb, []string{key}, w.cfg.Name, w.cfg.ClaimIdle.Milliseconds()).Int(); err != nil || c != 1 {
				return Answer{Result: Retry, Reason: "claim lost while retrying"}
			}
		}
		sctx, cancel := context.WithTimeout(ctx, w.cfg.SendTimeout)
		start := time.Now()
		ans = prov.Send(sctx, n)
		cancel()
		w.m.SendSeconds.WithLabelValues(label).Observe(time.Since(start).Seconds())
		w.m.Answers.WithLabelValues(label, ans.Result.String()).Inc()
		if ans.Result != Retry || attempt == w.cfg.MaxAttempts-1 {
			return ans
		}
		wait := max(ans.RetryAfter, bo.Next())
		if wait > w.cfg.ClaimIdle/2 {
			// Longer than the claim may wait: give this notification up
			// rather than send before the provider allows.
			return ans
		}
		if err := w.sleep(ctx, wait); err != nil {
			return ans
		}
	}
	return ans
}

// Metrics are the push worker's collectors (spark_logic_push_…).
type Metrics struct {
	Notifications *prometheus.CounterVec
	Answers       *prometheus.CounterVec
	TokensRemoved *prometheus.CounterVec
	SendSeconds   *prometheus.HistogramVec
	Collapsed     prometheus.Counter
	Duplicates    prometheus.Counter
	Reclaimed     prometheus.Counter
	Jobs          *prometheus.CounterVec
	Lag           prometheus.Histogram
	// QueueLength, QueuePending and QueueOldestAge are each push
	// stream's backlog, sampled every sampleEvery by every logic (a
	// dashboard takes max by partition), as deliver samples its queue.
	QueueLength    *prometheus.GaugeVec
	QueuePending   *prometheus.GaugeVec
	QueueOldestAge *prometheus.GaugeVec
}

// NewMetrics creates the collectors and registers them on reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Notifications: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "spark", Subsystem: "logic", Name: "push_notifications_total",
			Help: "Notifications finished, by provider and final result (sent, dead_token, auth_error, rejected, gave_up)."}, []string{"provider", "result"}),
		Answers: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "spark", Subsystem: "logic", Name: "push_provider_answers_total",
			Help: "Provider answers to each attempt, by provider and result (sent, dead_token, retry, auth_error, rejected)."}, []string{"provider", "result"}),
		TokensRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "spark", Subsystem: "logic", Name: "push_tokens_removed_total",
			Help: "Push tokens removed because their provider said they are dead."}, []string{"provider"}),
		SendSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "spark", Subsystem: "logic", Name: "push_send_seconds",
			Help: "Latency of one provider request.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}, []string{"provider"}),
		Collapsed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "spark", Subsystem: "logic", Name: "push_collapsed_total",
			Help: "Device notifications not sent because the conversation notified the user within push.collapse_interval."}),
		Duplicates: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "spark", Subsystem: "logic", Name: "push_duplicates_total",
			Help: "Device notifications skipped because their idempotency key says they were sent."}),
		Reclaimed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "spark", Subsystem: "logic", Name: "push_reclaimed_total",
			Help: "Push jobs taken over after push.claim_idle unacknowledged."}),
		Jobs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "spark", Subsystem: "logic", Name: "push_jobs_total",
			Help: "Push jobs handled, by result (done, deferred, malformed)."}, []string{"result"}),
		Lag: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "spark", Subsystem: "logic", Name: "push_lag_seconds",
			Help: "Time from deliver queuing a push job to its last notification.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		QueueLength: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "spark", Subsystem: "logic", Name: "push_queue_length",
			Help: "Push jobs in each push stream not yet finished (acknowledged jobs are deleted)."}, []string{"partition"}),
		QueuePending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "spark", Subsystem: "logic", Name: "push_queue_pending",
			Help: "Push jobs read by a worker and not yet acknowledged, per push stream."}, []string{"partition"}),
		QueueOldestAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "spark", Subsystem: "logic", Name: "push_queue_oldest_age_seconds",
			Help: "Age of the oldest unfinished push job per push stream (0 when empty)."}, []string{"partition"}),
	}
	if reg != nil {
		reg.MustRegister(m.Notifications, m.Answers, m.TokensRemoved, m.SendSeconds, m.Collapsed, m.Duplicates, m.Reclaimed, m.Jobs, m.Lag,
			m.QueueLength, m.QueuePending, m.QueueOldestAge)
		for _, p := range []string{"apns", "fcm", "gateway"} {
			for _, r := range []string{"sent", "dead_token", "auth_error", "rejected", "gave_up"} {
				m.Notifications.WithLabelValues(p, r)
			}
			m.TokensRemoved.WithLabelValues(p)
		}
	}
	return m
}
