package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/sparkim/spark/pkg/jsonid"
)

// Webhook event types written to t_webhook_events. message.sent is not
// among them: it is read from t_messages.
const (
	EventMessageRecalled     = "message.recalled"
	EventMessageDeleted      = "message.deleted"
	EventMessageEdited       = "message.edited"
	EventMessageReacted      = "message.reacted"
	EventGroupCreated        = "group.created"
	EventGroupMembersAdded   = "group.members_added"
	EventGroupMembersRemoved = "group.members_removed"
	EventGroupRoleChanged    = "group.role_changed"
	EventGroupMemberMuted    = "group.member_muted"
	EventGroupMuteAll        = "group.mute_all_changed"
	EventGroupDissolved      = "group.dissolved"
	EventFriendRequested     = "friend.requested"
	EventFriendAdded         = "friend.added"
	EventFriendRejected      = "friend.rejected"
	EventFriendRemoved       = "friend.removed"
	EventBlockAdded          = "block.added"
	EventBlockRemoved        = "block.removed"
	EventUserOnline          = "user.online"
	EventUserOffline         = "user.offline"
	// EventUpstreamPrefix starts the type of a device's UPSTREAM frame:
	// "upstream.<service>" (logic/internal/upstream).
	EventUpstreamPrefix = "upstream."
)

// WebhookEvent is a t_webhook_events row.
type WebhookEvent struct {
	ID             int64           `db:"id"`
	Type           string          `db:"event_type"`
	ConversationID int64           `db:"conversation_id"`
	Data           json.RawMessage `db:"data"`
	CreatedAt      time.Time       `db:"created_at"`
}

// pendingEvent is an event a transaction records; its id is taken when it
// is written, inside the transaction, so the id is no older than the
// commit by more than the transaction's own statements (the dispatcher's
// settle rule).
type pendingEvent struct {
	typ            string
	conversationID int64
	data           any
}

// RecordWebhookEvents makes the changes that have webhook events (recall,
// group, friend, block, online) write them to t_webhook_events in their
// own transaction, with ids from ids (the MsgId generator). Without it
// nothing is recorded. Call before the store is shared.
func (s *Store) RecordWebhookEvents(ids func(context.Context) (int64, error)) { s.webhookIDs = ids }

// writeWebhookEvents inserts evs in tx when events are recorded.
func (s *Store) writeWebhookEvents(ctx context.Context, tx sqlx.ExecerContext, now time.Time, evs ...pendingEvent) error {
	if s.webhookIDs == nil || len(evs) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("INSERT INTO t_webhook_events (id, event_type, conversation_id, data, created_at) VALUES ")
	args := make([]any, 0, 5*len(evs))
	for i, e := range evs {
		id, err := s.webhookIDs(ctx)
		if err != nil {
			return fmt.Errorf("webhook event id: %w", err)
		}
		data, err := json.Marshal(e.data)
		if err != nil {
			return fmt.Errorf("webhook event %s: %w", e.typ, err)
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?)")
		args = append(args, id, e.typ, e.conversationID, data, ms(now))
	}
	_, err := tx.ExecContext(ctx, b.String(), args...)
	return err
}

// presenceEvent is the data of a user.online or user.offline event: the
// device that was the user's first in or last out.
type presenceEvent struct {
	UserID   jsonid.ID `json:"user_id"`
	DeviceID string    `json:"device_id"`
}

// UserPresence writes a user.online or user.offline event in its own
// statement (presence lives in Redis; there is no transaction to join).
func (s *Store) UserPresence(ctx context.Context, userID int64, deviceID string, online bool) error {
	typ := EventUserOffline
	if online {
		typ = EventUserOnline
	}
	return s.writeWebhookEvents(ctx, s.db, time.Now(), pendingEvent{typ: typ, data: presenceEvent{UserID: jsonid.ID(userID), DeviceID: deviceID}})
}

// WebhookMessage is a t_messages row with what a message.sent event says
// about its conversation: the P2P pair or the group.
type WebhookMessage struct {
	Message
	ConversationType int           `db:"conversation_type"`
	UserSmall        sql.NullInt64 `db:"user_small"`
	UserBig          sql.NullInt64 `db:"user_big"`
	GroupID          sql.NullInt64 `db:"group_id"`
}

