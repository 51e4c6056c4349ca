// Package api is logic.v1.Api, the business API (API-key authenticated):
// a thin adapter over the same typed domain services the client protocol
// uses, the way etcd's v3rpc adapts gRPC onto EtcdServer. Each call checks
// the shape of its arguments (INVALID_ARGUMENT naming the field), converts
// the protobuf request into the service's typed request, calls the
// service, converts the result back, and maps *errcode.Error codes onto
// gRPC status codes (errors.go). No business rule lives here, so the two
// doors cannot disagree. One file per concern: users, tokens, relations,
// groups, messages, push, push tokens, presence, webhooks, upstream.
package api

import (
	"time"

	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/logic/internal/inbox"
	"github.com/sparkim/spark/logic/internal/media"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/notify"
	"github.com/sparkim/spark/logic/internal/online"
	"github.com/sparkim/spark/logic/internal/push"
	"github.com/sparkim/spark/logic/internal/relation"
	"github.com/sparkim/spark/logic/internal/signal"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/upstream"
	"github.com/sparkim/spark/logic/internal/user"
	"github.com/sparkim/spark/logic/internal/webhook"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// Notifier tells online devices about committed changes (control events)
// and invalidates what they changed (a *notify.Service). The API calls it
// after every change that Changed something, through notify's
// AfterGroupChange / AfterRelationChange like the client protocol does; a
// failure is logged, never returned: the change is committed and the
// mailbox lets devices catch up.
type Notifier = notify.Notifier

// Services are the domain services the API adapts onto.
type Services struct {
	// Store makes sure a user row exists when a token is issued.
	Store     *store.Store
	Users     *user.Service
	Relations *relation.Service
	Groups    *group.Service
	Messages  *message.Service
	Inbox     *inbox.Service
	Online    *online.Service
	// Push registers push tokens and sets the preview.
	Push *push.Tokens
	// Webhooks manages webhook endpoints; nil while logic.webhook.enabled
	// is off.
	Webhooks *webhook.Service
	// Upstream hands the devices' UPSTREAM frames to pulling services.
	Upstream *upstream.Service
	// Media signs uploads and downloads; nil answers them INTERNAL.
	Media *media.Service
	// Signals sends transient signals; nil answers SendSignal INTERNAL.
	Signals *signal.Service
}

// Config is what the API needs from logic's configuration.
type Config struct {
	// JWTSecret signs issued tokens (logic.jwt_secret).
	JWTSecret []byte
	// TokenTTL is the default lifetime of issued tokens (logic.token_ttl).
	TokenTTL time.Duration
	// SystemUserID is the system account SendMessage sends as with
	// system: true (logic.system_user_id).
	SystemUserID int64
}

// Server implements logicv1.ApiServer.
type Server struct {
	logicv1.UnimplementedApiServer

	store     *store.Store
	users     *user.Service
	relations *relation.Service
	groups    *group.Service
	messages  *message.Service
	inbox     *inbox.Service
	online    *online.Service
	push      *push.Tokens
	hooks     *webhook.Service
	upstream  *upstream.Service
	media     *media.Service
	signals   *signal.Service
	notifier  Notifier
	cfg       Config
	log       *zap.Logger
}

// New returns the API server. notifier may be nil (changes are then only
// in the mailbox until devices sync).
func New(svc Services, cfg Config, notifier Notifier, log *zap.Logger) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	return &Server{
		store: svc.Store, users: svc.Users, relations: svc.Relations, groups: svc.Groups,
		messages: svc.Messages, inbox: svc.Inbox, online: svc.Online, push: svc.Push, hooks: svc.Webhooks, upstream: svc.Upstream,
		media: svc.Media, signals: svc.Signals, notifier: notifier, cfg: cfg, log: log,
	}
}
