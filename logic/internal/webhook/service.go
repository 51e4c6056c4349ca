package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/stdwebhook"
)

// EventTypes are every event type an endpoint may subscribe to.
var EventTypes = []string{
	EventMessageSent, store.EventMessageRecalled, store.EventMessageDeleted, store.EventMessageEdited, store.EventMessageReacted,
	store.EventGroupCreated, store.EventGroupMembersAdded, store.EventGroupMembersRemoved, store.EventGroupRoleChanged,
	store.EventGroupMemberMuted, store.EventGroupMuteAll, store.EventGroupDissolved,
	store.EventFriendRequested, store.EventFriendAdded, store.EventFriendRejected, store.EventFriendRemoved,
	store.EventBlockAdded, store.EventBlockRemoved,
	store.EventUserOnline, store.EventUserOffline,
}

// invalid is the refusal of bad input in field (40001 naming it, with
// err's reason); nothing was changed.
func invalid(field string, err error) error {
	e := errcode.Invalid(field, strings.TrimPrefix(err.Error(), "webhook: "))
	e.Err = err
	return e
}

// MaxRotationGrace bounds how long an old secret may keep signing.
const MaxRotationGrace = 7 * 24 * time.Hour

// Service manages endpoints: the business API's webhook calls and the
// endpoints of logic.webhook.urls.
type Service struct {
	st       *store.Store
	cfg      config.Webhook
	upstream []string
	client   *http.Client
	resolver *net.Resolver
}

// NewService builds the endpoint manager. An endpoint may also subscribe
// to "upstream.<service>" for each of upstreamServices
// (logic.upstream.services).
func NewService(st *store.Store, cfg config.Webhook, upstreamServices []string) *Service {
	return &Service{st: st, cfg: cfg, upstream: upstreamServices, client: NewHTTPClient(cfg), resolver: net.DefaultResolver}
}

// EnsureConfigEndpoints creates the endpoints of logic.webhook.urls that
// do not exist yet; they receive the events from now on.
func (s *Service) EnsureConfigEndpoints(ctx context.Context) error {
	if len(s.cfg.URLs) == 0 {
		return nil
	}
	return s.st.WithConfigLock(ctx, s.ensureConfigEndpoints)
}