// WebhookMessagesAfter returns the messages with after < id <= upTo in id
// order, at most limit: a primary-key range, so it costs the send path
// nothing.
func (s *Store) WebhookMessagesAfter(ctx context.Context, after, upTo int64, limit int) ([]WebhookMessage, error) {
	var out []WebhookMessage
	err := s.db.SelectContext(ctx, &out, `SELECT m.id, m.conversation_id, m.sender_id, m.sender_device, m.client_msg_id,
m.message_type, m.content, m.status, m.created_at, c.type AS conversation_type, p.user_small, p.user_big, g.id AS group_id
FROM t_messages m JOIN t_conversations c ON c.id = m.conversation_id
LEFT JOIN t_p2p_conversations p ON p.conversation_id = m.conversation_id
LEFT JOIN t_groups g ON g.conversation_id = m.conversation_id
WHERE m.id > ? AND m.id <= ? ORDER BY m.id LIMIT ?`, after, upTo, limit)
	if err != nil {
		return nil, fmt.Errorf("store: webhook messages: %w", err)
	}
	return out, nil
}

// OldestStatementAge is how long the longest statement now running on
// this database (on another connection) has been running, by the
// server's clock, rounded up to the next second (zero when none runs).
// A send's or an event's transaction takes its id just before the
// request that commits it, so the webhook tail, kept that much further
// back, waits for a commit that stalls in MySQL past
// logic.webhook.settle instead of passing over its id. It reads the
// process list, which is built on every read and shows the threads of
// the same user without any privilege (INNODB_TRX, by contrast, is a
// cache that frequent readers keep from refreshing).
func (s *Store) OldestStatementAge(ctx context.Context) (time.Duration, error) {
	var secs sql.NullInt64
	err := s.db.GetContext(ctx, &secs, `SELECT MAX(TIME) FROM information_schema.PROCESSLIST
WHERE DB = DATABASE() AND COMMAND = 'Query' AND ID <> CONNECTION_ID()`)
	if err != nil {
		return 0, fmt.Errorf("store: oldest running statement: %w", err)
	}
	if !secs.Valid || secs.Int64 < 0 {
		return 0, nil
	}
	return time.Duration(secs.Int64+1) * time.Second, nil
}

// WebhookEventsAfter returns the recorded events with after < id <= upTo
// in id order, at most limit.
func (s *Store) WebhookEventsAfter(ctx context.Context, after, upTo int64, limit int) ([]WebhookEvent, error) {
	var out []WebhookEvent
	err := s.db.SelectContext(ctx, &out, `SELECT id, event_type, conversation_id, data, created_at FROM t_webhook_events
WHERE id > ? AND id <= ? ORDER BY id LIMIT ?`, after, upTo, limit)
	if err != nil {
		return nil, fmt.Errorf("store: webhook events: %w", err)
	}
	return out, nil
}

// PruneWebhookEvents deletes up to limit recorded events older than before
// and returns how many it deleted.
func (s *Store) PruneWebhookEvents(ctx context.Context, before time.Time, limit int) (int64, error) {
	res, err := s.db.ExecContext(ctx, "DELETE FROM t_webhook_events WHERE created_at < ? ORDER BY id LIMIT ?", ms(before), limit)
	if err != nil {
		return 0, fmt.Errorf("store: prune webhook events: %w", err)
	}
	return res.RowsAffected()
}

// Endpoint statuses (t_webhook_endpoints.status).
const (
	EndpointActive   = 1
	EndpointDisabled = 2
	EndpointGone     = 3
	EndpointDead     = 4
)

// WebhookEndpoint is a t_webhook_endpoints row.
type WebhookEndpoint struct {
	ID             int64        `db:"id"`
	URL            string       `db:"url"`
	Events         string       `db:"events"`
	Secret         string       `db:"secret"`
	OldSecret      string       `db:"old_secret"`
	OldSecretUntil sql.NullTime `db:"old_secret_until"`
	Status         int          `db:"status"`
	CursorID       int64        `db:"cursor_id"`
	Attempts       int          `db:"attempts"`
	FailingSince   sql.NullTime `db:"failing_since"`
	NextAttemptAt  sql.NullTime `db:"next_attempt_at"`
	LastError      string       `db:"last_error"`
	FromConfig     bool         `db:"from_config"`
	CreatedAt      time.Time    `db:"created_at"`
	UpdatedAt      time.Time    `db:"updated_at"`
}

