package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// UpstreamItem is a client frame queued for a business service.
type UpstreamItem struct {
	ID   int64
	Type string
	// DedupeKey is the service, user and upstream_id of an idempotent
	// frame; "" when the client gave no upstream_id.
	DedupeKey string
	Data      []byte
	At        time.Time
}

// QueueUpstream writes it in one statement. When an item with the same
// dedupe key is already queued, nothing is written and the earlier
// item's id is returned with dup true.
func (s *Store) QueueUpstream(ctx context.Context, it UpstreamItem) (id int64, dup bool, err error) {
	var key any
	if it.DedupeKey != "" {
		key = it.DedupeKey
	}
	// A plain INSERT, not INSERT IGNORE: IGNORE would also turn an
	// oversized value into a silently truncated one.
	_, err = s.db.ExecContext(ctx, `INSERT INTO t_webhook_events (id, event_type, conversation_id, data, created_at, dedupe_key)
VALUES (?, ?, 0, ?, ?, ?)`, it.ID, it.Type, it.Data, ms(it.At), key)
	if err == nil {
		return it.ID, false, nil
	}
	if k, dupErr := duplicateKey(err); !dupErr || k != "uk_dedupe" {
		return 0, false, fmt.Errorf("store: queue upstream: %w", err)
	}
	if err := s.db.GetContext(ctx, &id, "SELECT id FROM t_webhook_events WHERE dedupe_key = ?", key); err != nil {
		return 0, false, fmt.Errorf("store: queue upstream: read duplicate: %w", err)
	}
	return id, true, nil
}

// UpstreamConsumer is a pulling service's read position.
type UpstreamConsumer struct {
	CursorID   int64        `db:"cursor_id"`
	HandedUpTo int64        `db:"handed_up_to"`
	VisibleAt  sql.NullTime `db:"visible_at"`
}

// GetUpstreamConsumer reads a service's position; a service that never
// pulled is at zero.
func (s *Store) GetUpstreamConsumer(ctx context.Context, service string) (UpstreamConsumer, error) {
	var c UpstreamConsumer
	err := s.db.GetContext(ctx, &c, "SELECT cursor_id, handed_up_to, visible_at FROM t_upstream_consumers WHERE service = ?", service)
	if errors.Is(err, sql.ErrNoRows) {
		return UpstreamConsumer{}, nil
	}
	if err != nil {
		return UpstreamConsumer{}, fmt.Errorf("store: upstream consumer: %w", err)
	}
	return c, nil
}

// UpstreamEventsAfter returns the events of type typ with after < id <=
// upTo in id order, at most limit.
func (s *Store) UpstreamEventsAfter(ctx context.Context, typ string, after, upTo int64, limit int) ([]WebhookEvent, error) {
	var out []WebhookEvent
	err := s.db.SelectContext(ctx, &out, `SELECT id, event_type, conversation_id, data, created_at FROM t_webhook_events
WHERE event_type = ? AND id > ? AND id <= ? ORDER BY id LIMIT ?`, typ, after, upTo, limit)
	if err != nil {
		return nil, fmt.Errorf("store: upstream events: %w", err)
	}
	return out, nil
}

// NewestUpstream is the largest id of type typ at or below upTo (0 when
// there is none).
func (s *Store) NewestUpstream(ctx context.Context, typ string, upTo int64) (int64, error) {
	var id sql.NullInt64
	if err := s.db.GetContext(ctx, &id, "SELECT MAX(id) FROM t_webhook_events WHERE event_type = ? AND id <= ?", typ, upTo); err != nil {
		return 0, fmt.Errorf("store: newest upstream: %w", err)
	}
	return id.Int64, nil
}

// HandUpstream records that the items up to upTo were handed to a puller
// and stay hidden from the next pull until visibleAt.
func (s *Store) HandUpstream(ctx context.Context, service string, upTo int64, visibleAt time.Time) error {
	now := ms(time.Now())
	_, err := s.db.ExecContext(ctx, `INSERT INTO t_upstream_consumers (service, handed_up_to, visible_at, updated_at) VALUES (?, ?, ?, ?)
ON DUPLICATE KEY UPDATE handed_up_to = VALUES(handed_up_to), visible_at = VALUES(visible_at), updated_at = VALUES(updated_at)`,
		service, upTo, ms(visibleAt), now)
	if err != nil {
		return fmt.Errorf("store: hand upstream: %w", err)
	}
	return nil
}

// AckUpstream moves a service's cursor to upTo (never back); once it
// reaches what was handed out, the next pull starts at once after it.
func (s *Store) AckUpstream(ctx context.Context, service string, upTo int64) (UpstreamConsumer, error) {
	now := ms(time.Now())
	_, err := s.db.ExecContext(ctx, `INSERT INTO t_upstream_consumers (service, cursor_id, handed_up_to, updated_at) VALUES (?, ?, ?, ?)
ON DUPLICATE KEY UPDATE visible_at = IF(GREATEST(cursor_id, VALUES(cursor_id)) >= handed_up_to, NULL, visible_at),
cursor_id = GREATEST(cursor_id, VALUES(cursor_id)), updated_at = VALUES(updated_at)`, service, upTo, upTo, now)
	if err != nil {
		return UpstreamConsumer{}, fmt.Errorf("store: ack upstream: %w", err)
	}
	return s.GetUpstreamConsumer(ctx, service)
}
