package gateway

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/auth"
	"github.com/sparkim/spark/logic/internal/clientwire"
	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/logic/internal/inbox"
	"github.com/sparkim/spark/logic/internal/media"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/metrics"
	"github.com/sparkim/spark/logic/internal/notify"
	"github.com/sparkim/spark/logic/internal/push"
	"github.com/sparkim/spark/logic/internal/ratelimit"
	"github.com/sparkim/spark/logic/internal/relation"
	"github.com/sparkim/spark/logic/internal/signal"
	"github.com/sparkim/spark/logic/internal/upstream"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/tracing"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// Handler answers the requests of authenticated and unauthenticated
// connections.
type Handler struct {
	Auth *auth.Service
	// Messages answers SEND_MESSAGE and the changes to sent messages and
	// memberships: READ_MESSAGE, RECALL_MESSAGE, DELETE_MESSAGE and
	// CONVERSATION_SETTINGS.
	Messages *message.Service
	// Inbox answers SYNC_INBOX and SYNC_MESSAGES.
	Inbox *inbox.Service
	// Relations answers RELATION (19) and Groups GROUP (20): the same
	// services the business API adapts onto (nil answers those commands
	// 50001).
	Relations *relation.Service
	Groups    *group.Service
	// Push answers PUSH_SETTINGS (21), the push.Tokens the business API
	// also uses (nil answers it 50001).
	Push *push.Tokens
	// Unacked queues the offline notifications of the MESSAGE pushes a
	// closed connection never acknowledged (nil: push is off).
	Unacked *push.Unacked
	// Upstream queues UPSTREAM (22) frames for business services (nil
	// answers it 50001).
	Upstream *upstream.Service
	// Signals answers SIGNAL (32) (nil answers it 50001).
	Signals *signal.Service
	// Media answers MEDIA (23) (nil answers it 50001).
	Media *media.Service
	// Notifier is told about every RELATION and GROUP change that Changed
	// something (notify.After*, as the business API does); nil leaves the
	// changes to sync.
	Notifier notify.Notifier
	IDs      message.IDs
	// Limits are this front door's rate limits (per device and per client
	// address, shared by every logic process through Redis), checked
	// before a request does any other work, so a refused one costs no
	// MySQL; nil allows everything.
	Limits  *ratelimit.Limiter
	Log     *zap.Logger
	Metrics *metrics.Metrics
	// Timeout bounds one request (logic.request_timeout, below the gate's
	// gate.request_timeout so logic answers before the gate gives up);
	// NewServer refuses a Handler without one.
	Timeout time.Duration
	// MaxFrameSize is the clients' frame limit (logic.max_frame_size):
	// sync pages are cut to fit it. NewServer refuses one below 4 KiB.
	MaxFrameSize int

	once      sync.Once
	reqIDs    *envelope.IDSource
	pageBound inbox.SizeBound
	listBound inbox.ListBound
}

func (h *Handler) init() { h.once.Do(h.setDefaults) }

func (h *Handler) setDefaults() {
	if h.reqIDs == nil {
		h.reqIDs = envelope.NewIDSource()
	}
	if h.Log == nil {
		h.Log = zap.NewNop()
	}
	if h.Metrics == nil {
		h.Metrics = metrics.New(nil)
	}
	h.pageBound = clientwire.PageBound(h.MaxFrameSize)
	h.listBound = clientwire.ListBound(h.MaxFrameSize)
}

// Handle answers one request; it always returns exactly one Response.
func (h *Handler) Handle(ctx context.Context, gateID string, req *logicv1.Request) (resp *logicv1.Response) {
	start := time.Now()
	h.init()
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	if req.TraceParent != "" && tracing.On() {
		// The gate's span of the frame is the parent; this one ends after
		// the answer is queued (deferred before finish's).
		var span trace.Span
		ctx, span = tracing.Tracer().Start(tracing.WithParent(ctx, req.TraceParent), "logic.send",
			trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(tracing.AttrUserID.Int64(req.GetSession().GetUserId())))
		defer span.End()
	}
	resp = &logicv1.Response{ConnId: req.ConnId, Command: req.Command, RequestId: req.RequestId, SequenceId: req.SequenceId}
	var (
		data []byte
		err  error
	)
	defer func() {
		if p := recover(); p != nil {
			err = errcode.Wrap(errcode.Internal, "", fmt.Errorf("panic: %v", p))
			resp.Command, resp.Bind, resp.Close = req.Command, nil, false
		}
		h.finish(req, gateID, resp, data, err, start)
	}()

	c := &call{ctx: ctx, gateID: gateID, req: req, resp: resp}
	cmd, known := commands[req.Command]
	authed := req.Session != nil && req.Session.UserId > 0
	switch {
	case known && cmd.unauthed && authed:
		err = errcode.New(errcode.InvalidArgument, "already authenticated")
	case known && cmd.unauthed:
		data, err = cmd.serve(h, c)
	case !authed:
		err = errcode.New(errcode.NotAuthed, "")
	case !known && req.Command >= uint32(protocol.CmdSendAck) && req.Command <= uint32(protocol.MaxKnownCommand):
		err = errcode.New(errcode.InvalidArgument, "not a request command")
	case !known:
		err = errcode.New(errcode.InvalidArgument, "unknown command")
	default:
		if cmd.limited {
			began := time.Now()
			err = h.Limits.Allow(ctx, cmd.class, req.RealIp, req.Session.UserId, req.Session.DeviceId)
			if req.Command == uint32(protocol.CmdSendMessage) {
				h.Metrics.SendStage.WithLabelValues(metrics.StageRateLimit).Observe(time.Since(began).Seconds())
			}
		}
		if err == nil {
			data, err = cmd.serve(h, c)
		}
	}
	return resp
}

