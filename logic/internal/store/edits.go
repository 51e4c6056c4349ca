package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/retry"
)

// Edit errors.
var (
	// ErrWithdrawn: the message was recalled or deleted for everyone.
	ErrWithdrawn = errors.New("store: message withdrawn")
	// ErrNotText: only text messages are edited.
	ErrNotText = errors.New("store: not a text message")
	// ErrEditWindow: the edit window has passed.
	ErrEditWindow = errors.New("store: edit window passed")
)

// MessageText is t_messages.message_type of a text message.
const MessageText = 1

// Edited is the outcome of EditMessage.
type Edited struct {
	// Message is the message as it is now.
	Message Message
	// Group is set for a group conversation; Members are a P2P
	// conversation's members (a group's are deliver's work).
	Group   bool
	Members []int64
	// Unchanged reports a repeat: the content already was this one, and
	// nothing was written.
	Unchanged bool
}

// editEvent is the data of a message.edited webhook event.
type editEvent struct {
	MsgID          jsonid.ID `json:"msg_id"`
	ConversationID jsonid.ID `json:"conversation_id"`
	SenderID       jsonid.ID `json:"sender_id"`
	Version        int       `json:"version"`
	Group          bool      `json:"group"`
}

// EditMessage replaces the content of text message msgID (of
// conversationID when not 0) by userID, its sender, within window of its
// sending: version + 1 and edited_at now, a mailbox event per member of a
// P2P conversation (event builds it) and the message.edited webhook event,
// in one transaction. Errors: ErrNotFound, ErrNotSender, ErrWithdrawn,
// ErrNotText, ErrEditWindow.
func (s *Store) EditMessage(ctx context.Context, msgID, conversationID, userID int64, window time.Duration, content []byte, now time.Time,
	ids func(n int) ([]int64, error), event func(member int64, m Message) MailboxEvent) (Edited, error) {
	var e Edited
	err := retry.Do(ctx, txRetry, func(ctx context.Context) (err error) {
		e, err = s.editOnce(ctx, msgID, conversationID, userID, window, content, ms(now), ids, event)
		return err
	})
	switch {
	case err == ctx.Err() && err != nil:
		return Edited{}, err
	case IsRetryable(err):
		return Edited{}, fmt.Errorf("store: edit message: %w", err)
	}
	return e, err
}

func (s *Store) editOnce(ctx context.Context, msgID, conversationID, userID int64, window time.Duration, content []byte, now time.Time,
	ids func(n int) ([]int64, error), event func(member int64, m Message) MailboxEvent) (Edited, error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return Edited{}, err
	}
	defer func() { _ = tx.Rollback() }()
	m, err := lockMessage(ctx, tx, msgID, conversationID)
	switch {
	case err != nil:
		return Edited{}, err
	case m.SenderID != userID:
		return Edited{}, ErrNotSender
	case m.Status != MessageNormal:
		return Edited{}, ErrWithdrawn
	case m.MessageType != MessageText:
		return Edited{}, ErrNotText
	}
	if bytes.Equal(m.Content, content) {
		// A repeat (a retry after a lost answer): nothing changes.
		return Edited{Message: m, Unchanged: true}, nil
	}
	if window > 0 && now.Sub(m.CreatedAt) > window {
		return Edited{}, ErrEditWindow
	}
	var e Edited
	if e.Group, e.Members, err = conversationMembersTx(ctx, tx, m.ConversationID); err != nil {
		return Edited{}, err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE t_messages SET content = ?, version = version + 1, edited_at = ? WHERE id = ?",
		content, now, m.ID); err != nil {
		return Edited{}, err
	}
	m.Content, m.Version, m.EditedAt = content, m.Version+1, sql.NullTime{Time: now, Valid: true}
	if err := appendMemberEventsTx(ctx, tx, e.Members, ids, func(u int64) MailboxEvent { return event(u, m) }); err != nil {
		return Edited{}, err
	}
	// Last before the commit (the dispatcher's settle rule).
	if err := s.writeWebhookEvents(ctx, tx, now, pendingEvent{typ: EventMessageEdited, conversationID: m.ConversationID,
		data: editEvent{MsgID: jsonid.ID(m.ID), ConversationID: jsonid.ID(m.ConversationID), SenderID: jsonid.ID(m.SenderID),
			Version: m.Version, Group: e.Group}}); err != nil {
		return Edited{}, err
	}
	if err := tx.Commit(); err != nil {
		return Edited{}, err
	}
	e.Message = m
	return e, nil
}

// MaxMessagesByID is the most messages MessagesByID reads at once.
const MaxMessagesByID = 100

// MessagesByID reads the named messages of one conversation, in id order
// (those that do not exist, or are of another conversation, are absent):
// a device that learnt of edits fetches their current versions.
func (s *Store) MessagesByID(ctx context.Context, conversationID int64, ids []int64) ([]Message, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if len(ids) > MaxMessagesByID {
		return nil, fmt.Errorf("store: %d message ids, at most %d", len(ids), MaxMessagesByID)
	}
	q, args, err := sqlx.In("SELECT "+messageReadColumns+" FROM t_messages WHERE conversation_id = ? AND id IN (?) ORDER BY id", conversationID, ids)
	if err != nil {
		return nil, fmt.Errorf("store: messages by id: %w", err)
	}
	var out []Message
	if err := s.db.SelectContext(ctx, &out, s.db.Rebind(q), args...); err != nil {
		return nil, fmt.Errorf("store: messages by id: %w", err)
	}
	return out, nil
}
