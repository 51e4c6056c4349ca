package message

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/conversation"
	"github.com/sparkim/spark/logic/internal/metrics"
	"github.com/sparkim/spark/logic/internal/sendhook"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/tracing"
)

// clientIDSkew bounds how far ahead of this server's clock a client msg_id
// may be: clock skew between the logic that issued it and this one, no
// more. An id further ahead is replaced. No id is ever waited for, but one
// kept far ahead would drag every later id of the conversation ahead of
// the clock with it (decision 14).
const clientIDSkew = 100 * time.Millisecond

// Target names whom a send is for: exactly one field is set.
type Target = conversation.Target

// SendRequest is a send as every front door hands it to the domain: the
// client protocol (SEND_MESSAGE) and the business API alike.
type SendRequest struct {
	To          Target
	ClientMsgID string
	// MsgID is an id the client got from GENERATE_MSG_ID (0: none); it is
	// kept when valid, else replaced (SEND_ACK carries the one that counts).
	MsgID       int64
	MessageType int
	// Content is the message's JSON object as sent; it is validated and
	// stored in compact form.
	Content json.RawMessage
	// ReplyTo is the id of a message of the same conversation this one
	// replies to (0: none); the server stores a snapshot of it in the
	// content under protocol.ReplyKey.
	ReplyTo int64
	// Flags of business-API sends (the client protocol sets none).
	Flags Flags
}

// Flags change how a message is delivered, not what is stored.
type Flags struct {
	// NoUnread: the message counts as unread for nobody.
	NoUnread bool
	// NoOfflinePush: offline devices get no offline notification.
	NoOfflinePush bool
}

// Ack is the answer to a committed send (SEND_ACK, SendMessageReply): the
// message's id, its conversation and the sender's client_msg_id.
type Ack struct {
	MsgID          int64
	ClientMsgID    string
	ConversationID int64
	// ServerTime is when the message was committed.
	ServerTime time.Time
}

