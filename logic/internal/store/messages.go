package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/retry"
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
	// Version and EditedAt are the edits (read by the statements that
	// select messageReadColumns; zero elsewhere).
	Version  int          `db:"version"`
	EditedAt sql.NullTime `db:"edited_at"`
}

// MessageNormal is t_messages.status of a normal message.
const MessageNormal = 1

const messageColumns = "id, conversation_id, sender_id, sender_device, client_msg_id, message_type, content, status, created_at"

// messageReadColumns are the columns of a message as history and actions
// read it: the inserted ones and the edit's.
const messageReadColumns = messageColumns + ", version, edited_at"

// FindByClientMsgID is the idempotency lookup of the send path.
func (s *Store) FindByClientMsgID(ctx context.Context, senderID, conversationID int64, clientMsgID string) (Message, error) {
	// Scanned by hand, not through sqlx's reflection: this lookup runs for
	// every send.
	var m Message
	err := s.db.QueryRowContext(ctx, "SELECT "+messageColumns+" FROM t_messages WHERE sender_id = ? AND conversation_id = ? AND client_msg_id = ?",
		senderID, conversationID, clientMsgID).Scan(
		&m.ID, &m.ConversationID, &m.SenderID, &m.SenderDevice, &m.ClientMsgID, &m.MessageType, &m.Content, &m.Status, &m.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return Message{}, ErrNotFound
	}
	return m, err
}

// ClientKey is a send's idempotency key: the unique key
// (sender_id, conversation_id, client_msg_id) of t_messages.
type ClientKey struct {
	SenderID       int64
	ConversationID int64
	ClientMsgID    string
}

// clientKeysQuery starts the idempotency lookup of a whole batch of sends
// in one statement (InsertMessages adds one "(?,?,?)" per key and the
// closing parenthesis): the rows that exist among the keys. The
// row-constructor IN is a range scan of uk_sender_conv_client_msg on
// MariaDB 10.11 (one range per key), so the cost is that of the per-send
// lookups without their round trips.
const clientKeysQuery = "SELECT " + messageColumns + " FROM t_messages WHERE (sender_id, conversation_id, client_msg_id) IN ("

// scanClientKeys reads the rows of a clientKeysQuery, keyed by their
// ClientKey (absent keys are simply missing).
func scanClientKeys(rows *sql.Rows) (map[ClientKey]Message, error) {
	out := make(map[ClientKey]Message)
	for rows.Next() {
		// Scanned by hand, not through sqlx's reflection: this runs for
		// every batch.
		var m Message
		if err := rows.Scan(&m.ID, &m.ConversationID, &m.SenderID, &m.SenderDevice, &m.ClientMsgID, &m.MessageType, &m.Content, &m.Status, &m.CreatedAt); err != nil {
			return nil, fmt.Errorf("store: idempotency lookup: %w", err)
		}
		out[ClientKey{SenderID: m.SenderID, ConversationID: m.ConversationID, ClientMsgID: m.ClientMsgID}] = m
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: idempotency lookup: %w", err)
	}
	return out, nil
}

// MessagesAfter returns up to limit messages of a conversation with after <
// id <= upTo, ascending. upTo must be a watermark read in an earlier
// statement (see ConversationPage): a lone "id > after" statement can skip a
// message on MariaDB (docs/decisions.md "Watermark reads").
func (s *Store) MessagesAfter(ctx context.Context, conversationID, after, upTo int64, limit int) ([]Message, error) {
	if upTo <= after || limit <= 0 {
		return nil, nil
	}
	var out []Message
	err := s.db.SelectContext(ctx, &out, "SELECT "+messageReadColumns+" FROM t_messages WHERE conversation_id = ? AND id > ? AND id <= ? ORDER BY id ASC LIMIT ?",
		conversationID, after, upTo, limit)
	return out, err
}

