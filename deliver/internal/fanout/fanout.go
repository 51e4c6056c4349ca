// Package fanout turns one deliver job into Push RPCs: recipients → (for a
// MESSAGE) each recipient's conversation list → route table → targets
// (every device except the sending one) → one Push per gate → mailbox
// events for pushes a live connection could not take. Offline devices and
// unreachable gates are skipped, never retried in a loop: the client
// catches up by sync, and a blocked partition would delay every
// conversation behind it.
package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/deliver/internal/gateclient"
	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/failpoint"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// Target is one device connection to push to, with the raw route value it
// came from so a stale entry can be compare-and-deleted.
type Target struct {
	UserID   int64
	DeviceID string
	Entry    route.Entry
	Raw      string
}

// Stale is a route entry to remove when it still holds Raw.
type Stale struct {
	UserID   int64
	DeviceID string
	Raw      string
}

// Recipients returns the job's recipients without duplicates, in job order
// (a self-conversation lists the same user twice).
func Recipients(job *queuev1.DeliverJob) []int64 {
	out := make([]int64, 0, len(job.GetRecipients()))
	seen := make(map[int64]struct{}, len(job.GetRecipients()))
	for _, uid := range job.GetRecipients() {
		if uid <= 0 {
			continue
		}
		if _, dup := seen[uid]; dup {
			continue
		}
		seen[uid] = struct{}{}
		out = append(out, uid)
	}
	return out
}

// SelectTargets picks every routed device of the recipients except the
// sending device itself (the sender's other devices do get the message).
// routes maps user id → device id → route value; unparsable values are
// returned as stale. The result is sorted by user then device so pushes are
// deterministic.
func SelectTargets(job *queuev1.DeliverJob, routes map[int64]map[string]string) (targets []Target, malformed []Stale) {
	for _, uid := range Recipients(job) {
		for dev, raw := range routes[uid] {
			e, err := route.Parse(raw)
			if err != nil {
				malformed = append(malformed, Stale{UserID: uid, DeviceID: dev, Raw: raw})
				continue
			}
			if uid == job.GetSenderId() && dev == job.GetSenderDevice() {
				continue
			}
			targets = append(targets, Target{UserID: uid, DeviceID: dev, Entry: e, Raw: raw})
		}
	}
	sort.Slice(targets, func(i, j int) bool {
		if targets[i].UserID != targets[j].UserID {
			return targets[i].UserID < targets[j].UserID
		}
		return targets[i].DeviceID < targets[j].DeviceID
	})
	return targets, malformed
}

// GroupByGate groups targets by the gate holding them.
func GroupByGate(targets []Target) map[string][]Target {
	out := make(map[string][]Target)
	for _, t := range targets {
		out[t.Entry.GateID] = append(out[t.Entry.GateID], t)
	}
	return out
}

// Gates resolves gate ids and hands out Push clients (gateclient.Pool).
type Gates interface {
	Addr(ctx context.Context, gateID string) (string, error)
	Client(addr string) (gatev1.PushClient, error)
	Forget(gateID string)
}

// Mailbox records mailbox events through logic (logicclient.Pool).
type Mailbox interface {
	AppendMailbox(ctx context.Context, events []*logicv1.MailboxEvent) (*logicv1.AppendMailboxReply, error)
}

// MailboxMissedMessage is the mailbox event type of a push that could not
// be handed to a live connection (docs/internals.md, Mailbox).
const MailboxMissedMessage = 5

// mailboxPause is how long mailbox calls are skipped after one failed: a
// logic outage then costs a partition one bounded wait, not one per job.
const mailboxPause = time.Second

// listParallel bounds the concurrent list scripts of one job (a group
// message has many recipients; each script is one round trip).
const listParallel = 16

// Fanout processes jobs. It is safe for concurrent use by partition workers.
type Fanout struct {
	rdb         redis.Cmdable
	gates       Gates
	mailbox     Mailbox
	ids         *envelope.IDSource
	pushTimeout time.Duration
	log         *zap.Logger
	m           *metrics.Metrics
	cad         *redis.Script
	// mailboxPausedUntil is the Unix nano time before which mailbox calls
	// are skipped (set after a failure).
	mailboxPausedUntil atomic.Int64
}

// New returns a Fanout. mailbox may be nil: missed pushes are then only
// counted (sync still brings the messages).
func New(rdb redis.Cmdable, gates Gates, mailbox Mailbox, pushTimeout time.Duration, log *zap.Logger, m *metrics.Metrics) *Fanout {
	if pushTimeout <= 0 {
		pushTimeout = 3 * time.Second
	}
	return &Fanout{
		rdb: rdb, gates: gates, mailbox: mailbox, ids: envelope.NewIDSource(), pushTimeout: pushTimeout,
		log: log, m: m, cad: redis.NewScript(route.CompareAndDeleteScript),
	}
}

