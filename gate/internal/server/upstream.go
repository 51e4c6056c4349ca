package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/retry"
	"github.com/sparkim/spark/pkg/rpclimit"
	"github.com/sparkim/spark/pkg/tracing"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// closedReserve is send-queue room beyond max_inflight for Closed
// notifications, which are not requests and so not bounded by in-flight.
const closedReserve = 1024

// RebindBatch is the most bindings one Rebind frame carries.
const RebindBatch = 500

// responder is what the upstream calls back into the server with.
type responder interface {
	// onResponse handles logic's answer to p.
	onResponse(ctx context.Context, resp *logicv1.Response, p *pendingReq)
	// onBusy answers p with 50301 because logic will not answer it.
	onBusy(ctx context.Context, p *pendingReq)
	// rangeBindings calls fn for every authenticated connection until fn
	// returns false. It must not block on anything but fn.
	rangeBindings(fn func(*logicv1.Binding) bool)
}

// upLink is the part of a client connection the upstream sees: the
// session embeds one per connection and hands the upstream a pointer to
// it, never the connection itself, and the upstream answers only through
// its responder.
type upLink struct {
	id     uint64
	realIP string
	// stream is the stream the connection's requests are pinned to.
	stream atomic.Pointer[stream]
	// inflight counts the connection's requests awaiting logic, bounded
	// by gate.max_inflight_per_conn.
	inflight atomic.Int32
}

// UpstreamConfig configures the streams to logic.
type UpstreamConfig struct {
	GateID        string
	PushAdvertise string
	// ClientAddrs are the addresses clients connect to, sent in Hello so
	// logic can list the gates (the business API's ListGates).
	ClientAddrs     []string
	Secret          string
	LogicAddrs      []string
	StreamsPerLogic int
	MaxInflight     int
	// MaxPerConn bounds one connection's share of MaxInflight.
	MaxPerConn     int
	RequestTimeout time.Duration
}

// Upstream keeps the Gateway.Connect streams to every logic instance and
// forwards client requests on them without ever blocking the caller.
type Upstream struct {
	cfg     UpstreamConfig
	log     *zap.Logger
	metrics *Metrics
	handler responder

	conns   []*grpc.ClientConn
	streams []*stream

	draining chan struct{}
	drainMu  sync.Once
	wg       sync.WaitGroup
}

// stream is one Gateway.Connect slot: it reconnects with backoff and keeps
// its in-flight set across reconnects (a broken stream fails it first).
type stream struct {
	u      *Upstream
	addr   string
	idx    int
	client logicv1.GatewayClient

	up atomic.Bool
	// batches is set while the connected logic has said (Welcome) that it
	// reads GateBatch frames; until then every item goes in its own frame.
	batches atomic.Bool
	sendq   chan upItem
	// buf is the send loop's reusable batch (only that goroutine uses it).
	buf  []upItem
	infl *inflight
}

// upItem is one queued Request or Closed (exactly one is set). The queue
// holds these rather than frames so a batch wraps each item once, and a
// lone item goes out as the same frame as before batching.
type upItem struct {
	req    *logicv1.Request
	closed *logicv1.Closed
}

// NewUpstream prepares clients for every logic address; no I/O happens
// until Start.
func NewUpstream(cfg UpstreamConfig, log *zap.Logger, m *Metrics, h responder) (*Upstream, error) {
	if len(cfg.LogicAddrs) == 0 {
		return nil, errors.New("upstream: gate.logic_addrs is empty")
	}
	if cfg.StreamsPerLogic < 1 || cfg.MaxInflight < 1 || cfg.MaxPerConn < 1 {
		return nil, fmt.Errorf("upstream: gate.streams_per_logic (%d), gate.max_inflight (%d) and gate.max_inflight_per_conn (%d) must be at least 1",
			cfg.StreamsPerLogic, cfg.MaxInflight, cfg.MaxPerConn)
	}
	u := &Upstream{cfg: cfg, log: log, metrics: m, handler: h, draining: make(chan struct{})}
	for _, addr := range cfg.LogicAddrs {
		cc, err := grpc.NewClient(addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			clusterauth.Credentials(cfg.Secret),
			// The same message limits as logic's end of the stream, so
			// an answer logic may send is one the gate accepts.
			rpclimit.DialOption(),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 20 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		)
		if err != nil {
			u.closeConns()
			return nil, fmt.Errorf("upstream: dial %s: %w", addr, err)
		}
		u.conns = append(u.conns, cc)
		client := logicv1.NewGatewayClient(cc)
		for i := 0; i < cfg.StreamsPerLogic; i++ {
			u.streams = append(u.streams, &stream{
				u: u, addr: addr, idx: i, client: client,
				sendq: make(chan upItem, cfg.MaxInflight+closedReserve),
				infl:  newInflight(cfg.MaxInflight),
			})
		}
	}
	return u, nil
}

