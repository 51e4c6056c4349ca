// Package fanout turns a partition's batch of deliver jobs into PushBatch
// RPCs: recipients → (for a MESSAGE) each recipient's conversation list →
// route table → targets (every device except the sending one) → one
// PushBatch per gate holding the batch's jobs in stream order → mailbox
// events for pushes a live connection could not take. Each step is one
// pipeline (or call) for the whole batch. Offline devices and
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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/deliver/internal/gateclient"
	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/failpoint"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
	"github.com/sparkim/spark/pkg/rpclimit"
	"github.com/sparkim/spark/pkg/tracing"
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
	// members expands group jobs (nil: group jobs are dropped).
	members Members
	// rounds merges the batches partitions hand in at the same time.
	rounds *rounds
	// pushPartitions is push.partitions when offline push is on, else 0.
	pushPartitions int
}

// Members gives a group conversation's members at a member_version or
// newer (a *members.Cache).
type Members interface {
	Members(ctx context.Context, conversationID, minVersion int64) ([]int64, error)
}

// SetMembers makes f expand group jobs with m. Call it before processing.
func (f *Fanout) SetMembers(m Members) { f.members = m }

// New returns a Fanout pushing with pushTimeout (deliver.push_timeout,
// positive). mailbox may be nil: missed pushes are then only counted
// (sync still brings the messages).
func New(rdb redis.Cmdable, gates Gates, mailbox Mailbox, pushTimeout time.Duration, log *zap.Logger, m *metrics.Metrics) (*Fanout, error) {
	if pushTimeout <= 0 {
		return nil, fmt.Errorf("fanout: deliver.push_timeout %v must be positive", pushTimeout)
	}
	f := &Fanout{
		rdb: rdb, gates: gates, mailbox: mailbox, ids: envelope.NewIDSource(), pushTimeout: pushTimeout,
		log: log, m: m, cad: redis.NewScript(route.CompareAndDeleteScript),
	}
	f.rounds = newRounds(f.process)
	return f, nil
}

// Process handles one job: a batch of one.
func (f *Fanout) Process(ctx context.Context, partition int, job *queuev1.DeliverJob) error {
	return f.ProcessBatch(ctx, partition, []*queuev1.DeliverJob{job})
}

// jobLog is the logger of one job. It is built only when something is
// logged: zap's With encodes its fields at once, which is most of a job's
// CPU when nothing goes wrong.
func (f *Fanout) jobLog(partition int, job *queuev1.DeliverJob) *zap.Logger {
	return f.log.With(zap.Int64("msg_id", job.GetMsgId()), zap.Int64("conversation_id", job.GetConversationId()), zap.Int("partition", partition))
}

// task is one job of a batch on its way through ProcessBatch.
type task struct {
	job *queuev1.DeliverJob
	// partition is the stream the job came from: its done marker lives
	// there, and a round holds several partitions' jobs.
	partition int
	command   uint32
	message   bool
	// skip marks a job with nothing to do (duplicate, invalid, unknown).
	skip   bool
	body   []byte
	missed []Target
	// attempted are the targets handed to a live gate's PushBatch; those
	// not in missed were taken by a live connection (no notification).
	attempted []Target
	// span is deliver's span of a traced job (nil otherwise), and
	// traceParent its traceparent for the Push items.
	span        trace.Span
	traceParent string
}

// ProcessBatch handles a partition's jobs, in stream order, as the jobs
// one by one would be handled, with a few round trips for the whole batch:
// one pipeline for done markers and routes, one for every list update, one
// PushBatch per gate. Batches that several partitions hand in while a
// round is running share the next round (round.go). A returned error is a
// Redis failure (or an armed failpoint) before any push was sent; the
// caller retries the whole batch, which is safe because list updates skip
// ids they applied. Push and mailbox failures are not errors.
func (f *Fanout) ProcessBatch(ctx context.Context, partition int, jobs []*queuev1.DeliverJob) error {
	tasks, err := f.prepare(partition, jobs)
	if err != nil {
		return err
	}
	return f.rounds.run(ctx, tasks)
}

