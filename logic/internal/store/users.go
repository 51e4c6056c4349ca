package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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

// Profile is a user's row as the business API shows it.
type Profile struct {
	ID                 int64     `db:"id"`
	Nickname           string    `db:"nickname"`
	Avatar             string    `db:"avatar"`
	Extra              []byte    `db:"extra"`
	Status             int       `db:"status"`
	TokensValidAfterMs int64     `db:"tokens_valid_after_ms"`
	CreatedAt          time.Time `db:"created_at"`
	UpdatedAt          time.Time `db:"updated_at"`
}

// ProfileUpdate sets the non-nil fields of a user's profile.
type ProfileUpdate struct {
	ID       int64
	Nickname *string
	Avatar   *string
	// Extra is the compact JSON object; nil keeps the stored one.
	Extra []byte
}

// UpsertProfile creates the user with the given fields ("" for unset
// ones) or sets the given fields of an existing user, in one statement.
func (s *Store) UpsertProfile(ctx context.Context, u ProfileUpdate, now time.Time) error {
	var nick, avatar any
	insNick, insAvatar := "", ""
	if u.Nickname != nil {
		nick, insNick = *u.Nickname, *u.Nickname
	}
	if u.Avatar != nil {
		avatar, insAvatar = *u.Avatar, *u.Avatar
	}
	var extra any
	if u.Extra != nil {
		extra = u.Extra
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO t_users (id, nickname, avatar, extra, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE nickname = COALESCE(?, nickname), avatar = COALESCE(?, avatar),
  extra = COALESCE(?, extra), updated_at = VALUES(updated_at)`,
		u.ID, insNick, insAvatar, extra, ms(now), ms(now), nick, avatar, extra)
	if err != nil {
		return fmt.Errorf("store: upsert user %d: %w", u.ID, err)
	}
	return nil
}

// GetProfile reads a user's profile; ErrNotFound when there is no row.
func (s *Store) GetProfile(ctx context.Context, id int64) (Profile, error) {
	var p Profile
	err := s.db.GetContext(ctx, &p, `SELECT id, nickname, avatar, extra, status, tokens_valid_after_ms, created_at, updated_at
FROM t_users WHERE id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return Profile{}, ErrNotFound
	}
	if err != nil {
		return Profile{}, fmt.Errorf("store: get user %d: %w", id, err)
	}
	return p, nil
}

// EnableUser sets a user's status back to UserActive; ErrNotFound when the
// user has no row. Its revoked tokens stay revoked.
func (s *Store) EnableUser(ctx context.Context, id int64, now time.Time) error {
	res, err := s.db.ExecContext(ctx, "UPDATE t_users SET status = ?, updated_at = ? WHERE id = ?", UserActive, ms(now), id)
	if err != nil {
		return fmt.Errorf("store: enable user %d: %w", id, err)
	}
	// RowsAffected counts changed rows only (an active user changes
	// nothing), so existence is read separately.
	if n, err := res.RowsAffected(); err == nil && n > 0 {
		return nil
	}
	ok, err := s.UserExists(ctx, id)
	if err != nil {
		return fmt.Errorf("store: enable user %d: %w", id, err)
	}
	if !ok {
		return ErrNotFound
	}
	return nil
}

// RevokeTokens makes tokens of the user issued before validAfterMs invalid
// (never moving an earlier revocation back) and, with disable, sets the
// user's status to UserDisabled. A user without a row gets one, so tokens
// the business minted itself for a user who never connected are refused
// too. It returns the tokens_valid_after_ms in force.
func (s *Store) RevokeTokens(ctx context.Context, id, validAfterMs int64, disable bool, now time.Time) (int64, error) {
	status := UserActive
	if disable {
		status = UserDisabled
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO t_users (id, status, tokens_valid_after_ms, created_at, updated_at)
VALUES (?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE tokens_valid_after_ms = GREATEST(tokens_valid_after_ms, VALUES(tokens_valid_after_ms)),
  status = IF(?, VALUES(status), status), updated_at = VALUES(updated_at)`,
		id, status, validAfterMs, ms(now), ms(now), disable)
	if err != nil {
		return 0, fmt.Errorf("store: revoke tokens of %d: %w", id, err)
	}
	var v int64
	if err := s.db.GetContext(ctx, &v, "SELECT tokens_valid_after_ms FROM t_users WHERE id = ?", id); err != nil {
		return 0, fmt.Errorf("store: read tokens_valid_after_ms of %d: %w", id, err)
	}
	return v, nil
}