// Send commits one message from an authenticated device and returns its
// Ack, or an *errcode.Error.
func (s *Service) Send(ctx context.Context, from Sender, req SendRequest) (*Ack, error) {
	began := time.Now()
	if err := req.To.Validate(); err != nil {
		return nil, err
	}
	if !protocol.ValidClientMsgID(req.ClientMsgID) {
		return nil, errcode.New(errcode.InvalidArgument, "client_msg_id must be 1-64 printable ASCII characters")
	}
	content, err := s.checkContent(&req, req.Content)
	if err != nil {
		return nil, err
	}
	if req.ReplyTo < 0 {
		return nil, errcode.New(errcode.InvalidArgument, "reply_to must be a positive id")
	}
	if protocol.HasReplyKey(content) {
		return nil, errcode.New(errcode.InvalidArgument, "content."+protocol.ReplyKey+" is written by the server: name the original in reply_to")
	}

	conv, err := s.convs.Resolve(ctx, from.UserID, req.To)
	if err != nil {
		return nil, err
	}
	opened, err := s.convs.Open(ctx, conversation.Sender{UserID: from.UserID, System: from.System}, conv, time.Now())
	if err != nil {
		// Idempotency comes before permissions: a retry of a committed
		// send gets its original answer even if permissions changed since.
		// The batch looks its sends up together; a refused send looks
		// itself up here, so only refusals pay a statement of their own.
		if conv.ID != 0 {
			if req.ReplyTo != 0 {
				// A retry carries the snapshot its first send stored.
				if snap, serr := s.replySnapshot(ctx, conv.ID, req.ReplyTo); serr == nil {
					if c, werr := protocol.WithReply(content, snap); werr == nil {
						content = c
					}
				}
			}
			row, found, rerr := s.committer.replay(ctx, newMessage(from, conv, &req, content), conv, req.Flags)
			if rerr != nil {
				return nil, rerr
			}
			if found {
				return ackOf(row), nil
			}
		}
		return nil, err
	}
	conv = opened
	var snap []byte
	if req.ReplyTo != 0 {
		if snap, err = s.replySnapshot(ctx, conv.ID, req.ReplyTo); err != nil {
			// The retry of a reply committed before its original was
			// recalled still gets its SEND_ACK.
			if row, ferr := s.store.FindByClientMsgID(ctx, from.UserID, conv.ID, req.ClientMsgID); ferr == nil &&
				row.MessageType == req.MessageType && protocol.ReplyOf(row.Content) == req.ReplyTo {
				return ackOf(row), nil
			}
			return nil, err
		}
		if content, err = s.addReply(&req, content, snap); err != nil {
			return nil, err
		}
	}
	if kind, ok := s.hookKind(from, conv); ok {
		checked, ack, err := s.beforeSend(ctx, kind, from, conv, &req, content)
		if err != nil || ack != nil {
			return ack, err
		}
		content = checked
		if snap != nil {
			// A hook's rewrite keeps the server's snapshot, whatever it
			// made of the key.
			if content, err = s.addReply(&req, content, snap); err != nil {
				return nil, err
			}
		}
	}
	if s.cfg.Media != nil {
		if err := s.cfg.Media(ctx, from, conv.ID, req.MessageType, content); err != nil {
			// A retry of a committed send keeps its answer even if its
			// forwarded original was withdrawn since.
			row, found, rerr := s.committer.replay(ctx, newMessage(from, conv, &req, content), conv, req.Flags)
			if rerr != nil {
				return nil, rerr
			}
			if found {
				return ackOf(row), nil
			}
			return nil, err
		}
	}
	// The client's msg_id is checked here, outside every lock (its lease
	// check may ask Redis); under the row lock only "above last_msg_id"
	// and the clock are checked again.
	if req.MsgID != 0 && !s.clientIDUsable(ctx, req.MsgID, time.Now()) {
		req.MsgID = 0
	}

	s.metrics.SendStage.WithLabelValues(metrics.StageChecks).Observe(time.Since(began).Seconds())
	sendCtx := ctx
	var span trace.Span
	if tracing.On() {
		// The group commit's batch (MySQL, then XADD to the deliver
		// queue) as this send waits for it; the job carries this span
		// as its parent.
		sendCtx, span = tracing.Tracer().Start(ctx, "logic.commit_and_enqueue")
	}
	row, replayed, err := s.committer.send(sendCtx, &pending{
		ctx: sendCtx, nm: newMessage(from, conv, &req, content),
		msgID: req.MsgID, conv: conv, flags: req.Flags, outcome: make(chan outcome, 1),
	})
	if span != nil {
		if err != nil {
			span.RecordError(err)
		} else {
			span.SetAttributes(tracing.AttrMsgID.Int64(row.ID), attribute.Bool("spark.replayed", replayed))
		}
		span.End()
	}
	if err != nil {
		return nil, err
	}
	if !replayed {
		s.logCommitted(row, from)
	}
	return ackOf(row), nil
}

// checkContent is the check of a send's content, the client's and a
// before-send hook's rewrite alike: its type and form, 64 KiB, and the
// size rule. It returns the compact form that is stored.
func (s *Service) checkContent(req *SendRequest, raw json.RawMessage) ([]byte, error) {
	content, err := protocol.CanonicalContent(req.MessageType, raw)
	if errors.Is(err, protocol.ErrContentTooLarge) {
		return nil, errcode.Wrap(errcode.TooLarge, "content over 64 KiB", err)
	}
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidArgument, err.Error(), err)
	}
	// Its push and a sync page holding it must fit in a frame, or every
	// client would close on them; checked before any store call, from
	// the exact upper bound.
	if !protocol.MessageFits(len(content), len(req.ClientMsgID), s.cfg.MaxFrameSize) {
		return nil, errcode.New(errcode.TooLarge, fmt.Sprintf("message over max_frame_size (%d bytes) once framed", s.cfg.MaxFrameSize))
	}
	return content, nil
}

// hookMessage is what the before-send hook is told about a send (or an
// edit: the caller sets EditOf) of content by from into conv.
func hookMessage(from Sender, conv conversation.Conversation, req *SendRequest, content []byte) *sendhook.Message {
	msg := &sendhook.Message{
		Kind: "p2p", Origin: "client", SenderID: from.UserID, DeviceID: from.DeviceID, System: from.System,
		ConversationID: conv.ID, ClientMsgID: req.ClientMsgID, MessageType: req.MessageType, Content: content,
	}
	if from.API {
		msg.Origin = "api"
	}
	if conv.Type == protocol.ConversationGroup {
		msg.Kind, msg.GroupID = "group", conv.GroupID
	} else {
		msg.ToUserID = conv.Peer(from.UserID)
	}
	return msg
}

