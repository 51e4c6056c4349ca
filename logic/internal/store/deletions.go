package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/sparkim/spark/pkg/retry"
)

// DeleteForUser records that userID deleted msgID for themselves and, in
// the same transaction, appends event (the user's delete-for-me mailbox
// event, row id eventID) so every device of the user, including one that
// is offline and already holds the message, drops it on its next sync.
// Deleting again changes nothing and appends no event; deleted reports
// whether this call recorded the deletion. Deadlocks are retried.
func (s *Store) DeleteForUser(ctx context.Context, userID, conversationID, msgID, eventID int64, event MailboxEvent) (deleted bool, err error) {
	err = retry.Do(ctx, txRetry, func(ctx context.Context) (err error) {
		deleted, err = s.deleteForUserOnce(ctx, userID, conversationID, msgID, eventID, event)
		return err
	})
	if IsRetryable(err) {
		return false, fmt.Errorf("store: delete for user: %w", err)
	}
	return deleted, err
}

func (s *Store) deleteForUserOnce(ctx context.Context, userID, conversationID, msgID, eventID int64, event MailboxEvent) (bool, error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.ExecContext(ctx, "INSERT IGNORE INTO t_message_deletions (user_id, msg_id, conversation_id, created_at) VALUES (?, ?, ?, ?)",
		userID, msgID, conversationID, ms(time.Now()))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if n == 0 {
		return false, nil // deleted before: its event was appended then
	}
	if _, err := AppendMailboxTx(ctx, tx, []MailboxEvent{event}, []int64{eventID}); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, err
	}
	return true, nil
}

// DeletedAmong returns which of ids userID deleted.
func (s *Store) DeletedAmong(ctx context.Context, userID int64, ids []int64) (map[int64]bool, error) {
	out := map[int64]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	q, args, err := sqlx.In("SELECT msg_id FROM t_message_deletions WHERE user_id = ? AND msg_id IN (?)", userID, ids)
	if err != nil {
		return nil, err
	}
	var got []int64
	if err := s.db.SelectContext(ctx, &got, q, args...); err != nil {
		return nil, err
	}
	for _, id := range got {
		out[id] = true
	}
	return out, nil
}

// DeletedInRange returns the ids userID deleted in a conversation with
// after < id <= upTo, ascending, at most limit.
func (s *Store) DeletedInRange(ctx context.Context, userID, conversationID, after, upTo int64, limit int) ([]int64, error) {
	var out []int64
	err := s.db.SelectContext(ctx, &out, `SELECT msg_id FROM t_message_deletions
WHERE user_id = ? AND conversation_id = ? AND msg_id > ? AND msg_id <= ? ORDER BY msg_id LIMIT ?`,
		userID, conversationID, after, upTo, limit)
	return out, err
}
