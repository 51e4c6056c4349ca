package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// PushToken is one device's registered push token (t_push_tokens).
type PushToken struct {
	UserID   int64  `db:"user_id"`
	DeviceID string `db:"device_id"`
	Platform int    `db:"platform"`
	Token    string `db:"token"`
	Topic    string `db:"topic"`
	Sandbox  bool   `db:"sandbox"`
	Gateway  string `db:"gateway"`
}

// SavePushToken stores t as the token of (t.UserID, t.DeviceID), replacing
// the device's previous one, and removes the same token from any other
// device or user first: a phone signed in to another account must not be
// notified for the first one.
func (s *Store) SavePushToken(ctx context.Context, t PushToken, now time.Time) error {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: save push token: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `DELETE FROM t_push_tokens WHERE platform = ? AND token = ? AND NOT (user_id = ? AND device_id = ?)`,
		t.Platform, t.Token, t.UserID, t.DeviceID); err != nil {
		return fmt.Errorf("store: save push token: move: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO t_push_tokens (user_id, device_id, platform, token, topic, sandbox, gateway, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON DUPLICATE KEY UPDATE platform = VALUES(platform), token = VALUES(token), topic = VALUES(topic),
			sandbox = VALUES(sandbox), gateway = VALUES(gateway), updated_at = VALUES(updated_at)`,
		t.UserID, t.DeviceID, t.Platform, t.Token, t.Topic, t.Sandbox, t.Gateway, ms(now)); err != nil {
		return fmt.Errorf("store: save push token: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: save push token: commit: %w", err)
	}
	return nil
}

// DeletePushToken removes the device's token; when token is not empty only
// if it is still that token, so a provider's late "dead token" answer
// never removes the one the device registered since. It reports whether a
// row went.
func (s *Store) DeletePushToken(ctx context.Context, userID int64, deviceID, token string) (bool, error) {
	q, args := `DELETE FROM t_push_tokens WHERE user_id = ? AND device_id = ?`, []any{userID, deviceID}
	if token != "" {
		q, args = q+` AND token = ?`, append(args, token)
	}
	r, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return false, fmt.Errorf("store: delete push token: %w", err)
	}
	n, err := r.RowsAffected()
	return n > 0, err
}

// PushTokens returns the tokens of a user's devices, by device id.
func (s *Store) PushTokens(ctx context.Context, userID int64) ([]PushToken, error) {
	var out []PushToken
	err := s.db.SelectContext(ctx, &out, `SELECT user_id, device_id, platform, token, topic, sandbox, gateway
		FROM t_push_tokens WHERE user_id = ? ORDER BY device_id`, userID)
	if err != nil {
		return nil, fmt.Errorf("store: push tokens of %d: %w", userID, err)
	}
	return out, nil
}

// Preview settings (t_push_settings.preview).
const (
	PreviewFull   = 1
	PreviewSender = 2
	PreviewNone   = 3
)

// SetPushPreview sets a user's notification preview.
func (s *Store) SetPushPreview(ctx context.Context, userID int64, preview int, now time.Time) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO t_push_settings (user_id, preview, updated_at) VALUES (?, ?, ?)
		ON DUPLICATE KEY UPDATE preview = VALUES(preview), updated_at = VALUES(updated_at)`, userID, preview, ms(now))
	if err != nil {
		return fmt.Errorf("store: set push preview of %d: %w", userID, err)
	}
	return nil
}

// PushPreview returns a user's notification preview (PreviewFull when
// never set).
func (s *Store) PushPreview(ctx context.Context, userID int64) (int, error) {
	var p int
	err := s.db.GetContext(ctx, &p, `SELECT preview FROM t_push_settings WHERE user_id = ?`, userID)
	if errors.Is(err, sql.ErrNoRows) {
		return PreviewFull, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: push preview of %d: %w", userID, err)
	}
	return p, nil
}

// PushTarget is a device to notify of a message: its token and its
// owner's preview setting.
type PushTarget struct {
	PushToken
	Preview int `db:"preview"`
}

// PushTargets returns the push tokens of those of users who are members of
// conversationID and have not muted it, with each owner's preview
// setting, in one query: mute is read where it is decided (the member
// row), so a notification never outlives a mute.
func (s *Store) PushTargets(ctx context.Context, conversationID int64, users []int64) ([]PushTarget, error) {
	if len(users) == 0 {
		return nil, nil
	}
	args := make([]any, 0, len(users)+1)
	args = append(args, conversationID)
	for _, u := range users {
		args = append(args, u)
	}
	q := `SELECT t.user_id, t.device_id, t.platform, t.token, t.topic, t.sandbox, t.gateway, COALESCE(s.preview, ` + fmt.Sprint(PreviewFull) + `) AS preview
		FROM t_push_tokens t
		JOIN t_conversation_members m ON m.conversation_id = ? AND m.user_id = t.user_id AND m.muted = 0
		LEFT JOIN t_push_settings s ON s.user_id = t.user_id
		WHERE t.user_id IN (?` + strings.Repeat(",?", len(users)-1) + `)
		ORDER BY t.user_id, t.device_id`
	var out []PushTarget
	if err := s.db.SelectContext(ctx, &out, q, args...); err != nil {
		return nil, fmt.Errorf("store: push targets of conversation %d: %w", conversationID, err)
	}
	return out, nil
}

// TotalUnread counts, over every conversation the user has not muted, the
// normal messages of others after the user's read mark: the badge of a
// user whose conversation list is not in Redis. It reads the member rows
// and the messages index; messages the user deleted for themselves still
// count (the hot list, when built, is exact).
func (s *Store) TotalUnread(ctx context.Context, userID int64) (int64, error) {
	var n int64
	err := s.db.GetContext(ctx, &n, `SELECT COUNT(*) FROM t_conversation_members cm
		JOIN t_messages m ON m.conversation_id = cm.conversation_id AND m.id > cm.last_read_msg_id
		WHERE cm.user_id = ? AND cm.muted = 0 AND m.sender_id <> ? AND m.status = ?`, userID, userID, MessageNormal)
	if err != nil {
		return 0, fmt.Errorf("store: total unread of %d: %w", userID, err)
	}
	return n, nil
}