// hookKind is the before-send hook's switch covering a send, and whether
// the hook is on for it.
func (s *Service) hookKind(from Sender, conv conversation.Conversation) (sendhook.Kind, bool) {
	kind := sendhook.P2P
	switch {
	case from.API:
		kind = sendhook.API
	case conv.Type == protocol.ConversationGroup:
		kind = sendhook.Group
	}
	return kind, s.cfg.BeforeSend.Covers(kind)
}

// beforeSend asks the business server's hook about a send it covers,
// after the permission checks (it judges only what would be committed)
// and before the commit (a rejected message is never stored, so never
// delivered or counted unread). It returns the content to commit, or the
// Ack of a retry, or the rejection (decision "A synchronous before-send
// hook").
//
// A retry of a committed send is answered from the store without asking
// the hook again: the message was judged when it was first sent, and a
// hook that changed its mind must not refuse a message that is already
// delivered. A key whose stored content differs from the resend's (the
// hook rewrote it, or the client reused the key) asks the hook, and the
// commit compares the stored row with the answer's content as always.
func (s *Service) beforeSend(ctx context.Context, kind sendhook.Kind, from Sender, conv conversation.Conversation, req *SendRequest, content []byte) ([]byte, *Ack, error) {
	nm := newMessage(from, conv, req, content)
	row, err := s.store.FindByClientMsgID(ctx, nm.SenderID, conv.ID, nm.ClientMsgID)
	switch {
	case err == nil && retryOf(row, nm) == nil:
		if err := s.enqueue(ctx, row, conv, req.Flags); err != nil {
			return nil, nil, err
		}
		return nil, ackOf(row), nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return nil, nil, errcode.Unavailable("idempotency lookup", err)
	}
	msg := hookMessage(from, conv, req, content)
	out, err := s.cfg.BeforeSend.Check(ctx, kind, msg, func(raw json.RawMessage) ([]byte, error) {
		return s.checkContent(req, raw)
	})
	return out, nil, err
}

// newMessage is the row a send of from into conv writes.
func newMessage(from Sender, conv conversation.Conversation, req *SendRequest, content []byte) store.NewMessage {
	return store.NewMessage{
		ConversationID: conv.ID, SenderID: from.UserID, SenderDevice: from.DeviceID,
		ClientMsgID: req.ClientMsgID, MessageType: req.MessageType, Content: content,
	}
}

func (s *Service) logCommitted(row store.Message, from Sender) {
	if ce := s.log.Check(zap.DebugLevel, "message committed"); ce != nil {
		ce.Write(zap.Int64("user_id", from.UserID), zap.String("device_id", from.DeviceID),
			zap.Int64("conversation_id", row.ConversationID), zap.Int64("msg_id", row.ID))
	}
}

// clientIDUsable reports whether a client's msg_id may be kept at all
// (docs/decisions.md 14): issued within logic.msg_id_window, not ahead of this
// server's clock beyond clientIDSkew, and by a machine id that holds a
// live lease in this cluster. Any other id is replaced, never waited for.
func (s *Service) clientIDUsable(ctx context.Context, id int64, now time.Time) bool {
	return s.clientIDInTime(id, now) && s.machines.live(ctx, msgid.MachineOf(id), now)
}

// clientIDInTime is the clock part of clientIDUsable: within the window
// and not ahead of now beyond clientIDSkew.
func (s *Service) clientIDInTime(id int64, now time.Time) bool {
	return id > 0 && msgid.IssuedWithin(id, now, s.cfg.MsgIDWindow) &&
		!msgid.TimeOf(id).After(now.Add(clientIDSkew))
}

// acceptClientID is the check under the conversation's row lock of an id
// clientIDUsable let through: above the conversation's last id, and still
// in time at the commit's now. It does no I/O.
func (s *Service) acceptClientID(id, last int64, now time.Time) bool {
	return id > last && s.clientIDInTime(id, now)
}

func ackOf(row store.Message) *Ack {
	return &Ack{MsgID: row.ID, ClientMsgID: row.ClientMsgID, ConversationID: row.ConversationID, ServerTime: row.CreatedAt}
}