// Start runs every stream and the request-timeout scanner until ctx ends
// or Close is called.
func (u *Upstream) Start(ctx context.Context) {
	for _, st := range u.streams {
		u.wg.Add(1)
		go func() {
			defer u.wg.Done()
			st.run(ctx)
		}()
	}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		u.expireLoop(ctx)
	}()
}

// Live returns the number of connected streams.
func (u *Upstream) Live() int {
	n := 0
	for _, st := range u.streams {
		if st.up.Load() {
			n++
		}
	}
	return n
}

// Inflight returns the number of requests waiting for logic.
func (u *Upstream) Inflight() int {
	n := 0
	for _, st := range u.streams {
		n += st.infl.len()
	}
	return n
}

// pick returns the stream c is pinned to, pinning it to a live one (hash of
// its id over the live streams) when it has none or its stream is down.
func (u *Upstream) pick(c *upLink) *stream {
	if st := c.stream.Load(); st != nil && st.up.Load() {
		return st
	}
	st := u.anyLive(c.id)
	if st != nil {
		c.stream.Store(st)
	}
	return st
}

// anyLive returns the live stream connID hashes to, nil when none is up.
func (u *Upstream) anyLive(connID uint64) *stream {
	live := u.Live()
	if live == 0 {
		return nil
	}
	nth := int((connID * 0x9E3779B97F4A7C15 >> 33) % uint64(live))
	for _, st := range u.streams {
		if !st.up.Load() {
			continue
		}
		if nth == 0 {
			return st
		}
		nth--
	}
	// The live set shrank while we counted; take any live stream.
	for _, st := range u.streams {
		if st.up.Load() {
			return st
		}
	}
	return nil
}

// Forward queues one client frame for logic. It reports false when the gate
// must answer 50301 itself: no live stream, the connection at its own
// in-flight cap, the stream's in-flight full or send queue full. It never
// blocks.
func (u *Upstream) Forward(ctx context.Context, c *upLink, sess *logicv1.Session, h frame.Header, body []byte) bool {
	if ctx.Err() != nil {
		return false
	}
	st := u.pick(c)
	if st == nil {
		return false
	}
	// The connection's own cap is taken first, so a connection at it never
	// holds one of the stream's shared slots for its excess.
	if int(c.inflight.Add(1)) > u.cfg.MaxPerConn {
		c.inflight.Add(-1)
		u.metrics.ConnInflightRejects.Add(1)
		return false
	}
	p := &pendingReq{
		key:     reqKey{conn: c.id, req: h.RequestID, seq: h.SequenceID},
		command: h.Command,
		sent:    time.Now(),
		st:      st,
		slots:   &c.inflight,
	}
	var traceParent string
	if h.Command == protocol.CmdSendMessage && tracing.On() {
		// A send's trace starts here; the span ends when the request
		// leaves the in-flight set (pendingReq.release). Set before the
		// request is in the set, where the expiry may release it.
		sctx, span := tracing.Tracer().Start(ctx, "gate.send", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(tracing.AttrConnID.Int64(int64(c.id)), tracing.AttrUserID.Int64(sess.GetUserId())))
		p.span, traceParent = span, tracing.Parent(sctx)
	}
	if !st.infl.add(p) {
		c.inflight.Add(-1)
		if p.span != nil {
			p.span.End()
		}
		return false
	}
	it := upItem{req: &logicv1.Request{
		ConnId:      c.id,
		Session:     sess,
		RealIp:      c.realIP,
		Command:     uint32(h.Command),
		RequestId:   h.RequestID,
		SequenceId:  h.SequenceID,
		Body:        body,
		TraceParent: traceParent,
	}}
	select {
	case st.sendq <- it:
		return true
	default:
		// When remove fails the stream broke meanwhile and already
		// answered the request; answering again would duplicate it.
		return !st.infl.remove(p)
	}
}

// SendClosed tells logic an authenticated connection is gone, on the stream
// its requests used so logic sees it after them.
func (u *Upstream) SendClosed(c *upLink, sess *logicv1.Session, reason string, unacked []*logicv1.UnackedPush) {
	u.sendClosedOn(u.pick(c), c.id, sess, reason, unacked)
}

// SendClosedAfter tells logic that the connection p came from is gone,
// on the stream that answered p: logic bound a session to a connection
// that closed meanwhile.
func (u *Upstream) SendClosedAfter(p *pendingReq, connID uint64, sess *logicv1.Session, reason string) {
	u.sendClosedOn(p.st, connID, sess, reason, nil)
}