// finish writes the envelope into resp, counts and logs the request.
func (h *Handler) finish(req *logicv1.Request, gateID string, resp *logicv1.Response, data []byte, err error, start time.Time) {
	rid := h.reqIDs.Next()
	code := errcode.OK
	if err != nil {
		code, resp.Body = failure(rid, err)
		resp.Command = req.Command
		resp.Bind = nil
	} else {
		resp.Body = envelope.OK(rid, data)
	}
	h.Metrics.Requests.WithLabelValues(commandLabel(req.Command), string(code)).Inc()
	if req.Command == uint32(protocol.CmdSendMessage) {
		h.Metrics.SendLatency.WithLabelValues(string(code)).Observe(time.Since(start).Seconds())
	}
	// The level is known before the fields are built: a successful
	// request logs at debug, and building its fields when debug is off
	// would cost an allocation per request for nothing.
	lvl, msg, withErr := zap.DebugLevel, "request", false
	switch {
	case err == nil && req.Command == uint32(protocol.CmdAuth):
		lvl, msg = zap.InfoLevel, "authenticated"
	case err == nil:
	case strings.HasPrefix(string(code), "5"):
		lvl, msg, withErr = zap.WarnLevel, "request failed", true
	default:
		msg, withErr = "request refused", true
	}
	ce := h.Log.Check(lvl, msg)
	if ce == nil {
		return
	}
	fields := make([]zap.Field, 0, 10)
	fields = append(fields,
		zap.Uint32("command", req.Command), zap.Uint64("conn_id", req.ConnId), zap.String("gate_id", gateID),
		zap.String("real_ip", req.RealIp), zap.String("code", string(code)), zap.String("request_id", rid),
		zap.Duration("took", time.Since(start)),
	)
	if s := req.Session; s != nil {
		fields = append(fields, zap.Int64("user_id", s.UserId), zap.String("device_id", s.DeviceId))
	} else if resp.Bind != nil {
		fields = append(fields, zap.Int64("user_id", resp.Bind.UserId), zap.String("device_id", resp.Bind.DeviceId))
	}
	if withErr {
		fields = append(fields, zap.Error(cause(err)))
	}
	ce.Write(fields...)
}

func commandLabel(c uint32) string {
	if c > uint32(protocol.MaxKnownCommand)+1 {
		return "other"
	}
	return strconv.FormatUint(uint64(c), 10) // below 100: a static string, no allocation
}

// Closed handles a connection's end.
func (h *Handler) Closed(ctx context.Context, gateID string, c *logicv1.Closed) {
	h.init()
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	if err := h.Auth.Closed(ctx, auth.Conn{GateID: gateID, ConnID: c.ConnId}, c.Session); err != nil {
		h.Log.Warn("route delete failed", zap.Uint64("conn_id", c.ConnId), zap.String("gate_id", gateID),
			zap.Int64("user_id", c.Session.GetUserId()), zap.String("device_id", c.Session.GetDeviceId()), zap.Error(err))
	}
	if h.Unacked == nil || len(c.Unacked) == 0 {
		return
	}
	if err := h.Unacked.Queue(ctx, c.Session, c.Unacked); err != nil {
		// The device syncs the messages when it comes back; only the
		// notification is lost.
		h.Log.Warn("queue notifications of unacknowledged pushes", zap.Int64("user_id", c.Session.GetUserId()),
			zap.String("device_id", c.Session.GetDeviceId()), zap.Int("pushes", len(c.Unacked)), zap.Error(err))
	}
}

// Rebind restores the routes a gate re-reported after Resync.
func (h *Handler) Rebind(ctx context.Context, gateID string, bindings []*logicv1.Binding) {
	h.init()
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	n, err := h.Auth.Rebind(ctx, gateID, bindings)
	if err != nil {
		h.Log.Warn("rebind failed", zap.String("gate_id", gateID), zap.Int("bindings", len(bindings)), zap.Error(err))
		return
	}
	h.Log.Info("routes rebound", zap.String("gate_id", gateID), zap.Int("bindings", len(bindings)), zap.Int("restored", n))
}