// Process handles one job. A returned error is a Redis failure before any
// push was sent; the caller retries the job later. Push and mailbox
// failures are not errors.
func (f *Fanout) Process(ctx context.Context, partition int, job *queuev1.DeliverJob) error {
	if err := failpoint.Inject("deliver/job/beforePush"); err != nil {
		return err
	}
	if ms := job.GetEnqueuedAtMs(); ms > 0 {
		f.m.QueueLag.Observe(time.Since(time.UnixMilli(ms)).Seconds())
	}
	log := f.log.With(zap.Int64("msg_id", job.GetMsgId()), zap.Int64("conversation_id", job.GetConversationId()), zap.Int("partition", partition))
	switch job.GetKind() {
	case queuev1.JobKind_JOB_KIND_MESSAGE, queuev1.JobKind_JOB_KIND_UNSPECIFIED:
		return f.message(ctx, log, partition, job)
	case queuev1.JobKind_JOB_KIND_SIGNAL:
		return f.signal(ctx, log, job)
	default:
		// A newer logic may enqueue kinds this deliver does not know; pushing
		// them as MESSAGE would show garbage, and sync still has the truth.
		f.m.Jobs.WithLabelValues(metrics.ResultUnknown).Inc()
		log.Warn("unknown job kind, dropped", zap.Int32("kind", int32(job.GetKind())))
		return nil
	}
}

// message fans out a MESSAGE job: done marker, every recipient's list,
// pushes, then mailbox events for the pushes no live connection took.
func (f *Fanout) message(ctx context.Context, log *zap.Logger, partition int, job *queuev1.DeliverJob) error {
	n, err := f.rdb.Exists(ctx, rediskey.DeliverDone(partition, job.GetMsgId())).Result()
	if err != nil {
		return fmt.Errorf("fanout: check done marker: %w", err)
	}
	if n > 0 {
		f.m.Jobs.WithLabelValues(metrics.ResultDuplicate).Inc()
		log.Debug("job already delivered")
		return nil
	}
	// Lists first: a client that gets the push and syncs at once must find
	// the conversation changed. A job pushed but not acknowledged comes back
	// here; the script skips ids it applied, so nothing counts twice.
	if err := f.applyLists(ctx, log, job); err != nil {
		return err
	}
	if err := failpoint.Inject("deliver/job/afterList"); err != nil {
		return err
	}
	missed, err := f.fanOut(ctx, log, job, uint32(protocol.CmdMessage))
	if err != nil {
		return err
	}
	f.m.Jobs.WithLabelValues(metrics.ResultPushed).Inc()
	f.recordMissed(ctx, log, job, missed)
	return nil
}

// signal pushes a SIGNAL job's command; logic already invalidated the list
// entries it concerns, and there is no done marker (its msg_id names the
// message it is about, not the job).
func (f *Fanout) signal(ctx context.Context, log *zap.Logger, job *queuev1.DeliverJob) error {
	cmd := job.GetCommand()
	if cmd == 0 || cmd > 0xFFFF {
		f.m.Jobs.WithLabelValues(metrics.ResultMalformed).Inc()
		log.Warn("signal job without a valid command, dropped", zap.Uint32("command", cmd))
		return nil
	}
	if _, err := f.fanOut(ctx, log, job, cmd); err != nil {
		return err
	}
	f.m.Jobs.WithLabelValues(metrics.ResultSignal).Inc()
	return nil
}

// pushData is what deliver reads of a MESSAGE push's data
// (protocol.Message): enough for the preview.
type pushData struct {
	MessageType int             `json:"message_type"`
	Content     json.RawMessage `json:"content"`
	CreatedAt   int64           `json:"created_at"`
}

// preview builds the job's list preview and the message time. Undecodable
// push data still updates the lists (unread and order matter more than the
// preview text), with an empty text.
func (f *Fanout) preview(log *zap.Logger, job *queuev1.DeliverJob) (dialog.Preview, int64) {
	var d pushData
	if len(job.GetPushData()) > 0 {
		if err := json.Unmarshal(job.GetPushData(), &d); err != nil {
			log.Warn("push data is not a message, preview without text", zap.Error(err))
		}
	}
	var content struct {
		Text string `json:"text"`
	}
	if len(d.Content) > 0 {
		// Media content has no text; a content that is not an object is
		// shown as empty rather than failing the job.
		_ = json.Unmarshal(d.Content, &content)
	}
	mt := int(job.GetMessageType())
	if mt == 0 {
		mt = d.MessageType
	}
	at := job.GetCreatedAtMs()
	if at == 0 {
		at = d.CreatedAt
	}
	return dialog.Preview{
		MsgID:       strconv.FormatInt(job.GetMsgId(), 10),
		MessageType: mt,
		Text:        dialog.PreviewText(mt, content.Text),
		SenderID:    strconv.FormatInt(job.GetSenderId(), 10),
	}, at
}

