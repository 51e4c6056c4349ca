package gateway

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/sparkim/spark/logic/internal/auth"
	"github.com/sparkim/spark/logic/internal/clientwire"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/ratelimit"
	"github.com/sparkim/spark/logic/internal/signal"
	"github.com/sparkim/spark/logic/internal/upstream"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/tracing"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// command is how the gateway answers one request command: the whole
// client protocol is the table commands, and Handle only walks it (the
// session rule, then the rate limit, then serve).
type command struct {
	// unauthed marks AUTH, the one command of a connection without a
	// session (and refused on one that has it); every other command needs
	// the session.
	unauthed bool
	// class is the per-device rate class checked before serve does any
	// work; limited is false for a command no limit applies to.
	class   ratelimit.Class
	limited bool
	// serve decodes the body, calls the domain and returns the answer's
	// data (or an error for the envelope); it may set the answer's
	// command, Bind and Close through c.resp.
	serve func(h *Handler, c *call) ([]byte, error)
}

// call is one request being answered.
type call struct {
	ctx    context.Context
	gateID string
	req    *logicv1.Request
	resp   *logicv1.Response
}

// sender is the session's device as the message service names it.
func (c *call) sender() message.Sender {
	s := c.req.Session
	return message.Sender{UserID: s.UserId, DeviceID: s.DeviceId, RealIP: c.req.RealIp}
}

