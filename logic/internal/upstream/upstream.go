// Package upstream queues the frames devices address to business services
// (UPSTREAM, 22) and hands them to the services: as signed webhooks, an
// endpoint subscribed to the event type "upstream.<service>" being served
// by the webhook dispatcher, or by a long-poll pull with cumulative
// acknowledgements. A frame is one t_webhook_events row, written in one
// statement before the device's answer (docs/decisions.md 94).
package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/webhook"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/retry"
)

// TypePrefix starts the event type of every upstream item: the type of a
// service's items is TypePrefix + the service name.
const TypePrefix = store.EventUpstreamPrefix

// MaxUpstreamID bounds a client's upstream_id in bytes.
const MaxUpstreamID = 64

// maxItemData is the size of t_webhook_events.data (a BLOB): a body of
// control characters grows up to six times when JSON-escaped, so a body
// under logic.upstream.max_body may still not fit.
const maxItemData = 65535

// MaxPull is the most items one pull returns.
const MaxPull = 500

// IDs issues item ids (the MsgId generator, so items merge into the
// webhook order).
type IDs interface {
	Next(ctx context.Context) (int64, error)
}

// Service queues frames and serves pulls.
type Service struct {
	st   *store.Store
	ids  IDs
	cfg  config.Upstream
	hook config.Webhook
}

// New builds the service. hook supplies the settle bound and poll
// interval the webhook dispatcher reads the same rows with.
func New(st *store.Store, ids IDs, cfg config.Upstream, hook config.Webhook) *Service {
	return &Service{st: st, ids: ids, cfg: cfg, hook: hook}
}

// Frame is one UPSTREAM request of a device.
type Frame struct {
	UserID     int64
	DeviceID   string
	Service    string
	Body       string
	UpstreamID string
}

// Item is the data a service receives for a frame: the webhook's data
// field and a pulled item alike.
type Item struct {
	ID         jsonid.ID `json:"id"`
	Service    string    `json:"service"`
	UserID     jsonid.ID `json:"user_id"`
	DeviceID   string    `json:"device_id"`
	UpstreamID string    `json:"upstream_id,omitempty"`
	Body       string    `json:"body"`
	ReceivedAt time.Time `json:"received_at"`
}

// Queued is the answer to a frame.
type Queued struct {
	ID        int64
	Duplicate bool
}

// unknown is the refusal of a service not in logic.upstream.services:
// 40001 when none is named, 40401 otherwise.
func unknown(service string) error {
	if service == "" {
		return errcode.Invalid("service", "required")
	}
	return errcode.New(errcode.NotFound, fmt.Sprintf("not found: service %q is not a configured upstream service", service))
}

// Known reports whether name is a configured service.
func (s *Service) Known(name string) bool { return slices.Contains(s.cfg.Services, name) }

// Check refuses a frame that would not be queued: 40001 naming a missing
// or malformed field, 41301 for a body over logic.upstream.max_body, 40401
// for a service not in logic.upstream.services.
func (s *Service) Check(f Frame) error {
	switch {
	case f.Service == "":
		return unknown("")
	case len(f.UpstreamID) > MaxUpstreamID:
		return errcode.Invalid("upstream_id", fmt.Sprintf("longer than %d bytes", MaxUpstreamID))
	case !utf8.ValidString(f.UpstreamID) || strings.ContainsAny(f.UpstreamID, "\x00"):
		return errcode.Invalid("upstream_id", "not printable UTF-8")
	case len(f.Body) > s.cfg.MaxBody:
		return errcode.New(errcode.TooLarge, fmt.Sprintf("too large: body: %d bytes, at most %d (logic.upstream.max_body)", len(f.Body), s.cfg.MaxBody))
	case !s.Known(f.Service):
		return unknown(f.Service)
	}
	return nil
}

// Queue stores f durably and returns its id: a frame with an upstream_id
// the same user already used for the service returns the item queued
// then, Duplicate set, and stores nothing.
func (s *Service) Queue(ctx context.Context, f Frame) (Queued, error) {
	if err := s.Check(f); err != nil {
		return Queued{}, err
	}
	id, err := s.ids.Next(ctx)
	if err != nil {
		return Queued{}, errcode.Unavailable("upstream id", err)
	}
	now := time.Now()
	it := Item{ID: jsonid.ID(id), Service: f.Service, UserID: jsonid.ID(f.UserID), DeviceID: f.DeviceID,
		UpstreamID: f.UpstreamID, Body: f.Body, ReceivedAt: now.UTC().Truncate(time.Millisecond)}
	data, err := json.Marshal(it)
	if err != nil {
		return Queued{}, fmt.Errorf("upstream: %w", err)
	}
	if len(data) > maxItemData {
		return Queued{}, errcode.New(errcode.TooLarge, fmt.Sprintf("too large: body: %d bytes once JSON-escaped, at most %d", len(data), maxItemData))
	}
	row := store.UpstreamItem{ID: id, Type: TypePrefix + f.Service, Data: data, At: now}
	if f.UpstreamID != "" {
		row.DedupeKey = f.Service + ":" + strconv.FormatInt(f.UserID, 10) + ":" + f.UpstreamID
	}
	got, dup, err := s.st.QueueUpstream(ctx, row)
	if err != nil {
		return Queued{}, errcode.Unavailable("", err)
	}
	return Queued{ID: got, Duplicate: dup}, nil
}

