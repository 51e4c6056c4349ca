package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// User is the part of t_users logic needs.
type User struct {
	ID                 int64 `db:"id"`
	Status             int   `db:"status"`
	TokensValidAfterMs int64 `db:"tokens_valid_after_ms"`
}

// User statuses.
const (
	UserActive   = 1
	UserDisabled = 2
)

// EnsureUser inserts the user's row if it does not exist (INSERT IGNORE).
func (s *Store) EnsureUser(ctx context.Context, id int64, now time.Time) error {
	_, err := s.db.ExecContext(ctx, "INSERT IGNORE INTO t_users (id, created_at, updated_at) VALUES (?, ?, ?)", id, ms(now), ms(now))
	return err
}

// GetUser reads a user; ErrNotFound when there is no row.
func (s *Store) GetUser(ctx context.Context, id int64) (User, error) {
	var u User
	err := s.db.GetContext(ctx, &u, "SELECT id, status, tokens_valid_after_ms FROM t_users WHERE id = ?", id)
	if errors.Is(err, sql.ErrNoRows) {
		return User{}, ErrNotFound
	}
	return u, err
}

// UserExists reports whether the user has a row.
func (s *Store) UserExists(ctx context.Context, id int64) (bool, error) {
	var one int
	err := s.db.GetContext(ctx, &one, "SELECT 1 FROM t_users WHERE id = ?", id)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}