// commands is the client protocol's request commands. An entry's serve
// is built by decoded (a JSON body into its typed request, 40001 when it
// does not decode) or reads the body itself.
var commands = map[uint32]command{
	uint32(protocol.CmdAuth):          {unauthed: true, class: ratelimit.Auth, serve: (*Handler).authenticate},
	uint32(protocol.CmdGenerateMsgID): {class: ratelimit.Send, limited: true, serve: (*Handler).generateMsgID},
	uint32(protocol.CmdSendMessage): {class: ratelimit.Send, limited: true, serve: decoded(invalidJSON, false,
		func(h *Handler, c *call, r protocol.SendRequest) (any, error) {
			ack, err := h.Messages.Send(c.ctx, c.sender(), clientwire.SendRequest(r))
			c.resp.Command = uint32(protocol.CmdSendAck)
			if tracing.On() {
				span := trace.SpanFromContext(c.ctx)
				if err != nil {
					span.RecordError(err)
				} else {
					span.SetAttributes(tracing.AttrMsgID.Int64(ack.MsgID))
				}
			}
			return wire(ack, err, clientwire.SendAck)
		})},
	// A fresh device may send SYNC_INBOX with no body at all.
	uint32(protocol.CmdSyncInbox): {class: ratelimit.Sync, limited: true, serve: decoded(invalidJSON, true,
		func(h *Handler, c *call, r protocol.SyncInboxRequest) (any, error) {
			s := c.req.Session
			page, err := h.Inbox.SyncInbox(c.ctx, clientwire.InboxQuery(s.UserId, s.DeviceId, r, h.listBound))
			if err != nil {
				return nil, err
			}
			c.resp.Command = pageCommand(page.More, protocol.CmdSyncInbox, protocol.CmdSyncInboxFinish)
			return clientwire.SyncInboxReply(page), nil
		})},
	uint32(protocol.CmdSyncMessages): {class: ratelimit.Sync, limited: true, serve: decoded(invalidIDs, false,
		func(h *Handler, c *call, r protocol.SyncMessagesRequest) (any, error) {
			page, err := h.Inbox.History(c.ctx, clientwire.HistoryQuery(c.req.Session.UserId, r, h.pageBound))
			if err != nil {
				return nil, err
			}
			c.resp.Command = pageCommand(page.More, protocol.CmdSyncMessages, protocol.CmdSyncMessagesDone)
			return clientwire.SyncMessagesReply(page), nil
		})},
	uint32(protocol.CmdReadMessage): {class: ratelimit.Edit, limited: true, serve: decoded(invalidIDs, false,
		func(h *Handler, c *call, r protocol.ReadRequest) (any, error) {
			m, err := h.Messages.Read(c.ctx, c.sender(), clientwire.ReadMark(r))
			return wire(m, err, clientwire.ReadReply)
		})},
	uint32(protocol.CmdRecallMessage): {class: ratelimit.Edit, limited: true, serve: decoded(invalidIDs, false,
		func(h *Handler, c *call, r protocol.MessageRef) (any, error) {
			ref, err := h.Messages.Recall(c.ctx, c.sender(), clientwire.MessageRef(r))
			return wire(ref, err, clientwire.MessageRefReply)
		})},
	uint32(protocol.CmdDeleteMessage): {class: ratelimit.Edit, limited: true, serve: decoded(invalidIDs, false,
		func(h *Handler, c *call, r protocol.DeleteRequest) (any, error) {
			ref := clientwire.MessageRef(protocol.MessageRef{MsgID: r.MsgID, ConversationID: r.ConversationID})
			if r.ForEveryone {
				d, err := h.Messages.DeleteForEveryone(c.ctx, c.sender(), ref)
				return wire(d, err, clientwire.DeletedForEveryoneReply)
			}
			d, err := h.Messages.Delete(c.ctx, c.sender(), ref)
			return wire(d, err, clientwire.MessageRefReply)
		})},
	uint32(protocol.CmdConversationSettings): {class: ratelimit.Edit, limited: true, serve: decoded("invalid JSON body (ids are integers, flags booleans)", false,
		func(h *Handler, c *call, r protocol.SettingsRequest) (any, error) {
			st, err := h.Messages.Settings(c.ctx, c.sender(), clientwire.SettingsChange(r))
			return wire(st, err, clientwire.SettingsReply)
		})},
	uint32(protocol.CmdRelation): {class: ratelimit.Edit, limited: true, serve: func(h *Handler, c *call) ([]byte, error) {
		return h.relation(c.ctx, c.req.Session.UserId, c.req.Body)
	}},
	uint32(protocol.CmdGroup): {class: ratelimit.Edit, limited: true, serve: func(h *Handler, c *call) ([]byte, error) {
		return h.group(c.ctx, c.req.Session.UserId, c.req.Body)
	}},
	uint32(protocol.CmdPushSettings): {class: ratelimit.Edit, limited: true, serve: func(h *Handler, c *call) ([]byte, error) {
		return h.pushSettings(c.ctx, c.req.Session.UserId, c.req.Session.DeviceId, c.req.Body)
	}},
	// A device's upstream frames share its send budget: they are writes
	// of the same weight.
	uint32(protocol.CmdUpstream): {class: ratelimit.Send, limited: true, serve: decoded(invalidJSON, false,
		func(h *Handler, c *call, r protocol.UpstreamRequest) (any, error) {
			if h.Upstream == nil {
				return nil, errcode.New(errcode.Internal, "upstream is not configured")
			}
			s := c.req.Session
			q, err := h.Upstream.Queue(c.ctx, upstream.Frame{UserID: s.UserId, DeviceID: s.DeviceId,
				Service: r.Service, Body: r.Body, UpstreamID: r.UpstreamID})
			if err != nil {
				return nil, err
			}
			return protocol.UpstreamReply{ID: jsonid.ID(q.ID), Duplicate: q.Duplicate}, nil
		})},
	uint32(protocol.CmdMedia): {class: ratelimit.Edit, limited: true, serve: func(h *Handler, c *call) ([]byte, error) {
		return h.mediaCommand(c.ctx, c.req.Session.UserId, c.req.Body)
	}},
	uint32(protocol.CmdEditMessage): {class: ratelimit.Edit, limited: true, serve: decoded(invalidIDs, false,
		func(h *Handler, c *call, r protocol.EditRequest) (any, error) {
			e, err := h.Messages.Edit(c.ctx, c.sender(), message.EditRequest{MsgID: r.MsgID.Int64(),
				ConversationID: r.ConversationID.Int64(), Content: r.Content})
			if err != nil {
				return nil, err
			}
			return protocol.EditReply{MsgID: jsonid.ID(e.MsgID), ConversationID: jsonid.ID(e.ConversationID),
				Version: e.Version, EditedAt: e.EditedAt.UnixMilli()}, nil
		})},
	uint32(protocol.CmdReaction): {class: ratelimit.Edit, limited: true, serve: func(h *Handler, c *call) ([]byte, error) {
		return h.reactionCommand(c.ctx, c.sender(), c.req.Body)
	}},
	uint32(protocol.CmdSignal): signalCommand,
}

