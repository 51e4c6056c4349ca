package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// Message is a t_messages row.
type Message struct {
	ID             int64     `db:"id"`
	ConversationID int64     `db:"conversation_id"`
	SenderID       int64     `db:"sender_id"`
	SenderDevice   string    `db:"sender_device"`
	ClientMsgID    string    `db:"client_msg_id"`
	MessageType    int       `db:"message_type"`
	Content        []byte    `db:"content"`
	Status         int       `db:"status"`
	CreatedAt      time.Time `db:"created_at"`
}

// MessageNormal is t_messages.status of a normal message.
const MessageNormal = 1

const messageColumns = "id, conversation_id, sender_id, sender_device, client_msg_id, message_type, content, status, created_at"

// FindByClientMsgID is the idempotency lookup of the send path.
func (s *Store) FindByClientMsgID(ctx context.Context, senderID, conversationID int64, clientMsgID string) (Message, error) {
	var m Message
	err := s.db.GetContext(ctx, &m, "SELECT "+messageColumns+" FROM t_messages WHERE sender_id = ? AND conversation_id = ? AND client_msg_id = ?",
		senderID, conversationID, clientMsgID)
	if errors.Is(err, sql.ErrNoRows) {
		return Message{}, ErrNotFound
	}
	return m, err
}

// MessagesAfter returns up to limit messages of a conversation with id >
// after, ascending (the sync query).
func (s *Store) MessagesAfter(ctx context.Context, conversationID, after int64, limit int) ([]Message, error) {
	var out []Message
	err := s.db.SelectContext(ctx, &out, "SELECT "+messageColumns+" FROM t_messages WHERE conversation_id = ? AND id > ? ORDER BY id ASC LIMIT ?",
		conversationID, after, limit)
	return out, err
}

// NewMessage is what the send path inserts.
type NewMessage struct {
	ConversationID int64
	SenderID       int64
	SenderDevice   string
	ClientMsgID    string
	MessageType    int
	Content        []byte
}

// ChooseID picks the MsgId under the conversation's row lock, given its
// last_msg_id and the commit time; it must return an id > lastMsgID.
type ChooseID func(ctx context.Context, lastMsgID int64, now time.Time) (int64, error)

// InsertMessage runs the send transaction once: lock the conversation row,
// choose the id, insert the message, advance last_msg_id/last_msg_at,
// commit. Errors: ErrNotFound (no conversation row), ErrDuplicateClientMsgID,
// ErrDuplicateMsgID, retryable lock errors (see IsRetryable), or the error
// of choose.
func (s *Store) InsertMessage(ctx context.Context, m NewMessage, choose ChooseID) (Message, error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return Message{}, err
	}
	defer func() { _ = tx.Rollback() }()
	var last int64
	err = tx.GetContext(ctx, &last, "SELECT last_msg_id FROM t_conversations WHERE id = ? FOR UPDATE", m.ConversationID)
	if errors.Is(err, sql.ErrNoRows) {
		return Message{}, ErrNotFound
	}
	if err != nil {
		return Message{}, err
	}
	now := ms(time.Now())
	id, err := choose(ctx, last, now)
	if err != nil {
		return Message{}, err
	}
	row := Message{
		ID: id, ConversationID: m.ConversationID, SenderID: m.SenderID, SenderDevice: m.SenderDevice,
		ClientMsgID: m.ClientMsgID, MessageType: m.MessageType, Content: m.Content, Status: MessageNormal, CreatedAt: now,
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO t_messages ("+messageColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
		row.ID, row.ConversationID, row.SenderID, row.SenderDevice, row.ClientMsgID, row.MessageType, row.Content, row.Status, row.CreatedAt)
	if key, dup := duplicateKey(err); dup {
		if key == "PRIMARY" {
			return Message{}, ErrDuplicateMsgID
		}
		return Message{}, ErrDuplicateClientMsgID
	}
	if err != nil {
		return Message{}, err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE t_conversations SET last_msg_id = ?, last_msg_at = ? WHERE id = ?", id, now, m.ConversationID); err != nil {
		return Message{}, err
	}
	if err := tx.Commit(); err != nil {
		return Message{}, err
	}
	return row, nil
}
