package message

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/conversation"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/failpoint"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/retry"
)

// maxCommitAttempts bounds the send transaction's re-runs (deadlocks, a
// reused client msg_id, a concurrent identical send).
const maxCommitAttempts = 5

// commitRetry paces the re-runs of a send transaction that lost a
// deadlock or a lock wait: 5 ms longer before each retry.
var commitRetry = retry.Policy{Initial: 5 * time.Millisecond, Step: 5 * time.Millisecond, Attempts: maxCommitAttempts}

// clientIDSkew bounds how far ahead of this server's clock a client msg_id
// may be: clock skew between the logic that issued it and this one, no
// more. An id further ahead is replaced. No id is ever waited for, but one
// kept far ahead would drag every later id of the conversation ahead of
// the clock with it (decision 14).
const clientIDSkew = 100 * time.Millisecond

// errReplay makes the commit loop go back to the idempotency lookup.
var errReplay = errors.New("message: concurrent identical send committed")

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
	if err := req.To.Validate(); err != nil {
		return nil, err
	}
	if !protocol.ValidClientMsgID(req.ClientMsgID) {
		return nil, errcode.New(errcode.InvalidArgument, "client_msg_id must be 1-64 printable ASCII characters")
	}
	content, err := protocol.CanonicalContent(req.MessageType, req.Content)
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
			if ack, found, rerr := s.replay(ctx, from, conv, &req, content); found || rerr != nil {
				return ack, rerr
			}
		}
		return nil, err
	}
	conv = opened
	// The client's msg_id is checked here, outside every lock (its lease
	// check may ask Redis); under the row lock only "above last_msg_id"
	// and the clock are checked again.
	if req.MsgID != 0 && !s.clientIDUsable(ctx, req.MsgID, time.Now()) {
		req.MsgID = 0
	}

	o, err := s.committer.submit(ctx, &pending{
		ctx: ctx,
		nm: store.NewMessage{
			ConversationID: conv.ID, SenderID: from.UserID, SenderDevice: from.DeviceID,
			ClientMsgID: req.ClientMsgID, MessageType: req.MessageType, Content: content,
		},
		msgID: req.MsgID, conv: conv, flags: req.Flags, outcome: make(chan outcome, 1),
	})
	switch {
	case err != nil:
		return nil, err
	case o.fallback:
		return s.sendOne(ctx, from, conv, &req, content)
	case o.err != nil:
		return nil, o.err
	}
	if o.enqueueErr != nil {
		if err := s.enqueueFrom(ctx, o.row, o.job, 1, o.enqueueErr, o.enqueueStart); err != nil {
			return nil, err
		}
	}
	if !o.replay {
		s.logCommitted(o.row, from)
	}
	return ackOf(o.row), nil
}

// sendOne commits one send in its own transaction, then enqueues it. It is
// not a mode: the group commit falls back to it for the sends of a batch
// the database refused, as it handles every per-row case (duplicates, a
// reused client msg_id) one at a time.
func (s *Service) sendOne(ctx context.Context, from Sender, conv conversation.Conversation, req *SendRequest, content []byte) (*Ack, error) {
	row, err := s.commit(ctx, from, conv, req, content)
	if errors.Is(err, errReplay) {
		ack, found, err := s.replay(ctx, from, conv, req, content)
		if err == nil && !found {
			err = errcode.Unavailable("commit", errors.New("duplicate client_msg_id but no row"))
		}
		return ack, err
	}
	if err != nil {
		return nil, err
	}
	if err := failpoint.Inject("logic/send/afterCommit"); err != nil {
		return nil, errcode.Unavailable("after commit", err)
	}
	if err := s.enqueue(ctx, row, conv, req.Flags); err != nil {
		return nil, err
	}
	s.logCommitted(row, from)
	return ackOf(row), nil
}

func (s *Service) logCommitted(row store.Message, from Sender) {
	if ce := s.log.Check(zap.DebugLevel, "message committed"); ce != nil {
		ce.Write(zap.Int64("user_id", from.UserID), zap.String("device_id", from.DeviceID),
			zap.Int64("conversation_id", row.ConversationID), zap.Int64("msg_id", row.ID))
	}
}

// replay answers a send whose (sender, conversation, client_msg_id) row
// exists: same type and content → enqueue again and the original ack;
// different → 40901. found is false when there is no row. The batch does
// this lookup for all its sends in one statement; replay is the lookup of
// one send, for the single-send fallback and for a send its permissions
// refused.
func (s *Service) replay(ctx context.Context, from Sender, conv conversation.Conversation, req *SendRequest, content []byte) (*Ack, bool, error) {
	row, err := s.store.FindByClientMsgID(ctx, from.UserID, conv.ID, req.ClientMsgID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, errcode.Unavailable("idempotency lookup", err)
	}
	if row.MessageType != req.MessageType || !bytes.Equal(row.Content, content) {
		return nil, true, errcode.New(errcode.Conflict, "client_msg_id already used with different content")
	}
	if err := s.enqueue(ctx, row, conv, req.Flags); err != nil {
		return nil, true, err
	}
	return ackOf(row), true, nil
}

// commit runs the send transaction, retrying deadlocks and a reused client
// msg_id; errReplay when an identical send committed concurrently.
func (s *Service) commit(ctx context.Context, from Sender, conv conversation.Conversation, req *SendRequest, content []byte) (store.Message, error) {
	nm := store.NewMessage{
		ConversationID: conv.ID, SenderID: from.UserID, SenderDevice: from.DeviceID,
		ClientMsgID: req.ClientMsgID, MessageType: req.MessageType, Content: content,
	}
	clientID := req.MsgID
	var err error
	for attempt := 0; attempt < maxCommitAttempts; attempt++ {
		var row store.Message
		row, err = s.store.InsertMessage(ctx, nm, func(ctx context.Context, last int64, now time.Time) (int64, error) {
			if s.acceptClientID(clientID, last, now) {
				return clientID, nil
			}
			return s.ids.NextAfter(ctx, last)
		})
		switch {
		case err == nil:
			return row, nil
		case errors.Is(err, store.ErrDuplicateClientMsgID):
			return store.Message{}, errReplay
		case errors.Is(err, store.ErrDuplicateMsgID):
			clientID = 0 // taken: let the generator choose
		case errors.Is(err, msgid.ErrClockBehind):
			return store.Message{}, errcode.Unavailable("msg id", err)
		case errors.Is(err, store.ErrNotFound):
			return store.Message{}, errcode.New(errcode.NotFound, "conversation not found")
		case store.IsRetryable(err):
			if serr := retry.Sleep(ctx, commitRetry.Delay(attempt)); serr != nil {
				return store.Message{}, errcode.Unavailable("commit", serr)
			}
		default:
			return store.Message{}, errcode.Unavailable("commit", err)
		}
	}
	return store.Message{}, errcode.Unavailable("commit", err)
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