// sendClosedOn queues a Closed on st (any live stream when st is down).
func (u *Upstream) sendClosedOn(st *stream, connID uint64, sess *logicv1.Session, reason string, unacked []*logicv1.UnackedPush) {
	if st == nil || !st.up.Load() {
		if st = u.anyLive(connID); st == nil {
			u.metrics.ClosedDropped.Add(1)
			return
		}
	}
	it := upItem{closed: &logicv1.Closed{ConnId: connID, Session: sess, Reason: reason, Unacked: unacked}}
	select {
	case st.sendq <- it:
	default:
		u.metrics.ClosedDropped.Add(1)
	}
}

// Close stops the streams: each flushes what is queued, half-closes so
// logic sees the end after the last Closed, and waits for logic to end it,
// all within ctx.
func (u *Upstream) Close(ctx context.Context) {
	u.drainMu.Do(func() { close(u.draining) })
	done := make(chan struct{})
	go func() { u.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	u.closeConns()
}

func (u *Upstream) closeConns() {
	for _, cc := range u.conns {
		_ = cc.Close()
	}
}

func (u *Upstream) expireLoop(ctx context.Context) {
	tick := min(max(u.cfg.RequestTimeout/10, 5*time.Millisecond), 250*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-u.draining:
			return
		case now := <-t.C:
			cutoff := now.Add(-u.cfg.RequestTimeout)
			for _, st := range u.streams {
				for _, p := range st.infl.expire(cutoff) {
					u.handler.onBusy(ctx, p)
				}
			}
		}
	}
}

func (st *stream) log() *zap.Logger {
	return st.u.log.With(zap.String("logic", st.addr), zap.Int("stream", st.idx))
}

// run keeps the stream connected until the upstream drains or ctx ends.
func (st *stream) run(ctx context.Context) {
	// Jitter keeps many gates from reconnecting to a restarted logic in
	// lockstep.
	bo := retry.NewBackoff(retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2, Jitter: true})
	failures := 0
	for {
		began := time.Now()
		wasUp := false
		err := st.session(ctx, &wasUp)
		st.markDown(ctx)
		select {
		case <-ctx.Done():
			return
		case <-st.u.draining:
			return
		default:
		}
		if wasUp || time.Since(began) > 10*time.Second {
			bo.Reset()
			failures = 0
		}
		failures++
		wait := bo.Next()
		// A logic that stays down would otherwise log every few seconds
		// per stream; warn on the change and then now and then.
		if failures == 1 || failures%30 == 0 {
			st.log().Warn("logic stream down", zap.Error(err), zap.Int("attempts", failures), zap.Duration("retry_in", wait))
		} else {
			st.log().Debug("logic stream still down", zap.Error(err), zap.Int("attempts", failures))
		}
		select {
		case <-ctx.Done():
			return
		case <-st.u.draining:
			return
		case <-time.After(wait):
		}
	}
}

// markDown fails everything pending on the stream: logic will not answer
// requests of a broken stream.
func (st *stream) markDown(ctx context.Context) {
	if st.up.Swap(false) {
		st.u.metrics.StreamsUp.Add(-1)
	}
	for _, p := range st.infl.drain() {
		st.u.handler.onBusy(ctx, p)
	}
	// Queued requests were just answered; sending them on the next
	// connection would only produce late responses. Closed frames are lost
	// with them; logic's route cleanup covers that (deliver reports the
	// connection missing).
	for {
		select {
		case it := <-st.sendq:
			if it.closed != nil {
				st.u.metrics.ClosedDropped.Add(1)
			}
		default:
			return
		}
	}
}

// session runs one connection of the stream until it breaks.
func (st *stream) session(ctx context.Context, wasUp *bool) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := st.client.Connect(sctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	hello := &logicv1.GateFrame{Kind: &logicv1.GateFrame_Hello{Hello: &logicv1.Hello{
		GateId: st.u.cfg.GateID, PushAddr: st.u.cfg.PushAdvertise, ClientAddrs: st.u.cfg.ClientAddrs,
		Batches: true,
	}}}
	// A new session starts unbatched: this logic may be one that never
	// answers with Welcome.
	st.batches.Store(false)
	if err := cs.Send(hello); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	// Rebind frames have their own unbuffered channel, so a resync of many
	// connections waits for the send loop instead of filling sendq, whose
	// room belongs to requests and Closed notifications.
	resync := make(chan struct{}, 1)
	rebindq := make(chan *logicv1.GateFrame)
	recvErr := make(chan error, 1)
	go func() { recvErr <- st.recvLoop(sctx, cs, resync) }()
	go st.rebindLoop(sctx, resync, rebindq)

	*wasUp = true
	st.up.Store(true)
	st.u.metrics.StreamsUp.Add(1)
	st.log().Info("logic stream up")

	for {
		select {
		case <-sctx.Done():
			return sctx.Err()
		case err := <-recvErr:
			return fmt.Errorf("recv: %w", err)
		case it := <-st.sendq:
			if err := st.sendQueued(cs, it); err != nil {
				return fmt.Errorf("send: %w", err)
			}
		case f := <-rebindq:
			if err := cs.Send(f); err != nil {
				return fmt.Errorf("send rebind: %w", err)
			}
		case <-st.u.draining:
			return st.finish(cs, recvErr)
		}
	}
}

