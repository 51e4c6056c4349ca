package store

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"
)

// DeleteForUser records that userID deleted msgID for themselves
// (idempotent).
func (s *Store) DeleteForUser(ctx context.Context, userID, conversationID, msgID int64) error {
	_, err := s.db.ExecContext(ctx, "INSERT IGNORE INTO t_message_deletions (user_id, msg_id, conversation_id, created_at) VALUES (?, ?, ?, ?)",
		userID, msgID, conversationID, ms(time.Now()))
	return err
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