const endpointColumns = `id, url, events, secret, old_secret, old_secret_until, status, cursor_id, attempts, failing_since,
next_attempt_at, last_error, from_config, created_at, updated_at`

// CreateWebhookEndpoint inserts an active endpoint whose first event is the
// one after cursor, and returns it.
func (s *Store) CreateWebhookEndpoint(ctx context.Context, url, events, secret string, cursor int64, fromConfig bool) (WebhookEndpoint, error) {
	now := ms(time.Now())
	res, err := s.db.ExecContext(ctx, `INSERT INTO t_webhook_endpoints (url, events, secret, status, cursor_id, from_config, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, url, events, secret, EndpointActive, cursor, fromConfig, now, now)
	if err != nil {
		return WebhookEndpoint{}, fmt.Errorf("store: create webhook endpoint: %w", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return WebhookEndpoint{}, fmt.Errorf("store: create webhook endpoint: %w", err)
	}
	return s.GetWebhookEndpoint(ctx, id)
}

// WithConfigLock runs fn while holding a MySQL named lock, so logic
// processes starting together create each endpoint of logic.webhook.urls
// once (the table has no key on the URL: it may be 2048 bytes).
func (s *Store) WithConfigLock(ctx context.Context, fn func(ctx context.Context) error) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("store: webhook config lock: %w", err)
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK('spark_webhook_config', 10)").Scan(&got); err != nil {
		return fmt.Errorf("store: webhook config lock: %w", err)
	}
	if got.Int64 != 1 {
		return errors.New("store: webhook config lock: held by another logic for 10 s")
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK('spark_webhook_config')")
	}()
	return fn(ctx)
}

// ConfigWebhookEndpoint returns the endpoint logic.webhook.urls created for
// url; ErrNotFound when there is none.
func (s *Store) ConfigWebhookEndpoint(ctx context.Context, url string) (WebhookEndpoint, error) {
	var e WebhookEndpoint
	err := s.db.GetContext(ctx, &e, "SELECT "+endpointColumns+" FROM t_webhook_endpoints WHERE from_config = 1 AND url = ? ORDER BY id LIMIT 1", url)
	if errors.Is(err, sql.ErrNoRows) {
		return WebhookEndpoint{}, ErrNotFound
	}
	if err != nil {
		return WebhookEndpoint{}, fmt.Errorf("store: webhook endpoint: %w", err)
	}
	return e, nil
}

// GetWebhookEndpoint reads one endpoint; ErrNotFound when it does not exist.
func (s *Store) GetWebhookEndpoint(ctx context.Context, id int64) (WebhookEndpoint, error) {
	var e WebhookEndpoint
	err := s.db.GetContext(ctx, &e, "SELECT "+endpointColumns+" FROM t_webhook_endpoints WHERE id = ?", id)
	if errors.Is(err, sql.ErrNoRows) {
		return WebhookEndpoint{}, ErrNotFound
	}
	if err != nil {
		return WebhookEndpoint{}, fmt.Errorf("store: webhook endpoint %d: %w", id, err)
	}
	return e, nil
}

// ListWebhookEndpoints returns every endpoint by id.
func (s *Store) ListWebhookEndpoints(ctx context.Context) ([]WebhookEndpoint, error) {
	var out []WebhookEndpoint
	if err := s.db.SelectContext(ctx, &out, "SELECT "+endpointColumns+" FROM t_webhook_endpoints ORDER BY id"); err != nil {
		return nil, fmt.Errorf("store: webhook endpoints: %w", err)
	}
	return out, nil
}

// AdvanceWebhookCursor moves an endpoint's cursor from cursor to to and
// clears its retry state, only while the cursor is still cursor and the
// endpoint active: false when an operator replayed or disabled it
// meanwhile (the dispatcher then reloads it).
func (s *Store) AdvanceWebhookCursor(ctx context.Context, id, cursor, to int64) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE t_webhook_endpoints SET cursor_id = ?, attempts = 0, failing_since = NULL,
next_attempt_at = NULL, last_error = '', updated_at = ? WHERE id = ? AND cursor_id = ? AND status = ?`,
		to, ms(time.Now()), id, cursor, EndpointActive)
	return affected(res, err, "advance webhook cursor")
}