// finish flushes the send queue, half-closes and waits briefly for logic to
// answer what is in flight and end the stream.
func (st *stream) finish(cs grpc.BidiStreamingClient[logicv1.GateFrame, logicv1.LogicFrame], recvErr chan error) error {
	for {
		select {
		case it := <-st.sendq:
			if err := st.sendQueued(cs, it); err != nil {
				return fmt.Errorf("send while draining: %w", err)
			}
			continue
		default:
		}
		break
	}
	if err := cs.CloseSend(); err != nil {
		return fmt.Errorf("close send: %w", err)
	}
	select {
	case err := <-recvErr:
		return err
	case <-time.After(time.Second):
		return errors.New("logic did not end the stream after half-close")
	}
}

// recvLoop hands logic's answers to the server. A Resync only sets a flag
// for rebindLoop, so the answers behind it are never held up.
func (st *stream) recvLoop(ctx context.Context, cs grpc.BidiStreamingClient[logicv1.GateFrame, logicv1.LogicFrame], resync chan<- struct{}) error {
	for {
		f, err := cs.Recv()
		if err != nil {
			return err
		}
		switch k := f.Kind.(type) {
		case *logicv1.LogicFrame_Response:
			st.answer(ctx, k.Response)
		case *logicv1.LogicFrame_Batch:
			for _, resp := range k.Batch.GetResponses() {
				st.answer(ctx, resp)
			}
		case *logicv1.LogicFrame_Resync:
			st.u.metrics.Resyncs.Add(1)
			select {
			case resync <- struct{}{}:
			default: // a pass is already due; it will report everything
			}
		case *logicv1.LogicFrame_Welcome:
			st.batches.Store(k.Welcome.GetBatches())
		}
	}
}

// answer hands one Response to the server, unless its request was already
// answered 50301 (timeout or a broken stream).
func (st *stream) answer(ctx context.Context, resp *logicv1.Response) {
	if resp == nil {
		return
	}
	p := st.infl.take(reqKey{conn: resp.ConnId, req: resp.RequestId, seq: resp.SequenceId})
	if p == nil {
		st.u.metrics.LateResponses.Add(1)
		return
	}
	st.u.metrics.ForwardLatency.Observe(time.Since(p.sent).Seconds())
	st.u.handler.onResponse(ctx, resp, p)
}

// rebindLoop runs one pass over the authenticated connections per Resync
// request (requests arriving during a pass are coalesced into one more
// pass, which covers connections bound since), until the session ends.
func (st *stream) rebindLoop(ctx context.Context, resync <-chan struct{}, out chan<- *logicv1.GateFrame) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-resync:
		}
		n, ok := st.rebind(ctx, out)
		if !ok {
			st.log().Info("resync abandoned: stream ended", zap.Int("bindings_sent", n))
			return
		}
		st.log().Info("resync done", zap.Int("bindings", n))
	}
}

// rebind sends Rebind frames of at most RebindBatch bindings for every
// authenticated connection, waiting for the send loop to take each. It
// reports how many bindings it sent and false when the stream ended first.
func (st *stream) rebind(ctx context.Context, out chan<- *logicv1.GateFrame) (int, bool) {
	sent := 0
	batch := make([]*logicv1.Binding, 0, RebindBatch)
	flush := func() bool {
		if len(batch) == 0 {
			return true
		}
		f := &logicv1.GateFrame{Kind: &logicv1.GateFrame_Rebind{Rebind: &logicv1.Rebind{Bindings: batch}}}
		select {
		case out <- f:
		case <-ctx.Done():
			return false
		}
		sent += len(batch)
		st.u.metrics.RebindsSent.Add(uint64(len(batch)))
		batch = make([]*logicv1.Binding, 0, RebindBatch)
		return true
	}
	ok := true
	st.u.handler.rangeBindings(func(b *logicv1.Binding) bool {
		batch = append(batch, b)
		if len(batch) == RebindBatch {
			ok = flush()
		}
		return ok
	})
	if ok {
		ok = flush()
	}
	return sent, ok
}
