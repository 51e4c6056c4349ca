// Package gateway is logic.v1.Gateway, the client protocol's front door:
// the bidi streams from the gates, the per-connection ordered dispatch of
// their requests, and the Handler that answers each one through the
// command table (commands.go), the client bodies' mapping onto the domain
// types (logic/internal/clientwire) and one error table (errors.go).
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/logic/internal/gatepush"
	"github.com/sparkim/spark/pkg/batch"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// outboundBuffer is the per-stream queue of responses awaiting Send.
const outboundBuffer = 1024

// eofDrain bounds how long a stream the gate half-closed waits for its
// in-flight answers.
const eofDrain = 5 * time.Second

// connKey names a client connection across the streams of its gate.
type connKey struct {
	gate string
	conn uint64
}

// Server implements logicv1.GatewayServer.
type Server struct {
	logicv1.UnimplementedGatewayServer

	h    *Handler
	reg  *gatepush.Registry
	log  *zap.Logger
	disp *Dispatcher[connKey]
	// base is the parent of request contexts: requests outlive a broken
	// stream (a commit is never cut in half by a gate going away).
	base context.Context

	drainOnce sync.Once
	draining  chan struct{}
	streams   tracker
}

// NewServer returns the Gateway server; base bounds the life of requests.
func NewServer(base context.Context, h *Handler, reg *gatepush.Registry, log *zap.Logger) (*Server, error) {
	if h.Timeout <= 0 {
		return nil, fmt.Errorf("gateway: logic.request_timeout %v must be positive", h.Timeout)
	}
	if h.MaxFrameSize < 4<<10 {
		return nil, fmt.Errorf("gateway: logic.max_frame_size %d must be at least 4096 bytes", h.MaxFrameSize)
	}
	h.init()
	if log == nil {
		log = zap.NewNop()
	}
	return &Server{h: h, reg: reg, log: log, disp: NewDispatcher[connKey](), base: base, draining: make(chan struct{})}, nil
}