// WebhookFailure is the retry state after a failed attempt.
type WebhookFailure struct {
	Attempts     int
	FailingSince time.Time
	NextAttempt  time.Time
	Error        string
	// Status is EndpointActive to retry, EndpointGone or EndpointDead to
	// stop.
	Status int
}

// RecordWebhookFailure stores the retry state of the event after cursor,
// only while the cursor is still cursor and the endpoint active.
func (s *Store) RecordWebhookFailure(ctx context.Context, id, cursor int64, f WebhookFailure) (bool, error) {
	if len(f.Error) > 512 {
		f.Error = f.Error[:512]
	}
	res, err := s.db.ExecContext(ctx, `UPDATE t_webhook_endpoints SET attempts = ?, failing_since = ?, next_attempt_at = ?,
last_error = ?, status = ?, updated_at = ? WHERE id = ? AND cursor_id = ? AND status = ?`,
		f.Attempts, ms(f.FailingSince), ms(f.NextAttempt), f.Error, f.Status, ms(time.Now()), id, cursor, EndpointActive)
	return affected(res, err, "record webhook failure")
}

// SetWebhookStatus sets an endpoint's status (disable, or enable again
// where it stopped); ErrNotFound when it does not exist.
func (s *Store) SetWebhookStatus(ctx context.Context, id int64, status int) error {
	return s.updateEndpoint(ctx, id, "set webhook status", "status = ?, attempts = 0, failing_since = NULL, next_attempt_at = NULL", status)
}

// ReplayWebhookEndpoint makes an endpoint active again with its cursor at
// from: every event after from is sent again, in order.
func (s *Store) ReplayWebhookEndpoint(ctx context.Context, id, from int64) error {
	return s.updateEndpoint(ctx, id, "replay webhook endpoint",
		"status = ?, cursor_id = ?, attempts = 0, failing_since = NULL, next_attempt_at = NULL, last_error = ''", EndpointActive, from)
}

// RotateWebhookSecret makes secret the endpoint's secret and keeps the old
// one signing too until graceUntil.
func (s *Store) RotateWebhookSecret(ctx context.Context, id int64, secret string, graceUntil time.Time) error {
	return s.updateEndpoint(ctx, id, "rotate webhook secret", "old_secret = secret, old_secret_until = ?, secret = ?", ms(graceUntil), secret)
}

func (s *Store) updateEndpoint(ctx context.Context, id int64, op, set string, args ...any) error {
	res, err := s.db.ExecContext(ctx, "UPDATE t_webhook_endpoints SET "+set+", updated_at = ? WHERE id = ?", append(args, ms(time.Now()), id)...)
	if _, err := affected(res, err, op); err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		// Zero rows changed: no such endpoint, or nothing to change.
		_, err := s.GetWebhookEndpoint(ctx, id)
		return err
	}
	return nil
}

func affected(res sql.Result, err error, op string) (bool, error) {
	if err != nil {
		return false, fmt.Errorf("store: %s: %w", op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("store: %s: %w", op, err)
	}
	return n > 0, nil
}

// OldestWebhookEventAfter returns the lowest event id above cursor, of
// t_webhook_events and, with messages, of t_messages (the two sources an
// endpoint's cursor runs over), or 0 when there is none: the oldest event
// an endpoint at cursor has not had yet. Two primary-key seeks.
func (s *Store) OldestWebhookEventAfter(ctx context.Context, cursor int64, messages bool) (int64, error) {
	var ev, msg sql.NullInt64
	if err := s.db.GetContext(ctx, &ev, "SELECT MIN(id) FROM t_webhook_events WHERE id > ?", cursor); err != nil {
		return 0, err
	}
	if messages {
		if err := s.db.GetContext(ctx, &msg, "SELECT MIN(id) FROM t_messages WHERE id > ?", cursor); err != nil {
			return 0, err
		}
	}
	switch {
	case ev.Valid && msg.Valid:
		return min(ev.Int64, msg.Int64), nil
	case ev.Valid:
		return ev.Int64, nil
	case msg.Valid:
		return msg.Int64, nil
	}
	return 0, nil
}
