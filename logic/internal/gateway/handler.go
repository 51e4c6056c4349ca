package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/auth"
	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/logic/internal/inbox"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/metrics"
	"github.com/sparkim/spark/logic/internal/notify"
	"github.com/sparkim/spark/logic/internal/ratelimit"
	"github.com/sparkim/spark/logic/internal/relation"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// DefaultRequestTimeout bounds one request; it is below the gate's default
// request_timeout so logic answers before the gate gives up.
const DefaultRequestTimeout = 8 * time.Second

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
	// Timeout bounds one request (default DefaultRequestTimeout).
	Timeout time.Duration

	once   sync.Once
	reqIDs *envelope.IDSource
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
	if h.Timeout <= 0 {
		h.Timeout = DefaultRequestTimeout
	}
}

// Handle answers one request; it always returns exactly one Response.
func (h *Handler) Handle(ctx context.Context, gateID string, req *logicv1.Request) (resp *logicv1.Response) {
	start := time.Now()
	h.init()
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
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

	sess := req.Session
	authed := sess != nil && sess.UserId > 0
	if authed && req.Command != uint32(protocol.CmdAuth) && req.Command <= math.MaxUint16 {
		if class, ok := ratelimit.ClassOf(uint16(req.Command)); ok {
			if err = h.Limits.Allow(ctx, class, req.RealIp, sess.UserId, sess.DeviceId); err != nil {
				return resp
			}
		}
	}
	switch cmd := req.Command; {
	case cmd == uint32(protocol.CmdAuth):
		if authed {
			err = errcode.New(errcode.InvalidArgument, "already authenticated")
			return resp
		}
		// A blocked or flooding address is refused before its token is
		// even looked at; the refused connection is closed, like a bad
		// token's, and the client comes back after retry_after_ms.
		if err = h.Limits.AdmitAuth(ctx, req.RealIp); err != nil {
			resp.Close = true
			return resp
		}
		var areq protocol.AuthRequest
		if err = decode(req.Body, &areq, "invalid JSON body"); err != nil {
			return resp
		}
		var bind *logicv1.Session
		var reply *protocol.AuthReply
		bind, reply, err = h.Auth.Auth(ctx, auth.Conn{GateID: gateID, ConnID: req.ConnId, RealIP: req.RealIp}, areq)
		if err != nil {
			switch c, _ := errcode.Of(err); c {
			case errcode.BadToken:
				resp.Close = true
				h.Limits.AuthFailed(ctx, req.RealIp)
			case errcode.RateLimited:
				resp.Close = true
			}
			return resp
		}
		if data, err = protocol.Marshal(reply); err == nil {
			resp.Bind = bind
		}
	case !authed:
		err = errcode.New(errcode.NotAuthed, "")
	case cmd == uint32(protocol.CmdGenerateMsgID):
		var id int64
		if id, err = h.IDs.Next(ctx); err != nil {
			err = errcode.Wrap(errcode.Busy, "", err)
			return resp
		}
		data, err = protocol.Marshal(protocol.MsgIDReply{MsgID: jsonid.ID(id)})
	case cmd == uint32(protocol.CmdSendMessage):
		var sreq protocol.SendRequest
		if err = decode(req.Body, &sreq, "invalid JSON body"); err != nil {
			return resp
		}
		var ack *protocol.SendAck
		ack, err = h.Messages.Send(ctx, message.Sender{UserID: sess.UserId, DeviceID: sess.DeviceId, RealIP: req.RealIp}, message.SendRequestOf(sreq))
		if err == nil {
			if data, err = protocol.Marshal(ack); err == nil {
				resp.Command = uint32(protocol.CmdSendAck)
			}
		}
	case cmd == uint32(protocol.CmdSyncInbox) || cmd == uint32(protocol.CmdSyncMessages):
		var (
			reply any
			more  bool
		)
		u := inbox.User{UserID: sess.UserId, DeviceID: sess.DeviceId}
		last, next := protocol.CmdSyncInboxFinish, protocol.CmdSyncInbox
		if cmd == uint32(protocol.CmdSyncInbox) {
			var ireq protocol.SyncInboxRequest
			if len(req.Body) > 0 { // a fresh device may send no body at all
				if err = decode(req.Body, &ireq, "invalid JSON body"); err != nil {
					return resp
				}
			}
			reply, more, err = h.Inbox.SyncInbox(ctx, u, ireq)
		} else {
			last, next = protocol.CmdSyncMessagesDone, protocol.CmdSyncMessages
			var mreq protocol.SyncMessagesRequest
			if err = decode(req.Body, &mreq, invalidIDs); err != nil {
				return resp
			}
			reply, more, err = h.Inbox.SyncMessages(ctx, u, mreq)
		}
		if err == nil {
			if data, err = protocol.Marshal(reply); err == nil {
				resp.Command = uint32(last)
				if more {
					resp.Command = uint32(next)
				}
			}
		}
	case cmd == uint32(protocol.CmdReadMessage), cmd == uint32(protocol.CmdRecallMessage),
		cmd == uint32(protocol.CmdDeleteMessage), cmd == uint32(protocol.CmdConversationSettings):
		from := message.Sender{UserID: sess.UserId, DeviceID: sess.DeviceId, RealIP: req.RealIp}
		var reply any
		switch uint16(cmd) {
		case protocol.CmdReadMessage:
			var r protocol.ReadRequest
			if err = decode(req.Body, &r, invalidIDs); err == nil {
				reply, err = h.Messages.Read(ctx, from, r)
			}
		case protocol.CmdRecallMessage:
			var r protocol.MessageRef
			if err = decode(req.Body, &r, invalidIDs); err == nil {
				reply, err = h.Messages.Recall(ctx, from, r)
			}
		case protocol.CmdDeleteMessage:
			var r protocol.MessageRef
			if err = decode(req.Body, &r, invalidIDs); err == nil {
				reply, err = h.Messages.Delete(ctx, from, r)
			}
		default:
			var r protocol.SettingsRequest
			if err = decode(req.Body, &r, "invalid JSON body (ids are integers, flags booleans)"); err == nil {
				reply, err = h.Messages.Settings(ctx, from, r)
			}
		}
		if err == nil {
			data, err = protocol.Marshal(reply)
		}
	case cmd == uint32(protocol.CmdRelation):
		data, err = h.relation(ctx, sess.UserId, req.Body)
	case cmd == uint32(protocol.CmdGroup):
		data, err = h.group(ctx, sess.UserId, req.Body)
	case cmd >= uint32(protocol.CmdSendAck) && cmd <= uint32(protocol.MaxKnownCommand):
		err = errcode.New(errcode.InvalidArgument, "not a request command")
	default:
		err = errcode.New(errcode.InvalidArgument, "unknown command")
	}
	return resp
}

// invalidIDs is the 40001 message of a body that does not decode where the
// usual mistake is an id that is not an integer.
const invalidIDs = "invalid JSON body (ids are integers)"

// decode reads a request body into its typed request: this handler is the
// client protocol's adapter, and the domain services never see JSON. A
// malformed body is 40001 with msg.
func decode(body []byte, v any, msg string) error {
	if err := json.Unmarshal(body, v); err != nil {
		return errcode.Wrap(errcode.InvalidArgument, msg, err)
	}
	return nil
}

// finish writes the envelope into resp, counts and logs the request.
func (h *Handler) finish(req *logicv1.Request, gateID string, resp *logicv1.Response, data []byte, err error, start time.Time) {
	rid := h.reqIDs.Next()
	code := errcode.OK
	if err != nil {
		var msg string
		code, msg = errcode.Of(err)
		resp.Body = envelope.FailRetry(rid, code, msg, errcode.RetryAfterOf(err))
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

// cause returns the logged form of err: the *errcode.Error text (code,
// client message and cause), which never carries content or tokens.
func cause(err error) error {
	var e *errcode.Error
	if errors.As(err, &e) {
		return e
	}
	return err
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