// prepare turns a partition's jobs into tasks, marking the ones with
// nothing to do.
func (f *Fanout) prepare(partition int, jobs []*queuev1.DeliverJob) ([]task, error) {
	tasks := make([]task, len(jobs))
	for i, job := range jobs {
		if err := failpoint.Inject("deliver/job/beforePush"); err != nil {
			return nil, err
		}
		if ms := job.GetEnqueuedAtMs(); ms > 0 {
			f.m.QueueLag.Observe(time.Since(time.UnixMilli(ms)).Seconds())
		}
		t := &tasks[i]
		t.job, t.partition = job, partition
		switch job.GetKind() {
		case queuev1.JobKind_JOB_KIND_MESSAGE, queuev1.JobKind_JOB_KIND_UNSPECIFIED:
			t.message, t.command = true, uint32(protocol.CmdMessage)
			// A deliberately broken deliver for the chaos checker's own
			// test: the job is acked with no list update and no push.
			if failpoint.Inject("deliver/job/drop") != nil {
				f.jobLog(partition, job).Warn("failpoint deliver/job/drop: job dropped")
				t.skip = true
			}
		case queuev1.JobKind_JOB_KIND_SIGNAL:
			// Signals carry their command; logic already invalidated the
			// list entries they concern, and they get no done marker (the
			// msg_id names the message they are about).
			t.command = job.GetCommand()
			if t.command == 0 || t.command > 0xFFFF {
				f.m.Jobs.WithLabelValues(metrics.ResultMalformed).Inc()
				f.jobLog(partition, job).Warn("signal job without a valid command, dropped", zap.Uint32("command", t.command))
				t.skip = true
			}
		default:
			// A newer logic may enqueue kinds this deliver does not know;
			// pushing them as MESSAGE would show garbage, and sync still has
			// the truth.
			f.m.Jobs.WithLabelValues(metrics.ResultUnknown).Inc()
			f.jobLog(partition, job).Warn("unknown job kind, dropped", zap.Int32("kind", int32(job.GetKind())))
			t.skip = true
		}
	}
	return tasks, nil
}

// process runs the stages over tasks, which may hold several partitions'
// jobs, each partition's in stream order.
func (f *Fanout) process(ctx context.Context, tasks []task) (err error) {
	if tracing.On() {
		defer traceTasks(ctx, tasks)(&err)
	}
	start := time.Now()
	if err := f.expandGroups(ctx, tasks); err != nil {
		return err
	}
	routes, err := f.lookup(ctx, tasks)
	if err != nil {
		return err
	}
	f.m.Since(metrics.StageLookup, start)
	start = time.Now()
	// Lists first: a client that gets the push and syncs at once must find
	// the conversation changed.
	if err := f.applyLists(ctx, tasks); err != nil {
		return err
	}
	if err := f.memberWork(ctx, tasks); err != nil {
		return err
	}
	f.m.Since(metrics.StageLists, start)
	for i := range tasks {
		if tasks[i].message && !tasks[i].skip {
			if err := failpoint.Inject("deliver/job/afterList"); err != nil {
				return err
			}
		}
	}
	start = time.Now()
	if err := f.fanOut(ctx, tasks, routes); err != nil {
		return err
	}
	f.m.Since(metrics.StagePush, start)
	var events []*logicv1.MailboxEvent
	for i := range tasks {
		t := &tasks[i]
		switch {
		case t.skip:
		case t.message:
			f.m.Jobs.WithLabelValues(metrics.ResultPushed).Inc()
			events = f.missedEvents(events, t.partition, t.job, t.missed)
		default:
			f.m.Jobs.WithLabelValues(metrics.ResultSignal).Inc()
		}
	}
	if len(events) > 0 {
		start = time.Now()
		f.recordMissed(ctx, events)
		f.m.Since(metrics.StageMailbox, start)
	}
	return f.queuePush(ctx, tasks)
}

// expandGroups fills in the recipients of group jobs (logic leaves them
// empty) from the member cache, at the member_version each job was
// authorized against or newer. A member list that cannot be read fails the
// batch, which is retried: a group message is never dropped for it. A
// conversation that is no group's (dissolved and gone) is skipped.
func (f *Fanout) expandGroups(ctx context.Context, tasks []task) error {
	for i := range tasks {
		t := &tasks[i]
		if t.skip || t.job.GetConversationType() != protocol.ConversationGroup || len(t.job.GetRecipients()) > 0 {
			continue
		}
		if f.members == nil {
			f.m.Jobs.WithLabelValues(metrics.ResultMalformed).Inc()
			f.jobLog(t.partition, t.job).Warn("group job but no member source, dropped")
			t.skip = true
			continue
		}
		ids, err := f.members.Members(ctx, t.job.GetConversationId(), t.job.GetMemberVersion())
		if status.Code(err) == codes.NotFound {
			f.m.Jobs.WithLabelValues(metrics.ResultMalformed).Inc()
			f.jobLog(t.partition, t.job).Warn("group job for a conversation that is no group's, dropped", zap.Error(err))
			t.skip = true
			continue
		}
		if err != nil {
			return fmt.Errorf("fanout: group members: %w", err)
		}
		t.job.Recipients = ids
	}
	return nil
}

