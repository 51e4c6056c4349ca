package server

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sparkim/spark/pkg/buildversion"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/tracing"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
)

// pushService is gate.v1.Push: deliver and logic write frames to this
// gate's connections through it.
type pushService struct {
	gatev1.UnimplementedPushServer
	sess   *sessions
	gateID string
	// drain is Server.Drain.
	drain func(window time.Duration) int
}

// Drain starts draining the gate (Server.Drain) and answers at once.
func (p *pushService) Drain(_ context.Context, req *gatev1.DrainRequest) (*gatev1.DrainReply, error) {
	if req.WindowMs < 0 {
		return nil, status.Error(codes.InvalidArgument, "window_ms must not be negative")
	}
	n := p.drain(time.Duration(req.WindowMs) * time.Millisecond)
	return &gatev1.DrainReply{Connections: uint32(n)}, nil
}

func checkCommand(cmd uint32) (uint16, error) {
	if cmd == 0 || cmd > 0xFFFF {
		return 0, status.Errorf(codes.InvalidArgument, "command %d out of range", cmd)
	}
	return uint16(cmd), nil
}

// Push writes one frame to many connections. The body is shared; only the
// 23-byte header differs per target (its SequenceID).
func (p *pushService) Push(ctx context.Context, req *gatev1.PushRequest) (*gatev1.PushReply, error) {
	cmd, err := checkCommand(req.Command)
	if err != nil {
		return nil, err
	}
	return p.pushItem(ctx, cmd, req)
}

// PushBatch applies its items in order, each exactly like Push, so frames
// reach one connection in item order. Every command is checked before any
// frame is queued: a bad item rejects the whole batch untouched rather
// than leaving the caller to guess which items went out.
func (p *pushService) PushBatch(ctx context.Context, req *gatev1.PushBatchRequest) (*gatev1.PushBatchReply, error) {
	cmds := make([]uint16, len(req.Items))
	for i, it := range req.Items {
		cmd, err := checkCommand(it.GetCommand())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "item %d: %v", i, status.Convert(err).Message())
		}
		cmds[i] = cmd
	}
	reply := &gatev1.PushBatchReply{Replies: make([]*gatev1.PushReply, len(req.Items))}
	for i, it := range req.Items {
		r, err := p.pushItem(ctx, cmds[i], it)
		if err != nil {
			return nil, err
		}
		reply.Replies[i] = r
	}
	return reply, nil
}

// pushItem queues one push's body to each of its targets.
func (p *pushService) pushItem(ctx context.Context, cmd uint16, req *gatev1.PushRequest) (*gatev1.PushReply, error) {
	reply := &gatev1.PushReply{}
	if req.TraceParent != "" && tracing.On() {
		// The last hop of a send's trace: queued to the devices'
		// connections (their writes follow on the event loops).
		_, span := tracing.Tracer().Start(tracing.WithParent(ctx, req.TraceParent), "gate.push",
			trace.WithAttributes(attribute.Int("spark.command", int(cmd)), attribute.Int("spark.targets", len(req.Targets))))
		if req.NotifyMsgId != 0 {
			span.SetAttributes(tracing.AttrMsgID.Int64(req.NotifyMsgId))
		}
		defer func() {
			span.SetAttributes(attribute.Int("spark.delivered", int(reply.Delivered)))
			span.End()
		}()
	}
	for _, t := range req.Targets {
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		c := p.sess.table.Get(t.ConnId)
		if c != nil && c.state.Load() == stateConnecting {
			// Logic writes the route while it answers AUTH, before this
			// gate binds the session: a push in between finds the
			// connection not yet bound. Reporting it missing would make
			// deliver delete a live route, and every later push would miss
			// the device. Dropped keeps the route; the device syncs right
			// after its AUTH answer, and a connection that never binds
			// removes its route when it closes.
			reply.Dropped = append(reply.Dropped, t)
			continue
		}
		if c == nil || !c.matches(t.UserId, t.DeviceId) {
			reply.Missing = append(reply.Missing, t)
			continue
		}
		switch p.sess.push(c, cmd, req.Body, req.NotifyMsgId, req.NotifyConversationId) {
		case queued:
			reply.Delivered++
		case queueFull:
			reply.Dropped = append(reply.Dropped, t)
		case queueClosed:
			reply.Missing = append(reply.Missing, t)
		}
	}
	return reply, nil
}