// signalCommand answers SIGNAL (32); its own rate class keeps a typing
// flood from eating the device's send or edit budget.
var signalCommand = command{class: ratelimit.Signal, limited: true, serve: decoded(invalidIDs, false,
	func(h *Handler, c *call, r protocol.SignalRequest) (any, error) {
		if h.Signals == nil {
			return nil, errcode.New(errcode.Internal, "signals are not configured")
		}
		s := c.req.Session
		n, err := h.Signals.Send(c.ctx, signal.Sender{UserID: s.UserId, DeviceID: s.DeviceId},
			signal.Request{ConversationID: int64(r.ConversationID), Kind: r.Kind, Payload: r.Payload})
		if err != nil {
			return nil, err
		}
		return protocol.SignalReply{Delivered: n}, nil
	})}

// The 40001 messages of a body that does not decode.
const (
	invalidJSON = "invalid JSON body"
	// invalidIDs is for bodies where the usual mistake is an id that is
	// not an integer.
	invalidIDs = "invalid JSON body (ids are integers)"
)

// decoded returns a serve that decodes the body into a T (an empty body is
// the zero T when emptyOK), calls f and encodes its answer.
func decoded[T any](msg string, emptyOK bool, f func(h *Handler, c *call, req T) (any, error)) func(*Handler, *call) ([]byte, error) {
	return func(h *Handler, c *call) ([]byte, error) {
		var req T
		if len(c.req.Body) > 0 || !emptyOK {
			if err := decode(c.req.Body, &req, msg); err != nil {
				return nil, err
			}
		}
		reply, err := f(h, c, req)
		if err != nil {
			return nil, err
		}
		return protocol.Marshal(reply)
	}
}

// wire is the client form of a domain answer, or err.
func wire[D, W any](d *D, err error, form func(*D) W) (any, error) {
	if err != nil {
		return nil, err
	}
	return form(d), nil
}

// pageCommand is the answer command of a sync page: next while more
// pages follow, last for the final one.
func pageCommand(more bool, next, last uint16) uint32 {
	if more {
		return uint32(next)
	}
	return uint32(last)
}

// authenticate answers AUTH.
func (h *Handler) authenticate(c *call) ([]byte, error) {
	// A blocked or flooding address is refused before its token is even
	// looked at; the refused connection is closed, like a bad token's,
	// and the client comes back after retry_after_ms.
	if err := h.Limits.AdmitAuth(c.ctx, c.req.RealIp); err != nil {
		c.resp.Close = true
		return nil, err
	}
	var areq protocol.AuthRequest
	if err := decode(c.req.Body, &areq, invalidJSON); err != nil {
		return nil, err
	}
	bind, reply, err := h.Auth.Auth(c.ctx, auth.Conn{GateID: c.gateID, ConnID: c.req.ConnId, RealIP: c.req.RealIp}, clientwire.Credentials(areq))
	if err != nil {
		c.resp.Close = closesAfterAuth(err)
		if code, _ := errcode.Of(err); code == errcode.BadToken {
			h.Limits.AuthFailed(c.ctx, c.req.RealIp)
		}
		return nil, err
	}
	data, err := protocol.Marshal(clientwire.AuthReply(reply))
	if err == nil {
		c.resp.Bind = bind
	}
	return data, err
}

// generateMsgID answers GENERATE_MSG_ID.
func (h *Handler) generateMsgID(c *call) ([]byte, error) {
	id, err := h.IDs.Next(c.ctx)
	if err != nil {
		return nil, errcode.Unavailable("", err)
	}
	return protocol.Marshal(protocol.MsgIDReply{MsgID: jsonid.ID(id)})
}
