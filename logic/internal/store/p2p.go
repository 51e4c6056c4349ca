package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sparkim/spark/pkg/retry"
)

// ConversationP2P is t_conversations.type of a P2P conversation.
const ConversationP2P = 1

// maxTxAttempts bounds the re-runs of a transaction after a deadlock or a
// lock wait timeout.
const maxTxAttempts = 5

// txRetry re-runs a transaction that lost a deadlock or a lock wait: up to
// maxTxAttempts tries, waiting 5 ms longer before each retry.
var txRetry = retry.Policy{Initial: 5 * time.Millisecond, Step: 5 * time.Millisecond, Attempts: maxTxAttempts, Retryable: IsRetryable}

// P2P is a pair of users and their one conversation.
type P2P struct {
	ConversationID int64 `db:"conversation_id"`
	UserSmall      int64 `db:"user_small"`
	UserBig        int64 `db:"user_big"`
}

// Has reports whether uid is one of the pair.
func (p P2P) Has(uid int64) bool { return uid == p.UserSmall || uid == p.UserBig }

// Peer returns the other user of the pair.
func (p P2P) Peer(uid int64) int64 {
	if uid == p.UserSmall {
		return p.UserBig
	}
	return p.UserSmall
}

// Pair orders two user ids.
func Pair(a, b int64) (small, big int64) {
	if a < b {
		return a, b
	}
	return b, a
}

// FindP2P returns the conversation of a pair; ErrNotFound when they never
// talked.
func (s *Store) FindP2P(ctx context.Context, a, b int64) (int64, error) {
	small, big := Pair(a, b)
	var id int64
	err := s.db.GetContext(ctx, &id, "SELECT conversation_id FROM t_p2p_conversations WHERE user_small = ? AND user_big = ?", small, big)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrNotFound
	}
	return id, err
}

// P2PByConversation returns the pair of a P2P conversation; ErrNotFound
// when conversationID is no P2P conversation.
func (s *Store) P2PByConversation(ctx context.Context, conversationID int64) (P2P, error) {
	var p P2P
	err := s.db.GetContext(ctx, &p, "SELECT conversation_id, user_small, user_big FROM t_p2p_conversations WHERE conversation_id = ?", conversationID)
	if errors.Is(err, sql.ErrNoRows) {
		return P2P{}, ErrNotFound
	}
	return p, err
}

// ConversationType returns t_conversations.type; ErrNotFound without a row.
func (s *Store) ConversationType(ctx context.Context, conversationID int64) (int, error) {
	var t int
	err := s.db.GetContext(ctx, &t, "SELECT type FROM t_conversations WHERE id = ?", conversationID)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrNotFound
	}
	return t, err
}

// GetOrCreateP2P returns the conversation of the pair (a, b), creating it
// (conversation, pair row, both members) when they never talked. Racing
// callers for one pair all get the same conversation: the pair row's unique
// key decides, and only the caller whose id won creates the rest.
func (s *Store) GetOrCreateP2P(ctx context.Context, a, b int64, newID func(context.Context) (int64, error)) (int64, error) {
	if id, err := s.FindP2P(ctx, a, b); err == nil || !errors.Is(err, ErrNotFound) {
		return id, err
	}
	var id int64
	err := retry.Do(ctx, txRetry, func(ctx context.Context) (err error) {
		id, err = s.createP2P(ctx, a, b, newID)
		return err
	})
	switch {
	case err == nil:
		return id, nil
	case IsRetryable(err):
		return 0, fmt.Errorf("store: create p2p conversation: %w", err)
	}
	return 0, err
}

func (s *Store) createP2P(ctx context.Context, a, b int64, newID func(context.Context) (int64, error)) (int64, error) {
	small, big := Pair(a, b)
	mine, err := newID(ctx)
	if err != nil {
		return 0, err
	}
	now := ms(time.Now())
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `INSERT INTO t_p2p_conversations (user_small, user_big, conversation_id, created_at) VALUES (?, ?, ?, ?)
ON DUPLICATE KEY UPDATE id = id`, small, big, mine, now); err != nil {
		return 0, err
	}
	var got int64
	if err := tx.GetContext(ctx, &got, "SELECT conversation_id FROM t_p2p_conversations WHERE user_small = ? AND user_big = ? FOR UPDATE", small, big); err != nil {
		return 0, err
	}
	if got == mine {
		if _, err := tx.ExecContext(ctx, "INSERT INTO t_conversations (id, type, last_msg_id, last_msg_at, created_at) VALUES (?, ?, 0, ?, ?)",
			mine, ConversationP2P, now, now); err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO t_conversation_members (conversation_id, user_id, joined_at) VALUES (?, ?, ?), (?, ?, ?)",
			mine, small, now, mine, big, now); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return got, nil
}