// push queues a server-initiated frame: RequestID 0 and the connection's
// next SequenceID, which PUSH_ACK echoes. A push naming notifyMsg (a
// MESSAGE that may notify) is remembered until its PUSH_ACK.
func (s *sessions) push(c *Conn, cmd uint16, body []byte, notifyMsg, notifyConv int64) enqueueResult {
	seq := c.nextPushSeq()
	kind := kindPush
	if cmd == protocol.CmdSignal {
		kind = kindSignal
	}
	res := c.out.Enqueue(outFrame{
		hdr:  frame.Header{Command: cmd, SequenceID: seq},
		body: body,
		kind: kind,
	})
	switch {
	case res == queueFull:
		s.metrics.PushesDropped.Add(1)
	case res == queued && notifyMsg > 0:
		c.trackPush(seq, notifyMsg, notifyConv)
	}
	return res
}

// Kick writes KICK {"reason"} to each matching target and closes it after
// the write. The connection leaves the table at once, so pushes racing the
// kick already report it missing.
func (p *pushService) Kick(ctx context.Context, req *gatev1.KickRequest) (*gatev1.KickReply, error) {
	reason := req.Reason
	if reason == "" {
		reason = "kicked"
	}
	body, err := p.sess.kickBody(reason)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	reply := &gatev1.KickReply{}
	for _, t := range req.Targets {
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		c := p.sess.table.Get(t.ConnId)
		if c != nil && c.state.Load() == stateConnecting && c.authInflight.Load() {
			// Its AUTH answer is on the way (logic wrote the route, then a
			// newer AUTH of the device replaced it): kick it once bound,
			// or two sessions of one device would live side by side.
			c.deferKick(&deferredKick{userID: t.UserId, deviceID: t.DeviceId, reason: reason, body: body})
			if c.Authenticated() {
				// The bind won the race and may have looked before the
				// kick was recorded: whoever takes it, kicks.
				if k := c.takeDeferredKick(); k != nil {
					p.sess.kick(c, k.reason, k.body)
				}
			}
			reply.Kicked++
			continue
		}
		if c == nil || !c.matches(t.UserId, t.DeviceId) {
			continue
		}
		if p.sess.kick(c, reason, body) {
			reply.Kicked++
		}
	}
	return reply, nil
}

// kickBody is the body of KICK {"reason"}.
func (s *sessions) kickBody(reason string) ([]byte, error) {
	data, err := protocol.Marshal(protocol.Kick{Reason: reason})
	if err != nil {
		return nil, fmt.Errorf("encode kick: %w", err)
	}
	return envelope.OK(s.ids.Next(), data), nil
}

// kick queues KICK as c's last frame and takes c out of the table; it
// reports false when c had already left it (closed or kicked).
func (s *sessions) kick(c *Conn, reason string, body []byte) bool {
	if !s.table.Remove(c) {
		return false
	}
	c.setKicked(reason)
	res := c.out.Enqueue(outFrame{
		hdr:   frame.Header{Command: protocol.CmdKick, SequenceID: c.nextPushSeq()},
		body:  body,
		kind:  kindControl,
		close: true,
	})
	if res != queued {
		c.Close(closeKicked)
	}
	return true
}

// Broadcast writes one frame to every authenticated connection.
func (p *pushService) Broadcast(ctx context.Context, req *gatev1.BroadcastRequest) (*gatev1.BroadcastReply, error) {
	cmd, err := checkCommand(req.Command)
	if err != nil {
		return nil, err
	}
	reply := &gatev1.BroadcastReply{}
	p.sess.table.Range(func(c *Conn) bool {
		if ctx.Err() != nil {
			return false
		}
		if !c.Authenticated() {
			return true
		}
		switch p.sess.push(c, cmd, req.Body, 0, 0) {
		case queued:
			reply.Delivered++
		case queueFull:
			reply.Dropped++
		}
		return true
	})
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return reply, nil
}

// Stats reports the gate's counters.
func (p *pushService) Stats(context.Context, *gatev1.StatsRequest) (*gatev1.StatsReply, error) {
	m := p.sess.metrics
	return &gatev1.StatsReply{
		GateId:        p.gateID,
		Connections:   uint64(max(m.Connections.Load(), 0)),
		Authenticated: uint64(max(m.Authenticated.Load(), 0)),
		FramesIn:      m.FramesIn.Load(),
		FramesOut:     m.FramesOut.Load(),
		PushesDropped: m.PushesDropped.Load(),
		BusyRejects:   m.BusyRejects.Load(),
		Version:       buildversion.String(),
	}, nil
}