// Connect serves one gate stream.
func (s *Server) Connect(stream logicv1.Gateway_ConnectServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil || hello.GateId == "" {
		return status.Error(codes.InvalidArgument, "the first frame must be Hello{gate_id, push_addr}")
	}
	select {
	case <-s.draining:
		return status.Error(codes.Unavailable, "logic is shutting down")
	default:
	}
	gateID := hello.GateId
	s.streams.add()
	defer s.streams.done()
	s.h.Metrics.Streams.Inc()
	defer s.h.Metrics.Streams.Dec()
	log := s.log.With(zap.String("gate_id", gateID))
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// A gate that reads batches learns first that logic reads them too;
	// nothing else sends yet, so this Send does not race the send loop.
	if hello.Batches {
		if err := stream.Send(&logicv1.LogicFrame{Kind: &logicv1.LogicFrame_Welcome{Welcome: &logicv1.Welcome{Batches: true}}}); err != nil {
			return fmt.Errorf("send welcome: %w", err)
		}
	}
	out := make(chan *logicv1.Response, outboundBuffer)
	// Resync has its own slot rather than a place in out: it never waits
	// behind a backlog of answers, and requests arriving while one is due
	// coalesce (the gate's pass reports every connection anyway).
	resyncq := make(chan struct{}, 1)
	resync := func() {
		select {
		case resyncq <- struct{}{}:
		default:
		}
	}
	detach := s.reg.Attach(stream.Context(), gateID, hello.PushAddr, hello.ClientAddrs, resync)
	defer detach()
	log.Info("gate stream opened", zap.String("push_addr", hello.PushAddr))
	defer log.Info("gate stream closed")

	flush := make(chan struct{})
	sent := make(chan struct{})
	lim := batch.Limits{MaxItems: 1}
	if hello.Batches {
		lim = batch.Limits{MaxItems: batch.StreamItems, MaxBytes: batch.StreamBytes}
	}
	go s.sendLoop(ctx, cancel, stream, lim, out, resyncq, flush, sent)

	var inflight tracker
	reply := func(r *logicv1.Response) {
		select {
		case out <- r:
		case <-ctx.Done():
		}
	}
	// request and closed queue one item behind the connection's earlier
	// ones, whether it came alone or in a batch: a batch is handled
	// exactly like its items in separate frames, in its order.
	request := func(req *logicv1.Request) {
		inflight.add() // before the drain check, so Drain waits for it
		if s.isDraining() {
			inflight.done()
			s.h.Metrics.DrainRejects.Inc()
			reply(s.busy(req))
			return
		}
		// Only SENDs are timed from here, so other commands do not pay
		// for a clock read on the receive loop.
		var arrived time.Time
		if req.Command == uint32(protocol.CmdSendMessage) {
			arrived = time.Now()
		}
		s.disp.Submit(connKey{gateID, req.ConnId}, func() {
			defer inflight.done()
			reply(s.h.Handle(s.base, gateID, req))
			if !arrived.IsZero() {
				s.h.Metrics.SendAck.Observe(time.Since(arrived).Seconds())
			}
		})
	}
	closed := func(c *logicv1.Closed) {
		inflight.add()
		s.disp.Submit(connKey{gateID, c.ConnId}, func() {
			defer inflight.done()
			s.h.Closed(s.base, gateID, c)
		})
	}
	recvDone := make(chan error, 1)
	go func() {
		for {
			f, err := stream.Recv()
			if err != nil {
				recvDone <- err
				return
			}
			switch k := f.Kind.(type) {
			case *logicv1.GateFrame_Request:
				request(k.Request)
			case *logicv1.GateFrame_Closed:
				closed(k.Closed)
			case *logicv1.GateFrame_Batch:
				for _, ev := range k.Batch.GetEvents() {
					switch e := ev.Kind.(type) {
					case *logicv1.GateEvent_Request:
						request(e.Request)
					case *logicv1.GateEvent_Closed:
						closed(e.Closed)
					}
				}
			case *logicv1.GateFrame_Rebind:
				bindings := k.Rebind.GetBindings()
				inflight.add()
				go func() {
					defer inflight.done()
					s.h.Rebind(s.base, gateID, bindings)
				}()
			case *logicv1.GateFrame_Hello:
				log.Warn("repeated Hello ignored")
			}
		}
	}()

	var result error
	select {
	case err := <-recvDone:
		if !errors.Is(err, io.EOF) {
			return err // stream broken: nobody to answer
		}
		// Half-closed by the gate: answer what is in flight.
		t := time.NewTimer(eofDrain)
		select {
		case <-inflight.wait():
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	case <-s.draining:
		// Shutting down: new requests are answered 50301 by the reader;
		// finish those in flight, flush, and end the stream so the gate
		// moves its connections to another logic.
		select {
		case <-inflight.wait():
		case <-ctx.Done():
		case <-s.base.Done():
		}
		result = status.Error(codes.Unavailable, "logic is shutting down")
	case <-ctx.Done():
		return ctx.Err()
	}
	close(flush)
	<-sent
	return result
}

// sendLoop is the stream's only sender (Send is not concurrency-safe). It
// sends each answer with whatever others are already queued behind it, in
// one LogicBatch within lim (decisions.md 68), never waiting for more.
func (s *Server) sendLoop(ctx context.Context, cancel context.CancelFunc, stream logicv1.Gateway_ConnectServer,
	lim batch.Limits, out <-chan *logicv1.Response, resyncq <-chan struct{}, flush <-chan struct{}, sent chan<- struct{}) {
	defer close(sent)
	var buf []*logicv1.Response
	send := func(f *logicv1.LogicFrame) error {
		if err := stream.Send(f); err != nil {
			s.log.Debug("gate stream send failed", zap.Error(err))
			cancel()
			return err
		}
		return nil
	}
	sendQueued := func(first *logicv1.Response) bool {
		var err error
		buf, err = batch.Send(buf, first, out, lim, responseSize, func(rs []*logicv1.Response) error {
			s.h.Metrics.GatewayBatchSize.Observe(float64(len(rs)))
			return send(logicFrame(rs))
		})
		// The buffer must not keep sent answers (and their bodies) alive.
		clear(buf[:cap(buf)])
		return err == nil
	}
	for {
		select {
		case r := <-out:
			if !sendQueued(r) {
				return
			}
		case <-resyncq:
			if send(&logicv1.LogicFrame{Kind: &logicv1.LogicFrame_Resync{Resync: &logicv1.Resync{}}}) != nil {
				return
			}
		case <-flush:
			for {
				select {
				case r := <-out:
					if !sendQueued(r) {
						return
					}
				default:
					return
				}
			}
		case <-ctx.Done():
			return
		}
	}
}

// logicFrame wraps answers in one frame: a lone one as itself, exactly as
// before batching, several as a LogicBatch. The batch gets its own slice:
// rs is the send loop's buffer, reused as soon as Send returns.
func logicFrame(rs []*logicv1.Response) *logicv1.LogicFrame {
	if len(rs) == 1 {
		return &logicv1.LogicFrame{Kind: &logicv1.LogicFrame_Response{Response: rs[0]}}
	}
	return &logicv1.LogicFrame{Kind: &logicv1.LogicFrame_Batch{Batch: &logicv1.LogicBatch{Responses: slices.Clone(rs)}}}
}

// responseSize is the exact encoded size of r as one entry of
// LogicBatch.responses (field 1: a one-byte tag, the length, the body).
func responseSize(r *logicv1.Response) int {
	return 1 + protowire.SizeBytes(proto.Size(r))
}

func (s *Server) busy(req *logicv1.Request) *logicv1.Response {
	_, body := failure(s.h.reqIDs.Next(), errcode.New(errcode.Busy, ""))
	return &logicv1.Response{
		ConnId: req.ConnId, Command: req.Command, RequestId: req.RequestId, SequenceId: req.SequenceId,
		Body: body,
	}
}

func (s *Server) isDraining() bool {
	select {
	case <-s.draining:
		return true
	default:
		return false
	}
}

// Drain makes every stream stop taking requests, finish those in flight,
// flush its answers and end; it returns when all streams ended or ctx is
// done.
func (s *Server) Drain(ctx context.Context) {
	s.drainOnce.Do(func() { close(s.draining) })
	select {
	case <-s.streams.wait():
	case <-ctx.Done():
	}
}