// pipelineChunk bounds the commands of one pipeline, so a batch of large
// groups never builds one unbounded request and reply in memory.
const pipelineChunk = 512

// lookup marks the batch's MESSAGE jobs already delivered (done marker, or
// an earlier job of the batch with the same msg_id: a client retry enqueued
// it twice) as skipped, and reads the routes of every recipient of the
// batch, in one pipeline (chunked).
func (f *Fanout) lookup(ctx context.Context, tasks []task) (map[int64]map[string]string, error) {
	var uids []int64
	seenUID := make(map[int64]struct{})
	var checks []int // indexes of tasks whose done marker is read
	for i := range tasks {
		t := &tasks[i]
		if t.skip {
			continue
		}
		if t.message {
			checks = append(checks, i)
		}
		for _, uid := range Recipients(t.job) {
			if _, ok := seenUID[uid]; !ok {
				seenUID[uid] = struct{}{}
				uids = append(uids, uid)
			}
		}
	}
	exists := make([]*redis.IntCmd, len(checks))
	hgets := make([]*redis.MapStringStringCmd, len(uids))
	for lo := 0; lo < len(checks)+len(uids); lo += pipelineChunk {
		hi := min(lo+pipelineChunk, len(checks)+len(uids))
		_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for k := lo; k < hi; k++ {
				if k < len(checks) {
					exists[k] = p.Exists(ctx, rediskey.DeliverDone(tasks[checks[k]].partition, tasks[checks[k]].job.GetMsgId()))
				} else {
					hgets[k-len(checks)] = p.HGetAll(ctx, rediskey.Route(uids[k-len(checks)]))
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("fanout: read done markers and routes: %w", err)
		}
	}
	seenMsg := make(map[int64]struct{}, len(checks))
	for k, i := range checks {
		t := &tasks[i]
		_, dup := seenMsg[t.job.GetMsgId()]
		seenMsg[t.job.GetMsgId()] = struct{}{}
		if dup || exists[k].Val() > 0 {
			t.skip = true
			f.m.Jobs.WithLabelValues(metrics.ResultDuplicate).Inc()
		}
	}
	routes := make(map[int64]map[string]string, len(uids))
	for k, uid := range uids {
		routes[uid] = hgets[k].Val()
	}
	return routes, nil
}

// pushData is what deliver reads of a MESSAGE push's data
// (protocol.Message) when a job carries no preview.
type pushData struct {
	MessageType int             `json:"message_type"`
	Content     json.RawMessage `json:"content"`
	CreatedAt   int64           `json:"created_at"`
}

// preview returns the job's encoded list preview and the message time.
// Logic puts both in the job; only a job from before the preview field
// has its push data parsed. Undecodable push data still updates the lists
// (unread and order matter more than the preview), with an empty text.
func (f *Fanout) preview(partition int, job *queuev1.DeliverJob) ([]byte, int64, error) {
	if pj, at := job.GetPreview(), job.GetCreatedAtMs(); len(pj) > 0 && at != 0 {
		return pj, at, nil
	}
	var d pushData
	if err := json.Unmarshal(job.GetPushData(), &d); err != nil {
		f.jobLog(partition, job).Warn("push data is not a message, preview without text", zap.Error(err))
	}
	mt := int(job.GetMessageType())
	if mt == 0 {
		mt = d.MessageType
	}
	at := job.GetCreatedAtMs()
	if at == 0 {
		at = d.CreatedAt
	}
	pj, err := dialog.EncodePreview(dialog.PreviewOf(job.GetMsgId(), job.GetSenderId(), mt, d.Content))
	return pj, at, err
}

// listUpdate is one dialog.ApplyMessage of a batch.
type listUpdate struct {
	uid, cid, msgID, at int64
	count               bool
	preview             []byte // dialog.EncodePreview, once per job
}

// applyLists applies every MESSAGE job of the batch to every recipient's
// conversation list, in stream order, in pipelines of pipelineChunk
// scripts. Redis runs a pipeline in order, so this is what the calls one
// after another would do. Any failure fails the batch so it is retried
// whole; the scripts already run skip the ids they applied.
func (f *Fanout) applyLists(ctx context.Context, tasks []task) error {
	var ups []listUpdate
	for i := range tasks {
		t := &tasks[i]
		if !t.message || t.skip {
			continue
		}
		uids := Recipients(t.job)
		if len(uids) == 0 {
			continue
		}
		pj, at, err := f.preview(t.partition, t.job)
		if err != nil {
			return fmt.Errorf("fanout: update conversation lists: %w", err)
		}
		for _, uid := range uids {
			ups = append(ups, listUpdate{uid: uid, cid: t.job.GetConversationId(), msgID: t.job.GetMsgId(), at: at,
				count: uid != t.job.GetSenderId() && !t.job.GetNoUnread(), preview: pj})
		}
	}
	for lo := 0; lo < len(ups); lo += pipelineChunk {
		if err := f.applyChunk(ctx, ups[lo:min(lo+pipelineChunk, len(ups))]); err != nil {
			return fmt.Errorf("fanout: update conversation lists: %w", err)
		}
	}
	return nil
}

func (f *Fanout) applyChunk(ctx context.Context, ups []listUpdate) error {
	applied, err := f.runScripts(ctx, len(ups), func(sc redis.Scripter, i int) (bool, error) {
		u := ups[i]
		return dialog.ApplyMessageJSON(ctx, sc, u.uid, u.cid, u.msgID, u.at, u.count, u.preview)
	})
	if err != nil {
		return err
	}
	for _, a := range applied {
		f.countList(a)
	}
	return nil
}

// runScripts makes n calls of pkg/dialog's scripts in one round trip:
// call(sc, i) queues call i on sc, and each call's result is whether its
// script answered 1. When Redis lost its script cache (restart, SCRIPT
// FLUSH) the calls run again one by one, in order, on f.rdb: the first
// loads the script (EVAL), and the scripts are idempotent, so the calls
// that did run change nothing the second time.
func (f *Fanout) runScripts(ctx context.Context, n int, call func(sc redis.Scripter, i int) (bool, error)) ([]bool, error) {
	pipe := f.rdb.Pipeline()
	sc := &pipeScripter{Pipeliner: pipe}
	for i := 0; i < n; i++ {
		if _, err := call(sc, i); err != nil {
			return nil, err
		}
	}
	// Per-command errors are read below; Exec's error is the first of them.
	_, _ = pipe.Exec(ctx)
	noScript := false
	for _, c := range sc.cmds {
		if isNoScript(c.Err()) {
			noScript = true
			continue
		}
		if c.Err() != nil {
			return nil, c.Err()
		}
	}
	out := make([]bool, n)
	if noScript {
		for i := range out {
			ok, err := call(f.rdb, i)
			if err != nil {
				return nil, err
			}
			out[i] = ok
		}
		return out, nil
	}
	for i, c := range sc.cmds {
		v, err := c.Int()
		if err != nil {
			return nil, fmt.Errorf("script result: %w", err)
		}
		out[i] = v == 1
	}
	return out, nil
}

func (f *Fanout) countList(applied bool) {
	if applied {
		f.m.ListUpdates.WithLabelValues(metrics.ListApplied).Inc()
	} else {
		f.m.ListUpdates.WithLabelValues(metrics.ListSkipped).Inc()
	}
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || strings.HasPrefix(err.Error(), "NOSCRIPT"))
}