// ConversationPage is the sync read of a conversation's messages after a
// cursor: first the conversation row in its own statement, whose
// last_msg_id is the watermark W (every message <= W committed before W
// was written, because writers assign ids under the row's lock and set
// last_msg_id in the same transaction), then the messages with after < id
// <= W in a second statement, whose read view is newer than the commit of
// every one of them. ErrNotFound when the conversation does not exist.
//
// Both statements must run on the same server (a replica may lag behind
// the watermark) and must not share a REPEATABLE READ transaction (one read
// view would reintroduce the race the watermark avoids).
func (s *Store) ConversationPage(ctx context.Context, conversationID, after int64, limit int) (Conversation, []Message, error) {
	c, err := s.GetConversation(ctx, conversationID)
	if err != nil {
		return Conversation{}, nil, err
	}
	msgs, err := s.MessagesAfter(ctx, conversationID, after, c.LastMsgID, limit)
	if err != nil {
		return Conversation{}, nil, err
	}
	return c, msgs, nil
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

// MessageRecalled is t_messages.status of a recalled message.
const MessageRecalled = 2

// MessageDeleted is t_messages.status of a message deleted for everyone
// (decision 98): a tombstone like a recalled one.
const MessageDeleted = 3

// Errors of RecallMessage.
var (
	// ErrNotSender: only the sender may recall a message.
	ErrNotSender = errors.New("store: not the sender")
	// ErrRecallWindow: the recall window has passed.
	ErrRecallWindow = errors.New("store: recall window passed")
)

// messageQuery is the SELECT of message msgID, of conversationID when it
// is not 0.
func messageQuery(msgID, conversationID int64) (string, []any) {
	q, args := "SELECT "+messageReadColumns+" FROM t_messages WHERE id = ?", []any{msgID}
	if conversationID != 0 {
		q, args = q+" AND conversation_id = ?", append(args, conversationID)
	}
	return q, args
}

// lockMessage reads message msgID (of conversationID when not 0) under its
// row lock, for a change of it; ErrNotFound when there is none.
func lockMessage(ctx context.Context, tx *sqlx.Tx, msgID, conversationID int64) (Message, error) {
	q, args := messageQuery(msgID, conversationID)
	var m Message
	err := tx.GetContext(ctx, &m, q+" FOR UPDATE", args...)
	if errors.Is(err, sql.ErrNoRows) {
		return Message{}, ErrNotFound
	}
	return m, err
}

// GetMessage reads a message by id; conversationID, when non-zero, must
// match. ErrNotFound when there is no such message.
func (s *Store) GetMessage(ctx context.Context, msgID, conversationID int64) (Message, error) {
	q, args := messageQuery(msgID, conversationID)
	var m Message
	err := s.db.GetContext(ctx, &m, q, args...)
	if errors.Is(err, sql.ErrNoRows) {
		return Message{}, ErrNotFound
	}
	return m, err
}

// WithdrawnAmong reports which of ids, messages of conversation cid, are
// recalled or deleted for everyone (the originals of a page's replies).
func (s *Store) WithdrawnAmong(ctx context.Context, cid int64, ids []int64) (map[int64]bool, error) {
	q, args, err := sqlx.In("SELECT id FROM t_messages WHERE conversation_id = ? AND id IN (?) AND status <> ?", cid, ids, MessageNormal)
	if err != nil {
		return nil, fmt.Errorf("store: withdrawn among: %w", err)
	}
	var got []int64
	if err := s.db.SelectContext(ctx, &got, s.db.Rebind(q), args...); err != nil {
		return nil, fmt.Errorf("store: withdrawn among: %w", err)
	}
	out := make(map[int64]bool, len(got))
	for _, id := range got {
		out[id] = true
	}
	return out, nil
}

// MessagesBefore returns up to limit messages of a conversation with id <=
// upTo, newest first (the preview scan of the cold path).
func (s *Store) MessagesBefore(ctx context.Context, conversationID, upTo int64, limit int) ([]Message, error) {
	var out []Message
	err := s.db.SelectContext(ctx, &out, "SELECT "+messageReadColumns+" FROM t_messages WHERE conversation_id = ? AND id <= ? ORDER BY id DESC LIMIT ?",
		conversationID, upTo, limit)
	return out, err
}

// CountUnread counts the normal messages of a conversation with after < id
// <= upTo not sent by userID (deletions not subtracted).
func (s *Store) CountUnread(ctx context.Context, conversationID, userID, after, upTo int64) (int64, error) {
	var n int64
	err := s.db.GetContext(ctx, &n, `SELECT COUNT(*) FROM t_messages
WHERE conversation_id = ? AND id > ? AND id <= ? AND sender_id <> ? AND status = ?`,
		conversationID, after, upTo, userID, MessageNormal)
	return n, err
}

// CountUnreadAmong counts which of ids in a conversation are normal
// messages not sent by userID.
func (s *Store) CountUnreadAmong(ctx context.Context, conversationID, userID int64, ids []int64) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	q, args, err := sqlx.In("SELECT COUNT(*) FROM t_messages WHERE conversation_id = ? AND id IN (?) AND sender_id <> ? AND status = ?",
		conversationID, ids, userID, MessageNormal)
	if err != nil {
		return 0, err
	}
	var n int64
	err = s.db.GetContext(ctx, &n, q, args...)
	return n, err
}

// Recall is the outcome of RecallMessage.
type Recall struct {
	Message Message
	// Members are the conversation's members (the participants to reach);
	// nil for a group, whose per-member work deliver does.
	Members []int64
	// Group is true for a group conversation: no mailbox events were
	// written (deliver appends them, in chunks).
	Group bool
	// Already is true when the message was recalled before (nothing
	// written this time).
	Already bool
}

// recallEvent is the data of a message.recalled webhook event.
type recallEvent struct {
	MsgID          jsonid.ID `json:"msg_id"`
	ConversationID jsonid.ID `json:"conversation_id"`
	SenderID       jsonid.ID `json:"sender_id"`
	Group          bool      `json:"group"`
}

