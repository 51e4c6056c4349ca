package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Media is one key logic handed out for an upload (t_media).
type Media struct {
	Key         string       `db:"media_key"`
	UploaderID  int64        `db:"uploader_id"`
	Kind        string       `db:"kind"`
	Size        int64        `db:"size"`
	ContentType string       `db:"content_type"`
	CompletedAt sql.NullTime `db:"completed_at"`
	CreatedAt   time.Time    `db:"created_at"`
}

// Completed reports whether the upload was checked and may be sent.
func (m Media) Completed() bool { return m.CompletedAt.Valid }

// InsertMedia records a key handed out for an upload.
func (s *Store) InsertMedia(ctx context.Context, m Media) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO t_media (media_key, uploader_id, kind, size, content_type, created_at)
		VALUES (?, ?, ?, ?, ?, ?)`, m.Key, m.UploaderID, m.Kind, m.Size, m.ContentType, ms(m.CreatedAt))
	if err != nil {
		return fmt.Errorf("store: insert media: %w", err)
	}
	return nil
}

// GetMedia reads the record of key; ErrNotFound when there is none.
func (s *Store) GetMedia(ctx context.Context, key string) (Media, error) {
	var m Media
	err := s.db.GetContext(ctx, &m, `SELECT media_key, uploader_id, kind, size, content_type, completed_at, created_at
		FROM t_media WHERE media_key = ?`, key)
	if errors.Is(err, sql.ErrNoRows) {
		return Media{}, ErrNotFound
	}
	if err != nil {
		return Media{}, fmt.Errorf("store: get media: %w", err)
	}
	return m, nil
}

// CompleteMedia marks key's upload checked, with the content type the
// object was sniffed as. A key already completed keeps its first answer:
// the object under a key never changes, so neither does its record.
func (s *Store) CompleteMedia(ctx context.Context, key, contentType string, now time.Time) error {
	_, err := s.db.ExecContext(ctx, `UPDATE t_media SET content_type = ?, completed_at = ?
		WHERE media_key = ? AND completed_at IS NULL`, contentType, ms(now), key)
	if err != nil {
		return fmt.Errorf("store: complete media: %w", err)
	}
	return nil
}
