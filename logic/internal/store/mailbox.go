package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/sparkim/spark/pkg/retry"
)

// MailboxEvent is a t_mailbox_events row.
type MailboxEvent struct {
	ID             int64     `db:"id"`
	UserID         int64     `db:"user_id"`
	DeviceID       string    `db:"device_id"`
	Seq            int64     `db:"seq"`
	EventType      int       `db:"event_type"`
	ConversationID int64     `db:"conversation_id"`
	MsgID          int64     `db:"msg_id"`
	Payload        []byte    `db:"payload"`
	CreatedAt      time.Time `db:"created_at"`
}

// MaxPayload bounds a mailbox event's payload (the column's size).
const MaxPayload = 4096

// AppendMailbox appends events in one transaction and returns their seqs
// in the order of events. ids gives each event's row id (len(ids) ==
// len(events)). Deadlocks are retried.
func (s *Store) AppendMailbox(ctx context.Context, events []MailboxEvent, ids []int64) ([]int64, error) {
	var seqs []int64
	err := retry.Do(ctx, txRetry, func(ctx context.Context) (err error) {
		seqs, err = s.appendMailboxOnce(ctx, events, ids)
		return err
	})
	switch {
	case err == nil:
		return seqs, nil
	case IsRetryable(err):
		return nil, fmt.Errorf("store: append mailbox: %w", err)
	}
	return nil, err
}

func (s *Store) appendMailboxOnce(ctx context.Context, events []MailboxEvent, ids []int64) ([]int64, error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	seqs, err := AppendMailboxTx(ctx, tx, events, ids)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return seqs, nil
}

// AppendMailboxTx appends events inside tx: each user's seq row in
// t_mailbox_seqs is locked (users in ascending order, so concurrent
// appends never deadlock on each other) and advanced, so seqs of one user
// commit in increasing order and a reader polling seq > cursor never skips
// one. It returns the seqs in the order of events.
func AppendMailboxTx(ctx context.Context, tx *sqlx.Tx, events []MailboxEvent, ids []int64) ([]int64, error) {
	if len(ids) != len(events) {
		return nil, fmt.Errorf("store: %d mailbox events but %d ids", len(events), len(ids))
	}
	byUser := map[int64][]int{}
	for i, e := range events {
		byUser[e.UserID] = append(byUser[e.UserID], i)
	}
	users := make([]int64, 0, len(byUser))
	for u := range byUser {
		users = append(users, u)
	}
	sort.Slice(users, func(i, j int) bool { return users[i] < users[j] })
	now := ms(time.Now())
	seqs := make([]int64, len(events))
	for _, u := range users {
		idx := byUser[u]
		n := int64(len(idx))
		if _, err := tx.ExecContext(ctx, `INSERT INTO t_mailbox_seqs (user_id, last_seq, updated_at) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE last_seq = last_seq + ?, updated_at = ?`, u, n, now, n, now); err != nil {
			return nil, err
		}
		var last int64
		if err := tx.GetContext(ctx, &last, "SELECT last_seq FROM t_mailbox_seqs WHERE user_id = ?", u); err != nil {
			return nil, err
		}
		for k, i := range idx {
			e := events[i]
			seq := last - n + 1 + int64(k)
			var payload any
			if len(e.Payload) > 0 {
				payload = e.Payload
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO t_mailbox_events
(id, user_id, device_id, seq, event_type, conversation_id, msg_id, payload, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				ids[i], e.UserID, e.DeviceID, seq, e.EventType, nullID(e.ConversationID), nullID(e.MsgID), payload, now); err != nil {
				return nil, err
			}
			seqs[i] = seq
		}
	}
	return seqs, nil
}

func nullID(id int64) any {
	if id == 0 {
		return nil
	}
	return id
}

// MailboxSince returns up to limit events of userID with seq > after that
// are for every device ("") or for deviceID, by seq. It reads the user's
// last seq first, in its own statement, and then only events up to it: the
// watermark read of ConversationPage, for the same reason (appends advance
// t_mailbox_seqs in the transaction that inserts the events).
func (s *Store) MailboxSince(ctx context.Context, userID int64, deviceID string, after int64, limit int) ([]MailboxEvent, error) {
	var upTo int64
	err := s.db.GetContext(ctx, &upTo, "SELECT last_seq FROM t_mailbox_seqs WHERE user_id = ?", userID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil // the user never had an event
	}
	if err != nil {
		return nil, err
	}
	if upTo <= after || limit <= 0 {
		return nil, nil
	}
	var out []MailboxEvent
	err = s.db.SelectContext(ctx, &out, `SELECT id, user_id, device_id, seq, event_type,
COALESCE(conversation_id, 0) AS conversation_id, COALESCE(msg_id, 0) AS msg_id, COALESCE(payload, '') AS payload, created_at
FROM t_mailbox_events WHERE user_id = ? AND seq > ? AND seq <= ? AND device_id IN ('', ?) ORDER BY seq LIMIT ?`,
		userID, after, upTo, deviceID, limit)
	return out, err
}
