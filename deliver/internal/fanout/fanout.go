// Package fanout turns one deliver job into Push RPCs: recipients → route
// table → targets (every device except the sending one) → one Push per gate.
// Offline devices and unreachable gates are skipped, never retried in a
// loop: the client catches up by sync, and a blocked partition would delay
// every conversation behind it.
package fanout

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/deliver/internal/gateclient"
	"github.com/sparkim/spark/deliver/internal/metrics"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/failpoint"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
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

// Fanout processes jobs. It is safe for concurrent use by partition workers.
type Fanout struct {
	rdb         redis.Cmdable
	gates       Gates
	ids         *envelope.IDSource
	pushTimeout time.Duration
	log         *zap.Logger
	m           *metrics.Metrics
	cad         *redis.Script
}

// New returns a Fanout.
func New(rdb redis.Cmdable, gates Gates, pushTimeout time.Duration, log *zap.Logger, m *metrics.Metrics) *Fanout {
	if pushTimeout <= 0 {
		pushTimeout = 3 * time.Second
	}
	return &Fanout{
		rdb: rdb, gates: gates, ids: envelope.NewIDSource(), pushTimeout: pushTimeout,
		log: log, m: m, cad: redis.NewScript(route.CompareAndDeleteScript),
	}
}

// Process fans job out. A returned error is a Redis failure before any push
// was sent; the caller retries the job later. Push failures are not errors.
func (f *Fanout) Process(ctx context.Context, partition int, job *queuev1.DeliverJob) error {
	if err := failpoint.Inject("deliver/job/beforePush"); err != nil {
		return err
	}
	if ms := job.GetEnqueuedAtMs(); ms > 0 {
		f.m.QueueLag.Observe(time.Since(time.UnixMilli(ms)).Seconds())
	}
	log := f.log.With(zap.Int64("msg_id", job.GetMsgId()), zap.Int64("conversation_id", job.GetConversationId()), zap.Int("partition", partition))

	n, err := f.rdb.Exists(ctx, rediskey.DeliverDone(partition, job.GetMsgId())).Result()
	if err != nil {
		return fmt.Errorf("fanout: check done marker: %w", err)
	}
	if n > 0 {
		f.m.Jobs.WithLabelValues(metrics.ResultDuplicate).Inc()
		log.Debug("job already delivered")
		return nil
	}

	var command uint32
	switch job.GetKind() {
	case queuev1.JobKind_JOB_KIND_MESSAGE, queuev1.JobKind_JOB_KIND_UNSPECIFIED:
		command = uint32(protocol.CmdMessage)
	default:
		// A newer logic may enqueue kinds this deliver does not know; pushing
		// them as MESSAGE would show garbage, and sync still has the truth.
		f.m.Jobs.WithLabelValues(metrics.ResultUnknown).Inc()
		log.Warn("unknown job kind, dropped", zap.Int32("kind", int32(job.GetKind())))
		return nil
	}

	routes, err := f.lookupRoutes(ctx, Recipients(job))
	if err != nil {
		return err
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
			log.Info("gate gone, removing its routes", zap.String("gate_id", gateID), zap.Int("targets", len(ts)))
			for _, t := range ts {
				f.removeRoute(ctx, log, Stale{UserID: t.UserID, DeviceID: t.DeviceID, Raw: t.Raw})
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("fanout: %w", err)
		}
		batches = append(batches, gateBatch{gateID: gateID, addr: addr, targets: ts})
	}
	if len(batches) == 0 {
		f.m.Jobs.WithLabelValues(metrics.ResultPushed).Inc()
		return nil
	}

	body := envelope.OK(f.ids.Next(), job.GetPushData())
	var wg sync.WaitGroup
	for _, b := range batches {
		wg.Go(func() { f.push(ctx, log, b.gateID, b.addr, command, body, b.targets) })
	}
	wg.Wait()
	f.m.Jobs.WithLabelValues(metrics.ResultPushed).Inc()
	return nil
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

func (f *Fanout) push(ctx context.Context, log *zap.Logger, gateID, addr string, command uint32, body []byte, ts []Target) {
	log = log.With(zap.String("gate_id", gateID), zap.String("push_addr", addr))
	cli, err := f.gates.Client(addr)
	if err != nil {
		f.m.PushErrors.Inc()
		log.Warn("push client", zap.Error(err))
		return
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
		// The devices count as offline: sync brings the message. The gate may
		// have moved, so look its address up again next time.
		f.m.PushErrors.Inc()
		f.gates.Forget(gateID)
		log.Warn("push failed, targets treated as offline", zap.Int("targets", len(ts)), zap.Error(err))
		return
	}
	f.m.Delivered.Add(float64(reply.GetDelivered()))
	f.m.Dropped.Add(float64(len(reply.GetDropped())))
	for _, mt := range reply.GetMissing() {
		f.m.Missing.Inc()
		t, ok := byKey[targetKey{mt.GetConnId(), mt.GetUserId(), mt.GetDeviceId()}]
		if !ok {
			continue // not one we asked for: never delete on a gate's word alone
		}
		f.removeRoute(ctx, log, Stale{UserID: t.UserID, DeviceID: t.DeviceID, Raw: t.Raw})
	}
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