// applyLists applies the message to every recipient's conversation list,
// concurrently (each call is one atomic script). Any failure fails the job
// so it is retried whole; the scripts already run are idempotent.
func (f *Fanout) applyLists(ctx context.Context, log *zap.Logger, job *queuev1.DeliverJob) error {
	uids := Recipients(job)
	if len(uids) == 0 {
		return nil
	}
	p, at := f.preview(log, job)
	errs := make([]error, len(uids))
	sem := make(chan struct{}, listParallel)
	var wg sync.WaitGroup
	for i, uid := range uids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			applied, err := dialog.ApplyMessage(ctx, f.rdb, uid, job.GetConversationId(), job.GetMsgId(), at, uid != job.GetSenderId(), p)
			if err != nil {
				errs[i] = err
				return
			}
			if applied {
				f.m.ListUpdates.WithLabelValues(metrics.ListApplied).Inc()
			} else {
				f.m.ListUpdates.WithLabelValues(metrics.ListSkipped).Inc()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fanout: update conversation lists: %w", err)
	}
	return nil
}

// fanOut pushes command with the job's data to every routed device of the
// recipients except the sending one. It returns the targets a live gate
// could not take: the ones it dropped (outbound queue full) and all of a
// gate whose Push failed. An error is a Redis failure before any push.
func (f *Fanout) fanOut(ctx context.Context, log *zap.Logger, job *queuev1.DeliverJob, command uint32) ([]Target, error) {
	routes, err := f.lookupRoutes(ctx, Recipients(job))
	if err != nil {
		return nil, err
	}
	targets, malformed := SelectTargets(job, routes)
	for _, s := range malformed {
		log.Warn("malformed route entry removed", zap.Int64("user_id", s.UserID), zap.String("device_id", s.DeviceID))
		f.removeRoute(ctx, log, s)
	}
	groups := GroupByGate(targets)

	// Resolve every gate before pushing anything, so a Redis failure here is
	// retried as a whole job without double pushes.
	type gateBatch struct {
		gateID, addr string
		targets      []Target
	}
	batches := make([]gateBatch, 0, len(groups))
	for gateID, ts := range groups {
		addr, err := f.gates.Addr(ctx, gateID)
		if errors.Is(err, gateclient.ErrGateGone) {
			// A dead gate's devices are offline, not missed: sync brings
			// the message.
			log.Info("gate gone, removing its routes", zap.String("gate_id", gateID), zap.Int("targets", len(ts)))
			for _, t := range ts {
				f.removeRoute(ctx, log, Stale{UserID: t.UserID, DeviceID: t.DeviceID, Raw: t.Raw})
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("fanout: %w", err)
		}
		batches = append(batches, gateBatch{gateID: gateID, addr: addr, targets: ts})
	}
	if len(batches) == 0 {
		return nil, nil
	}

	body := envelope.OK(f.ids.Next(), job.GetPushData())
	var (
		mu     sync.Mutex
		missed []Target
		wg     sync.WaitGroup
	)
	for _, b := range batches {
		wg.Go(func() {
			m := f.push(ctx, log, b.gateID, b.addr, command, body, b.targets)
			if len(m) > 0 {
				mu.Lock()
				missed = append(missed, m...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return missed, nil
}

// recordMissed appends one MISSED_MESSAGE mailbox event per missed target,
// in one call per job. Failures are logged and counted only: the device's
// next sync finds the message anyway, and the partition must move on.
func (f *Fanout) recordMissed(ctx context.Context, log *zap.Logger, job *queuev1.DeliverJob, missed []Target) {
	if len(missed) == 0 || f.mailbox == nil {
		return
	}
	if time.Now().UnixNano() < f.mailboxPausedUntil.Load() {
		f.m.MailboxEvents.WithLabelValues(metrics.MailboxSkipped).Add(float64(len(missed)))
		log.Debug("mailbox paused after a failure, missed pushes not recorded", zap.Int("targets", len(missed)))
		return
	}
	payload, err := json.Marshal(struct {
		ConversationID jsonid.ID `json:"conversation_id"`
		MsgID          jsonid.ID `json:"msg_id"`
	}{jsonid.ID(job.GetConversationId()), jsonid.ID(job.GetMsgId())})
	if err != nil {
		log.Error("encode mailbox payload", zap.Error(err))
		return
	}
	events := make([]*logicv1.MailboxEvent, len(missed))
	for i, t := range missed {
		events[i] = &logicv1.MailboxEvent{
			UserId: t.UserID, DeviceId: t.DeviceID, EventType: MailboxMissedMessage,
			ConversationId: job.GetConversationId(), MsgId: job.GetMsgId(), Payload: payload,
		}
	}
	if _, err := f.mailbox.AppendMailbox(ctx, events); err != nil {
		f.mailboxPausedUntil.Store(time.Now().Add(mailboxPause).UnixNano())
		f.m.MailboxEvents.WithLabelValues(metrics.MailboxFailed).Add(float64(len(events)))
		log.Warn("record missed pushes in the mailbox", zap.Int("events", len(events)), zap.Error(err))
		return
	}
	f.m.MailboxEvents.WithLabelValues(metrics.MailboxAppended).Add(float64(len(events)))
}

func (f *Fanout) lookupRoutes(ctx context.Context, uids []int64) (map[int64]map[string]string, error) {
	if len(uids) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.MapStringStringCmd, len(uids))
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, uid := range uids {
			cmds[i] = p.HGetAll(ctx, rediskey.Route(uid))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fanout: read routes: %w", err)
	}
	out := make(map[int64]map[string]string, len(uids))
	for i, uid := range uids {
		out[uid] = cmds[i].Val()
	}
	return out, nil
}

// push sends one Push to a gate and returns the targets it could not hand
// to a live connection (dropped, or all of them when the RPC failed).
// Targets it reports missing are offline: their routes are removed.
func (f *Fanout) push(ctx context.Context, log *zap.Logger, gateID, addr string, command uint32, body []byte, ts []Target) []Target {
	log = log.With(zap.String("gate_id", gateID), zap.String("push_addr", addr))
	cli, err := f.gates.Client(addr)
	if err != nil {
		f.m.PushErrors.Inc()
		log.Warn("push client", zap.Error(err))
		return ts
	}
	req := &gatev1.PushRequest{Command: command, Body: body, Targets: make([]*gatev1.Target, len(ts))}
	byKey := make(map[targetKey]Target, len(ts))
	for i, t := range ts {
		req.Targets[i] = &gatev1.Target{ConnId: t.Entry.ConnID, UserId: t.UserID, DeviceId: t.DeviceID}
		byKey[targetKey{t.Entry.ConnID, t.UserID, t.DeviceID}] = t
	}
	pctx, cancel := context.WithTimeout(ctx, f.pushTimeout)
	defer cancel()
	start := time.Now()
	reply, err := cli.Push(pctx, req)
	f.m.PushSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		// The gate may have moved, so look its address up again next time.
		// Whether it wrote any frame is unknown: every target counts as
		// missed, and a duplicate is de-duplicated by msg_id on the client.
		f.m.PushErrors.Inc()
		f.gates.Forget(gateID)
		log.Warn("push failed, targets treated as missed", zap.Int("targets", len(ts)), zap.Error(err))
		return ts
	}
	f.m.Delivered.Add(float64(reply.GetDelivered()))
	f.m.Dropped.Add(float64(len(reply.GetDropped())))
	var missed []Target
	for _, dt := range reply.GetDropped() {
		if t, ok := byKey[targetKey{dt.GetConnId(), dt.GetUserId(), dt.GetDeviceId()}]; ok {
			missed = append(missed, t)
		}
	}
	for _, mt := range reply.GetMissing() {
		f.m.Missing.Inc()
		t, ok := byKey[targetKey{mt.GetConnId(), mt.GetUserId(), mt.GetDeviceId()}]
		if !ok {
			continue // not one we asked for: never delete on a gate's word alone
		}
		f.removeRoute(ctx, log, Stale{UserID: t.UserID, DeviceID: t.DeviceID, Raw: t.Raw})
	}
	return missed
}

type targetKey struct {
	conn uint64
	uid  int64
	dev  string
}

// removeRoute compare-and-deletes a stale route entry. Failures are only
// logged: the next push to that device reports it missing again.
func (f *Fanout) removeRoute(ctx context.Context, log *zap.Logger, s Stale) {
	n, err := f.cad.Run(ctx, f.rdb, []string{rediskey.Route(s.UserID)}, s.DeviceID, s.Raw).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		f.m.RedisErrors.Inc()
		log.Warn("remove stale route", zap.Int64("user_id", s.UserID), zap.String("device_id", s.DeviceID), zap.Error(err))
		return
	}
	if n > 0 {
		f.m.StaleRoutes.Inc()
	}
}