// Pull returns up to limit of service's items after its acknowledged
// cursor, waiting up to wait for one to arrive (a long poll). Items handed
// out and not acknowledged stay hidden from further pulls for
// logic.upstream.visibility, then are handed out again; order is the id
// order, which is the order each device sent in.
func (s *Service) Pull(ctx context.Context, service string, limit int, wait time.Duration) ([]Item, error) {
	if !s.Known(service) {
		return nil, unknown(service)
	}
	if limit <= 0 || limit > MaxPull {
		limit = MaxPull
	}
	wait = min(max(wait, 0), s.cfg.MaxWait)
	deadline := time.Now().Add(wait)
	for {
		items, err := s.pullOnce(ctx, service, limit)
		if err != nil || len(items) > 0 || !time.Now().Before(deadline) {
			return items, err
		}
		if retry.Sleep(ctx, min(s.hook.PollInterval, time.Until(deadline))) != nil {
			return nil, errcode.Unavailable("", ctx.Err())
		}
	}
}

func (s *Service) pullOnce(ctx context.Context, service string, limit int) ([]Item, error) {
	c, err := s.st.GetUpstreamConsumer(ctx, service)
	if err != nil {
		return nil, errcode.Unavailable("", err)
	}
	now := time.Now()
	from := c.CursorID
	if c.VisibleAt.Valid && now.Before(c.VisibleAt.Time) {
		from = max(from, c.HandedUpTo)
	}
	// An id is read only once every write that took a smaller one has
	// committed (the webhook dispatcher's rule).
	bound, err := webhook.ReadBound(ctx, s.st, s.hook.Settle, now, from)
	if err != nil {
		return nil, errcode.Unavailable("", err)
	}
	if bound <= from {
		return nil, nil
	}
	rows, err := s.st.UpstreamEventsAfter(ctx, TypePrefix+service, from, bound, limit)
	if err != nil {
		return nil, errcode.Unavailable("", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	out := make([]Item, 0, len(rows))
	for _, r := range rows {
		var it Item
		if err := json.Unmarshal(r.Data, &it); err != nil {
			return nil, fmt.Errorf("upstream: item %d: %w", r.ID, err)
		}
		out = append(out, it)
	}
	if err := s.st.HandUpstream(ctx, service, rows[len(rows)-1].ID, now.Add(s.cfg.Visibility)); err != nil {
		return nil, errcode.Unavailable("", err)
	}
	return out, nil
}

// RunPrune deletes old items as the webhook dispatcher does (older than
// logic.webhook.retry_for plus a day, pulled or not) until ctx ends. Run
// it only while webhooks are off: otherwise the dispatcher prunes the
// same table.
func (s *Service) RunPrune(ctx context.Context, log *zap.Logger) {
	for {
		if err := webhook.Prune(ctx, s.st, s.hook); err != nil && ctx.Err() == nil {
			log.Warn("prune upstream items", zap.Error(err))
		}
		if retry.Sleep(ctx, webhook.PruneEvery) != nil {
			return
		}
	}
}

// Ack acknowledges every item of service up to and including id: they
// are never handed out again. An id past the newest item a pull could
// hand out now is refused (40001): it would skip items nobody saw.
func (s *Service) Ack(ctx context.Context, service string, id int64) (int64, error) {
	if !s.Known(service) {
		return 0, unknown(service)
	}
	c, err := s.st.GetUpstreamConsumer(ctx, service)
	if err != nil {
		return 0, errcode.Unavailable("", err)
	}
	newest := c.CursorID
	if id > c.CursorID {
		bound, err := webhook.ReadBound(ctx, s.st, s.hook.Settle, time.Now(), c.CursorID)
		if err != nil {
			return 0, errcode.Unavailable("", err)
		}
		if newest, err = s.st.NewestUpstream(ctx, TypePrefix+service, bound); err != nil {
			return 0, errcode.Unavailable("", err)
		}
	}
	if id <= 0 || id > newest {
		return 0, errcode.Invalid("up_to_id", fmt.Sprintf("%d is past the newest item a pull can hand out (%d)", id, newest))
	}
	c, err = s.st.AckUpstream(ctx, service, id)
	if err != nil {
		return 0, errcode.Unavailable("", err)
	}
	return c.CursorID, nil
}