// pipeScripter queues the scripts pkg/dialog runs on a pipeline and keeps
// their commands, so one round trip carries many ApplyMessage calls with
// the very scripts dialog owns. Each EVALSHA is answered at once with a
// placeholder 0, which dialog reads as its result; the real results are
// read from the kept commands after Exec. Eval is never reached: a
// queued EVALSHA carries no NOSCRIPT error for Script.Run to fall back on.
type pipeScripter struct {
	redis.Pipeliner
	cmds []*redis.Cmd
}

func (s *pipeScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	s.cmds = append(s.cmds, s.Pipeliner.EvalSha(ctx, sha1, keys, args...))
	placeholder := redis.NewCmd(ctx)
	placeholder.SetVal(int64(0))
	return placeholder
}

// gateItem is one job's targets on one gate.
type gateItem struct {
	task    int
	targets []Target
}

// gateWork is everything a batch sends to one gate, in stream order.
type gateWork struct {
	gateID, addr string
	items        []gateItem
}

// fanOut pushes each job's command to every routed device of its
// recipients except the sending one, with one PushBatch per gate holding
// the jobs in stream order (so one device gets them in order); gates are
// called in parallel. It records in each task the targets a live gate
// could not take: the ones it dropped and all of a gate whose call failed.
// An error is a Redis failure before any push.
func (f *Fanout) fanOut(ctx context.Context, tasks []task, routes map[int64]map[string]string) error {
	stale := newStaleSet()
	var order []string
	byGate := make(map[string]*gateWork)
	for i := range tasks {
		t := &tasks[i]
		if t.skip {
			continue
		}
		targets, malformed := SelectTargets(t.job, routes)
		for _, s := range malformed {
			if stale.add(s) {
				f.log.Warn("malformed route entry removed", zap.Int64("user_id", s.UserID), zap.String("device_id", s.DeviceID))
			}
		}
		for _, tg := range targets {
			w := byGate[tg.Entry.GateID]
			if w == nil {
				w = &gateWork{gateID: tg.Entry.GateID}
				byGate[tg.Entry.GateID] = w
				order = append(order, tg.Entry.GateID)
			}
			if n := len(w.items); n > 0 && w.items[n-1].task == i {
				w.items[n-1].targets = append(w.items[n-1].targets, tg)
			} else {
				w.items = append(w.items, gateItem{task: i, targets: []Target{tg}})
			}
		}
	}

	// Resolve every gate before pushing anything, so a Redis failure here is
	// retried as a whole batch without double pushes.
	works := make([]*gateWork, 0, len(order))
	for _, g := range order {
		w := byGate[g]
		addr, err := f.gates.Addr(ctx, g)
		if errors.Is(err, gateclient.ErrGateGone) {
			// A dead gate's devices are offline, not missed: sync brings the
			// message.
			f.log.Info("gate gone, removing its routes", zap.String("gate_id", g), zap.Int("jobs", len(w.items)))
			for _, it := range w.items {
				for _, t := range it.targets {
					stale.add(Stale{UserID: t.UserID, DeviceID: t.DeviceID, Raw: t.Raw})
				}
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("fanout: %w", err)
		}
		w.addr = addr
		works = append(works, w)
	}
	for _, w := range works {
		for _, it := range w.items {
			t := &tasks[it.task]
			if t.body == nil {
				t.body = envelope.OK(f.ids.Next(), t.job.GetPushData())
			}
			t.attempted = append(t.attempted, it.targets...)
		}
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, w := range works {
		wg.Go(func() {
			missed, missing := f.pushGate(ctx, w, tasks)
			mu.Lock()
			defer mu.Unlock()
			for k, m := range missed {
				tasks[w.items[k].task].missed = append(tasks[w.items[k].task].missed, m...)
			}
			for _, s := range missing {
				stale.add(s)
			}
		})
	}
	wg.Wait()
	for _, s := range stale.list {
		f.removeRoute(ctx, f.log, s)
	}
	return nil
}

// staleSet collects the route entries to remove once per batch: later jobs
// of a batch see the same stale entries as the first.
type staleSet struct {
	seen map[Stale]struct{}
	list []Stale
}

func newStaleSet() *staleSet { return &staleSet{seen: make(map[Stale]struct{})} }

func (s *staleSet) add(st Stale) bool {
	if _, ok := s.seen[st]; ok {
		return false
	}
	s.seen[st] = struct{}{}
	s.list = append(s.list, st)
	return true
}

// missedEvents appends one MISSED_MESSAGE mailbox event per missed target
// of a MESSAGE job.
func (f *Fanout) missedEvents(events []*logicv1.MailboxEvent, partition int, job *queuev1.DeliverJob, missed []Target) []*logicv1.MailboxEvent {
	if len(missed) == 0 || f.mailbox == nil {
		return events
	}
	payload, err := protocol.Marshal(struct {
		ConversationID jsonid.ID `json:"conversation_id"`
		MsgID          jsonid.ID `json:"msg_id"`
	}{jsonid.ID(job.GetConversationId()), jsonid.ID(job.GetMsgId())})
	if err != nil {
		f.jobLog(partition, job).Error("encode mailbox payload", zap.Error(err))
		return events
	}
	for _, t := range missed {
		events = append(events, &logicv1.MailboxEvent{
			UserId: t.UserID, DeviceId: t.DeviceID, EventType: MailboxMissedMessage,
			ConversationId: job.GetConversationId(), MsgId: job.GetMsgId(), Payload: payload,
		})
	}
	return events
}

// mailboxChunk bounds the events of one AppendMailbox call.
const mailboxChunk = 512

// recordMissed appends the batch's MISSED_MESSAGE events, in one call per
// batch (chunked). Failures are logged and counted only: the device's next
// sync finds the message anyway, and the partition must move on.
func (f *Fanout) recordMissed(ctx context.Context, events []*logicv1.MailboxEvent) {
	for lo := 0; lo < len(events); lo += mailboxChunk {
		chunk := events[lo:min(lo+mailboxChunk, len(events))]
		if time.Now().UnixNano() < f.mailboxPausedUntil.Load() {
			f.m.MailboxEvents.WithLabelValues(metrics.MailboxSkipped).Add(float64(len(chunk)))
			f.log.Debug("mailbox paused after a failure, missed pushes not recorded", zap.Int("targets", len(chunk)))
			continue
		}
		if _, err := f.mailbox.AppendMailbox(ctx, chunk); err != nil {
			f.mailboxPausedUntil.Store(time.Now().Add(mailboxPause).UnixNano())
			f.m.MailboxEvents.WithLabelValues(metrics.MailboxFailed).Add(float64(len(chunk)))
			f.log.Warn("record missed pushes in the mailbox", zap.Int("events", len(chunk)), zap.Error(err))
			continue
		}
		f.m.MailboxEvents.WithLabelValues(metrics.MailboxAppended).Add(float64(len(chunk)))
	}
}

// pushGate sends a batch's items for one gate in one PushBatch and returns,
// per item, the targets it could not hand to a live connection (dropped, or
// all of them when the call failed), and the targets it reported missing
// (offline: their routes are removed).
func (f *Fanout) pushGate(ctx context.Context, w *gateWork, tasks []task) (missed [][]Target, missing []Stale) {
	log := f.log.With(zap.String("gate_id", w.gateID), zap.String("push_addr", w.addr))
	missed = make([][]Target, len(w.items))
	failAll := func() {
		for k, it := range w.items {
			missed[k] = it.targets
		}
	}
	cli, err := f.gates.Client(w.addr)
	if err != nil {
		f.m.PushErrors.Inc()
		log.Warn("push client", zap.Error(err))
		failAll()
		return missed, nil
	}
	req := &gatev1.PushBatchRequest{Items: make([]*gatev1.PushRequest, len(w.items))}
	for k, it := range w.items {
		t := &tasks[it.task]
		item := &gatev1.PushRequest{Command: t.command, Body: t.body, Targets: make([]*gatev1.Target, len(it.targets)), TraceParent: t.traceParent}
		if f.pushPartitions > 0 && t.message && !t.job.GetNoOfflinePush() {
			// The gate keeps it until PUSH_ACK and reports it if the
			// connection goes away first (an offline notification).
			item.NotifyMsgId, item.NotifyConversationId = t.job.GetMsgId(), t.job.GetConversationId()
		}
		for j, tg := range it.targets {
			item.Targets[j] = &gatev1.Target{ConnId: tg.Entry.ConnID, UserId: tg.UserID, DeviceId: tg.DeviceID}
		}
		req.Items[k] = item
	}
	pctx, cancel := context.WithTimeout(ctx, f.pushTimeout)
	defer cancel()
	start := time.Now()
	var replies []*gatev1.PushReply
	for _, chunk := range splitPushBatch(req, rpclimit.PushBatchBytes) {
		r, cerr := pushBatch(pctx, cli, chunk)
		if cerr != nil {
			err = cerr
			break
		}
		replies = append(replies, r...)
	}
	f.m.PushSeconds.Observe(time.Since(start).Seconds())
	if err == nil && len(replies) != len(w.items) {
		err = fmt.Errorf("gate answered %d replies for %d items", len(replies), len(w.items))
	}
	if err != nil {
		// The gate may have moved, so look its address up again next time.
		// Whether it wrote any frame is unknown: every target counts as
		// missed, and a duplicate is de-duplicated by msg_id on the client.
		f.m.PushErrors.Inc()
		f.gates.Forget(w.gateID)
		log.Warn("push failed, targets treated as missed", zap.Int("jobs", len(w.items)), zap.Error(err))
		failAll()
		return missed, nil
	}
	// The seam mid-push: this gate has written the batch to its devices,
	// the batch's other gates (pushed in parallel) may or may not have,
	// and nothing is acked. A crash here must cost duplicates at most.
	// Only "exit"/"sleep" make sense; an "error" is ignored like any
	// push-side failure.
	_ = failpoint.Inject("deliver/job/midPush")
	for k, it := range w.items {
		reply := replies[k]
		f.m.Delivered.Add(float64(reply.GetDelivered()))
		f.m.Dropped.Add(float64(len(reply.GetDropped())))
		if len(reply.GetDropped()) == 0 && len(reply.GetMissing()) == 0 {
			continue
		}
		byKey := make(map[targetKey]Target, len(it.targets))
		for _, t := range it.targets {
			byKey[targetKey{t.Entry.ConnID, t.UserID, t.DeviceID}] = t
		}
		for _, dt := range reply.GetDropped() {
			if t, ok := byKey[targetKey{dt.GetConnId(), dt.GetUserId(), dt.GetDeviceId()}]; ok {
				missed[k] = append(missed[k], t)
			}
		}
		for _, mt := range reply.GetMissing() {
			f.m.Missing.Inc()
			t, ok := byKey[targetKey{mt.GetConnId(), mt.GetUserId(), mt.GetDeviceId()}]
			if !ok {
				continue // not one we asked for: never delete on a gate's word alone
			}
			missing = append(missing, Stale{UserID: t.UserID, DeviceID: t.DeviceID, Raw: t.Raw})
		}
	}
	return missed, missing
}

// splitPushBatch cuts a batch into requests of at most maxBytes each (a
// single larger item goes alone), keeping item order: the calls are made
// one after another, so each connection still gets its frames in order,
// and no call nears the links' gRPC message limit.
func splitPushBatch(req *gatev1.PushBatchRequest, maxBytes int) []*gatev1.PushBatchRequest {
	var out []*gatev1.PushBatchRequest
	cur, size := &gatev1.PushBatchRequest{}, 0
	for _, item := range req.GetItems() {
		// An item's share of the request: its own size and its field tag
		// and length (at most 1 + 5 bytes).
		n := proto.Size(item) + 6
		if len(cur.Items) > 0 && size+n > maxBytes {
			out = append(out, cur)
			cur, size = &gatev1.PushBatchRequest{}, 0
		}
		cur.Items = append(cur.Items, item)
		size += n
	}
	if len(cur.Items) > 0 || len(out) == 0 {
		out = append(out, cur)
	}
	return out
}

// pushBatch calls PushBatch, or, on a gate older than it (Unimplemented:
// nothing was written), the items one Push at a time in order.
func pushBatch(ctx context.Context, cli gatev1.PushClient, req *gatev1.PushBatchRequest) ([]*gatev1.PushReply, error) {
	reply, err := cli.PushBatch(ctx, req)
	if err == nil {
		return reply.GetReplies(), nil
	}
	if status.Code(err) != codes.Unimplemented {
		return nil, fmt.Errorf("push batch: %w", err)
	}
	out := make([]*gatev1.PushReply, len(req.GetItems()))
	for i, item := range req.GetItems() {
		r, err := cli.Push(ctx, item)
		if err != nil {
			return nil, fmt.Errorf("push item %d of %d: %w", i, len(out), err)
		}
		out[i] = r
	}
	return out, nil
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

// traceTasks starts deliver's span of each traced job of a round (a child
// of logic's span, from the job's trace_parent) and returns what ends them
// with the round's outcome.
func traceTasks(ctx context.Context, tasks []task) func(*error) {
	for i := range tasks {
		t := &tasks[i]
		if t.job.GetTraceParent() == "" {
			continue
		}
		sctx, span := tracing.Tracer().Start(tracing.WithParent(ctx, t.job.GetTraceParent()), "deliver.job",
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(tracing.AttrMsgID.Int64(t.job.GetMsgId()), attribute.Int("spark.partition", t.partition),
				attribute.Int("spark.recipients", len(t.job.GetRecipients()))))
		t.span, t.traceParent = span, tracing.Parent(sctx)
	}
	return func(err *error) {
		for i := range tasks {
			if sp := tasks[i].span; sp != nil {
				if *err != nil {
					sp.RecordError(*err)
				}
				sp.End()
				tasks[i].span, tasks[i].traceParent = nil, ""
			}
		}
	}
}
