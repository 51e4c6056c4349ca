// Package mailbox is the per-user mailbox (docs/internals.md "Mailbox"):
// events sync cannot rebuild (recall, kick, membership, friend, missed
// push), appended with a per-user seq that commits in order, read by
// SYNC_INBOX, and appended by deliver through logic.v1.Internal.
package mailbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/protocol"
)

// IDs issues the event row ids (a *msgid.Generator).
type IDs interface {
	Next(ctx context.Context) (int64, error)
}

// MaxBatch bounds the events of one append.
const MaxBatch = 1000

// ErrInvalid reports an event that cannot be stored.
var ErrInvalid = errors.New("mailbox: invalid event")

// Service appends and reads mailbox events.
type Service struct {
	store *store.Store
	ids   IDs
}

// New returns a Service.
func New(st *store.Store, ids IDs) *Service { return &Service{store: st, ids: ids} }

// NewIDs returns n fresh event ids.
func NewIDs(ctx context.Context, ids IDs, n int) ([]int64, error) {
	out := make([]int64, n)
	for i := range out {
		id, err := ids.Next(ctx)
		if err != nil {
			return nil, fmt.Errorf("mailbox: event id: %w", err)
		}
		out[i] = id
	}
	return out, nil
}

// Validate checks an event: a user, a known type, a device id that is ""
// or valid, and a payload that is empty or a JSON object of at most
// store.MaxPayload bytes.
func Validate(e store.MailboxEvent) error {
	switch {
	case e.UserID <= 0:
		return fmt.Errorf("%w: user_id %d", ErrInvalid, e.UserID)
	case e.EventType < protocol.EventRecall || e.EventType > protocol.MaxEventType:
		return fmt.Errorf("%w: event_type %d", ErrInvalid, e.EventType)
	case e.DeviceID != "" && !protocol.ValidDeviceID(e.DeviceID):
		return fmt.Errorf("%w: device_id", ErrInvalid)
	case e.ConversationID < 0 || e.MsgID < 0:
		return fmt.Errorf("%w: negative id", ErrInvalid)
	case len(e.Payload) > store.MaxPayload:
		return fmt.Errorf("%w: payload over %d bytes", ErrInvalid, store.MaxPayload)
	}
	if len(e.Payload) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(e.Payload, &obj); err != nil || obj == nil {
			return fmt.Errorf("%w: payload is not a JSON object", ErrInvalid)
		}
	}
	return nil
}

// Append validates and appends events in one transaction and returns their
// seqs in order.
func (s *Service) Append(ctx context.Context, events []store.MailboxEvent) ([]int64, error) {
	if len(events) > MaxBatch {
		return nil, fmt.Errorf("%w: more than %d events", ErrInvalid, MaxBatch)
	}
	for _, e := range events {
		if err := Validate(e); err != nil {
			return nil, err
		}
	}
	if len(events) == 0 {
		return nil, nil
	}
	ids, err := NewIDs(ctx, s.ids, len(events))
	if err != nil {
		return nil, err
	}
	seqs, err := s.store.AppendMailbox(ctx, events, ids)
	if err != nil {
		return nil, fmt.Errorf("mailbox: append: %w", err)
	}
	return seqs, nil
}

// Event is one mailbox event as a device reads it.
type Event struct {
	Seq            int64
	EventType      int
	ConversationID int64
	MsgID          int64
	// Payload is the event's JSON object ({} when it has none).
	Payload []byte
}

// Since returns up to limit events of the user after seq for every device
// or for device, and whether more follow.
func (s *Service) Since(ctx context.Context, uid int64, device string, after int64, limit int) ([]Event, bool, error) {
	rows, err := s.store.MailboxSince(ctx, uid, device, after, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("mailbox: read: %w", err)
	}
	more := len(rows) > limit
	if more {
		rows = rows[:limit]
	}
	out := make([]Event, len(rows))
	for i, r := range rows {
		p := r.Payload
		if len(p) == 0 {
			p = []byte("{}")
		}
		out[i] = Event{Seq: r.Seq, EventType: r.EventType, ConversationID: r.ConversationID, MsgID: r.MsgID, Payload: p}
	}
	return out, more, nil
}