func (s *Service) ensureConfigEndpoints(ctx context.Context) error {
	for _, u := range s.cfg.URLs {
		_, err := s.st.ConfigWebhookEndpoint(ctx, u)
		if err == nil {
			continue
		}
		if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err := s.check(ctx, u, s.cfg.Events); err != nil {
			return fmt.Errorf("logic.webhook.urls: %w", err)
		}
		if _, err := s.st.CreateWebhookEndpoint(ctx, u, strings.Join(s.cfg.Events, ","), s.cfg.Secret, msgid.MaxAt(time.Now()), true); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) check(ctx context.Context, url string, events []string) error {
	for _, e := range events {
		up, isUp := strings.CutPrefix(e, store.EventUpstreamPrefix)
		if isUp && slices.Contains(s.upstream, up) {
			continue
		}
		if !slices.Contains(EventTypes, e) {
			return errcode.Invalid("events", fmt.Sprintf("unknown event type %q", e))
		}
	}
	if err := CheckURL(ctx, url, s.cfg.AllowPrivateURLs, s.resolver); err != nil {
		return invalid("url", err)
	}
	return nil
}

// Create adds an endpoint that receives events (all when events is empty)
// from now on, with a new secret, and returns it.
func (s *Service) Create(ctx context.Context, url string, events []string) (store.WebhookEndpoint, error) {
	if err := s.check(ctx, url, events); err != nil {
		return store.WebhookEndpoint{}, err
	}
	sec, err := stdwebhook.NewSecret()
	if err != nil {
		return store.WebhookEndpoint{}, err
	}
	return s.st.CreateWebhookEndpoint(ctx, url, strings.Join(events, ","), sec.String(), msgid.MaxAt(time.Now()), false)
}

// List returns every endpoint.
func (s *Service) List(ctx context.Context) ([]store.WebhookEndpoint, error) {
	return s.st.ListWebhookEndpoints(ctx)
}

// StatusName names a t_webhook_endpoints.status value as the API and the
// console show it.
func StatusName(status int) string {
	switch status {
	case store.EndpointActive:
		return "active"
	case store.EndpointDisabled:
		return "disabled"
	case store.EndpointGone:
		return "gone"
	case store.EndpointDead:
		return "dead"
	}
	return "unknown"
}

// OldestPending is the id of the oldest event the endpoint has not had
// yet (0: none), whatever its type: the cursor passes events the endpoint
// does not subscribe to as it reaches them.
func (s *Service) OldestPending(ctx context.Context, ep store.WebhookEndpoint) (int64, error) {
	messages := ep.Events == "" || slices.Contains(strings.Split(ep.Events, ","), EventMessageSent)
	return s.st.OldestWebhookEventAfter(ctx, ep.CursorID, messages)
}

// Disable stops deliveries to an endpoint; its cursor stays, so Replay
// resumes it where it stopped or from any offset.
func (s *Service) Disable(ctx context.Context, id int64) (store.WebhookEndpoint, error) {
	if err := s.st.SetWebhookStatus(ctx, id, store.EndpointDisabled); err != nil {
		return store.WebhookEndpoint{}, err
	}
	return s.st.GetWebhookEndpoint(ctx, id)
}

// Rotate gives an endpoint a new secret; the old one keeps signing beside
// it for grace, so the receiver can switch without refusing anything.
func (s *Service) Rotate(ctx context.Context, id int64, grace time.Duration) (store.WebhookEndpoint, error) {
	if grace < 0 || grace > MaxRotationGrace {
		return store.WebhookEndpoint{}, errcode.Invalid("grace_seconds", fmt.Sprintf("%v is outside 0..%v", grace, MaxRotationGrace))
	}
	sec, err := stdwebhook.NewSecret()
	if err != nil {
		return store.WebhookEndpoint{}, err
	}
	if err := s.st.RotateWebhookSecret(ctx, id, sec.String(), time.Now().Add(grace)); err != nil {
		return store.WebhookEndpoint{}, err
	}
	return s.st.GetWebhookEndpoint(ctx, id)
}

// Replay makes an endpoint active again and sends it every event after
// fromID again (the webhook-ids it saw before are the same); fromID 0
// resumes where it stopped.
func (s *Service) Replay(ctx context.Context, id, fromID int64) (store.WebhookEndpoint, error) {
	if fromID < 0 {
		return store.WebhookEndpoint{}, errcode.Invalid("from_id", "must be an event id or 0 (resume at the cursor)")
	}
	ep, err := s.st.GetWebhookEndpoint(ctx, id)
	if err != nil {
		return store.WebhookEndpoint{}, err
	}
	if fromID == 0 {
		fromID = ep.CursorID
	}
	if err := s.st.ReplayWebhookEndpoint(ctx, id, fromID); err != nil {
		return store.WebhookEndpoint{}, err
	}
	return s.st.GetWebhookEndpoint(ctx, id)
}

// TestResult is the outcome of SendTest.
type TestResult struct {
	WebhookID string
	Status    int
	Err       error
}

// SendTest posts one webhook.test event to an endpoint now, whatever its
// status, outside its event order and retries, and reports the answer.
func (s *Service) SendTest(ctx context.Context, id int64) (TestResult, error) {
	ep, err := s.st.GetWebhookEndpoint(ctx, id)
	if err != nil {
		return TestResult{}, err
	}
	secrets, err := signingSecrets(ep, time.Now())
	if err != nil {
		return TestResult{}, err
	}
	now := time.Now()
	it, err := newItem(now.UnixNano(), "test_", EventTest, now, []byte(`{"endpoint_id":"`+strconv.FormatInt(id, 10)+`"}`))
	if err != nil {
		return TestResult{}, err
	}
	res := postOnce(ctx, s.client, ep.URL, it.webhookID, it.body, secrets)
	return TestResult{WebhookID: it.webhookID, Status: res.status, Err: res.err}, nil
}