// deleteEvent is the data of a message.deleted webhook event.
type deleteEvent struct {
	MsgID          jsonid.ID `json:"msg_id"`
	ConversationID jsonid.ID `json:"conversation_id"`
	SenderID       jsonid.ID `json:"sender_id"`
	// OperatorID is the group owner or admin who deleted it; 0 for the
	// business API.
	OperatorID jsonid.ID `json:"operator_id"`
	Group      bool      `json:"group"`
}

// withdrawal is what recallOnce does: a sender's recall, or a deletion for
// everyone by an operator the caller authorized.
type withdrawal struct {
	status   int
	userID   int64 // the sender (recall) or the operator (delete)
	window   time.Duration
	recall   bool
	operator int64
}

// RecallMessage recalls msgID as userID: in one transaction it locks the
// message, checks the sender (ErrNotSender) and the window (ErrRecallWindow;
// window ≤ 0 means no limit), sets status recalled and, in a P2P
// conversation, appends one mailbox event per member built by event. A
// group's events are not written here: its members may be thousands, and
// the caller has deliver append them. ids must give at least one id per member
// (the event row ids). A message recalled before is reported with Already
// and nothing is written.
func (s *Store) RecallMessage(ctx context.Context, msgID, conversationID, userID int64, window time.Duration, now time.Time,
	ids func(n int) ([]int64, error), event func(member int64, m Message) MailboxEvent) (Recall, error) {
	return s.withdraw(ctx, msgID, conversationID, withdrawal{status: MessageRecalled, userID: userID, window: window, recall: true}, now, ids, event)
}

// DeleteForEveryone deletes msgID for every participant as RecallMessage
// recalls it, without the sender and window checks (the caller authorized
// operatorID; 0 for the business API): status deleted, the P2P members'
// mailbox events, a message.deleted webhook event. A message recalled or
// deleted before is reported with Already and nothing is written.
func (s *Store) DeleteForEveryone(ctx context.Context, msgID, conversationID, operatorID int64, now time.Time,
	ids func(n int) ([]int64, error), event func(member int64, m Message) MailboxEvent) (Recall, error) {
	return s.withdraw(ctx, msgID, conversationID, withdrawal{status: MessageDeleted, operator: operatorID}, now, ids, event)
}

func (s *Store) withdraw(ctx context.Context, msgID, conversationID int64, w withdrawal, now time.Time,
	ids func(n int) ([]int64, error), event func(member int64, m Message) MailboxEvent) (Recall, error) {
	var r Recall
	err := retry.Do(ctx, txRetry, func(ctx context.Context) (err error) {
		r, err = s.recallOnce(ctx, msgID, conversationID, w, now, ids, event)
		return err
	})
	switch {
	case err == ctx.Err() && err != nil:
		return Recall{}, err // ended while waiting to retry
	case IsRetryable(err):
		return Recall{}, fmt.Errorf("store: withdraw message: %w", err)
	}
	return r, err
}

func (s *Store) recallOnce(ctx context.Context, msgID, conversationID int64, w withdrawal, now time.Time,
	ids func(n int) ([]int64, error), event func(member int64, m Message) MailboxEvent) (Recall, error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return Recall{}, err
	}
	defer func() { _ = tx.Rollback() }()
	m, err := lockMessage(ctx, tx, msgID, conversationID)
	if err != nil {
		return Recall{}, err
	}
	if w.recall && m.SenderID != w.userID {
		return Recall{}, ErrNotSender
	}
	r := Recall{Message: m}
	if r.Group, r.Members, err = conversationMembersTx(ctx, tx, m.ConversationID); err != nil {
		return Recall{}, err
	}
	if m.Status != MessageNormal {
		// Recalled or deleted already: gone for everyone either way.
		r.Already = true
		return r, nil
	}
	if w.recall && w.window > 0 && now.Sub(m.CreatedAt) > w.window {
		return Recall{}, ErrRecallWindow
	}
	if _, err := tx.ExecContext(ctx, "UPDATE t_messages SET status = ? WHERE id = ?", w.status, m.ID); err != nil {
		return Recall{}, err
	}
	if err := appendMemberEventsTx(ctx, tx, r.Members, ids, func(u int64) MailboxEvent { return event(u, m) }); err != nil {
		return Recall{}, err
	}
	// Last before the commit (the dispatcher's settle rule).
	ev := pendingEvent{typ: EventMessageRecalled, conversationID: m.ConversationID,
		data: recallEvent{MsgID: jsonid.ID(m.ID), ConversationID: jsonid.ID(m.ConversationID), SenderID: jsonid.ID(m.SenderID), Group: r.Group}}
	if !w.recall {
		ev = pendingEvent{typ: EventMessageDeleted, conversationID: m.ConversationID,
			data: deleteEvent{MsgID: jsonid.ID(m.ID), ConversationID: jsonid.ID(m.ConversationID), SenderID: jsonid.ID(m.SenderID),
				OperatorID: jsonid.ID(w.operator), Group: r.Group}}
	}
	if err := s.writeWebhookEvents(ctx, tx, now, ev); err != nil {
		return Recall{}, err
	}
	if err := tx.Commit(); err != nil {
		return Recall{}, err
	}
	r.Message.Status = w.status
	return r, nil
}
