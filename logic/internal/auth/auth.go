// Package auth is AUTH (command 1) and the end of a session: token and
// device checks, the user row, the route table write with the kick of a
// replaced connection, and the route's compare-and-delete on close.
package auth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/routesweep"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
	"github.com/sparkim/spark/pkg/token"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// KickReason is the reason a replaced connection is kicked with.
const KickReason = "logged in on another connection"

// maxLabelLen bounds platform and app_version.
const maxLabelLen = 64

// kickTimeout bounds the kick of a replaced connection.
const kickTimeout = 3 * time.Second

var (
	swapScript  = redis.NewScript(route.SwapScript)
	closeScript = redis.NewScript(route.CloseScript)
)

// Kicker kicks a connection on its gate.
type Kicker interface {
	Kick(ctx context.Context, gateID string, t *gatev1.Target, reason string) error
}

// Conn names a client connection: the gate (from the stream's Hello) and
// the gate's connection id, and the client's address as the gate knows it.
type Conn struct {
	GateID string
	ConnID uint64
	RealIP string
}

// Admission is a front door's per-device AUTH limit, asked once the token
// is verified and before any store lookup (a *ratelimit.Limiter): only a
// verified token names the device, so nobody can spend someone else's
// device's logins, and a refused AUTH costs no MySQL.
type Admission interface {
	AdmitDevice(ctx context.Context, realIP string, userID int64, deviceID string) error
}

// Mailbox records mailbox events (a *mailbox.Service).
type Mailbox interface {
	Append(ctx context.Context, events []store.MailboxEvent) ([]int64, error)
}

// Presence records a user's first device coming online and last device
// going offline (a *store.Store writing user.online / user.offline
// webhook events).
type Presence interface {
	UserPresence(ctx context.Context, userID int64, deviceID string, online bool) error
}

// RouteIndex keeps each gate incarnation's routes findable, so those of a
// gate that died are swept (a *routesweep.Index).
type RouteIndex interface {
	Add(ctx context.Context, uid int64, device string, e route.Entry) error
	AddBatch(ctx context.Context, routes []routesweep.Route) error
	Remove(ctx context.Context, uid int64, device string, e route.Entry)
}

// Service authenticates connections.
type Service struct {
	store    *store.Store
	rdb      redis.Cmdable
	secret   []byte
	kicker   Kicker
	mailbox  Mailbox
	admit    Admission
	presence Presence
	routes   RouteIndex
	log      *zap.Logger
	now      func() time.Time

	kicks sync.WaitGroup
}

// New returns a Service verifying tokens with secret.
func New(st *store.Store, rdb redis.Cmdable, secret []byte, kicker Kicker, log *zap.Logger) *Service {
	if log == nil {
		log = zap.NewNop()
	}
	return &Service{store: st, rdb: rdb, secret: secret, kicker: kicker, log: log, now: time.Now}
}

// RecordKicks makes AUTH append a KICK mailbox event (device = the kicked
// device) whenever it replaces another connection, so the kicked device
// learns why even when the KICK push did not reach it.
func (s *Service) RecordKicks(mb Mailbox) { s.mailbox = mb }

// RecordPresence makes AUTH report a user's first device and a close the
// last one to p. A failure is logged, never the AUTH's or close's.
func (s *Service) RecordPresence(p Presence) { s.presence = p }

// IndexRoutes makes AUTH write each route into ix before the route itself
// and a close or replacement take it out (decision 97).
func (s *Service) IndexRoutes(ix RouteIndex) { s.routes = ix }

// LimitDevices makes AUTH ask a before it reads the user row; its error
// (a 42901) is AUTH's answer.
func (s *Service) LimitDevices(a Admission) { s.admit = a }

// Credentials are what a device authenticates with (AUTH).
type Credentials struct {
	Token    string
	DeviceID string
	// Platform and AppVersion are labels of the session, at most 64 bytes.
	Platform   string
	AppVersion string
}

// Authenticated is the answer to a successful Auth.
type Authenticated struct {
	UserID   int64
	DeviceID string
	// Since is when the session began, Unix ms (its route's since).
	Since int64
}

// Auth authenticates conn with a device's credentials. On success it
// returns the session to bind and the answer; errors are *errcode.Error
// (40101 means the gate should close the connection).
func (s *Service) Auth(ctx context.Context, conn Conn, req Credentials) (*logicv1.Session, *Authenticated, error) {
	if !protocol.ValidDeviceID(req.DeviceID) {
		return nil, nil, errcode.New(errcode.InvalidArgument, "device_id must be 1-64 of [A-Za-z0-9._-]")
	}
	if len(req.Platform) > maxLabelLen || len(req.AppVersion) > maxLabelLen {
		return nil, nil, errcode.New(errcode.InvalidArgument, "platform and app_version are at most 64 bytes")
	}
	now := s.now()
	claims, err := token.Verify(s.secret, req.Token, now)
	if err != nil {
		return nil, nil, errcode.Wrap(errcode.BadToken, "", err)
	}
	if claims.DeviceID != "" && claims.DeviceID != req.DeviceID {
		return nil, nil, errcode.New(errcode.BadToken, "token is for another device")
	}
	if s.admit != nil {
		if err := s.admit.AdmitDevice(ctx, conn.RealIP, claims.UserID, req.DeviceID); err != nil {
			return nil, nil, err
		}
	}
	u, err := s.user(ctx, claims.UserID, now)
	if err != nil {
		return nil, nil, errcode.Wrap(errcode.Busy, "", err)
	}
	if u.Status == store.UserDisabled {
		return nil, nil, errcode.New(errcode.BadToken, "user disabled")
	}
	if u.TokensValidAfterMs > 0 && (claims.IssuedAt.IsZero() || u.TokensValidAfterMs > claims.IssuedAt.UnixMilli()) {
		return nil, nil, errcode.New(errcode.BadToken, "token revoked")
	}

	since := now.UnixMilli()
	entry := route.Entry{GateID: conn.GateID, ConnID: conn.ConnID, SinceMs: since, RealIP: conn.RealIP}
	if s.routes != nil {
		if err := s.routes.Add(ctx, claims.UserID, req.DeviceID, entry); err != nil {
			return nil, nil, errcode.Wrap(errcode.Busy, "", err)
		}
	}
	old, routes, err := swapRoute(ctx, s.rdb, claims.UserID, req.DeviceID, entry.String())
	if err != nil {
		return nil, nil, errcode.Wrap(errcode.Busy, "", err)
	}
	if old != "" && s.routes != nil {
		if oe, err := route.Parse(old); err == nil && oe.Key() != entry.Key() {
			s.routes.Remove(ctx, claims.UserID, req.DeviceID, oe)
		}
	}
	if old != "" && s.kickOld(old, conn, claims.UserID, req.DeviceID) {
		s.recordKick(ctx, claims.UserID, req.DeviceID)
	}
	if old == "" && routes == 1 {
		s.recordPresence(ctx, claims.UserID, req.DeviceID, true)
	}
	sess := &logicv1.Session{UserId: claims.UserID, DeviceId: req.DeviceID, Platform: req.Platform, AppVersion: req.AppVersion, SinceMs: since}
	return sess, &Authenticated{UserID: claims.UserID, DeviceID: req.DeviceID, Since: since}, nil
}

// user reads the user's row, creating it on the first AUTH.
func (s *Service) user(ctx context.Context, uid int64, now time.Time) (store.User, error) {
	u, err := s.store.GetUser(ctx, uid)
	if errors.Is(err, store.ErrNotFound) {
		if err := s.store.EnsureUser(ctx, uid, now); err != nil {
			return store.User{}, err
		}
		return s.store.GetUser(ctx, uid)
	}
	return u, err
}

// recordKick appends the KICK mailbox event of a replaced connection; a
// failure is logged (the KICK push is the main path), never fatal.
func (s *Service) recordKick(ctx context.Context, uid int64, device string) {
	if s.mailbox == nil {
		return
	}
	p, _ := protocol.Marshal(protocol.KickPayload{Reason: KickReason})
	if _, err := s.mailbox.Append(ctx, []store.MailboxEvent{{UserID: uid, DeviceID: device, EventType: protocol.EventKick, Payload: p}}); err != nil {
		s.log.Warn("kick mailbox event failed", zap.Int64("user_id", uid), zap.String("device_id", device), zap.Error(err))
	}
}

// kickOld kicks the connection an old route value names, unless it is conn
// itself, and reports whether it names another connection. The kick runs
// in the background: a failure is logged, never fatal.
func (s *Service) kickOld(old string, conn Conn, uid int64, device string) bool {
	e, err := route.Parse(old)
	if err != nil {
		s.log.Warn("malformed route value replaced", zap.Int64("user_id", uid), zap.String("device_id", device), zap.Error(err))
		return false
	}
	if e.GateID == conn.GateID && e.ConnID == conn.ConnID {
		return false
	}
	if s.kicker == nil {
		return true
	}
	s.kicks.Add(1)
	go func() {
		defer s.kicks.Done()
		ctx, cancel := context.WithTimeout(context.Background(), kickTimeout)
		defer cancel()
		err := s.kicker.Kick(ctx, e.GateID, &gatev1.Target{ConnId: e.ConnID, UserId: uid, DeviceId: device}, KickReason)
		if err == nil {
			s.log.Info("kicked replaced connection", zap.Int64("user_id", uid), zap.String("device_id", device),
				zap.String("gate_id", e.GateID), zap.Uint64("conn_id", e.ConnID))
		}
	}()
	return true
}

// Closed drops the route of a closed connection, only if it still names
// that connection (a late close never removes its replacement's route).
func (s *Service) Closed(ctx context.Context, conn Conn, sess *logicv1.Session) error {
	if sess == nil || sess.UserId <= 0 || sess.DeviceId == "" {
		return nil
	}
	e := route.Entry{GateID: conn.GateID, ConnID: conn.ConnID, SinceMs: sess.SinceMs}
	left, err := closeScript.Run(ctx, s.rdb, []string{rediskey.Route(sess.UserId)}, sess.DeviceId, e.Key()).Int()
	if err != nil {
		return err
	}
	if left >= 0 && s.routes != nil {
		s.routes.Remove(ctx, sess.UserId, sess.DeviceId, e)
	}
	if left == 0 {
		s.recordPresence(ctx, sess.UserId, sess.DeviceId, false)
	}
	return nil
}

// swapRoute runs route.SwapScript: the route it replaced ("" when none)
// and the user's routes after it.
func swapRoute(ctx context.Context, rdb redis.Cmdable, uid int64, device, value string) (string, int64, error) {
	v, err := swapScript.Run(ctx, rdb, []string{rediskey.Route(uid)}, device, value).Slice()
	if err != nil {
		return "", 0, err
	}
	if len(v) == 2 {
		old, ok1 := v[0].(string)
		n, ok2 := v[1].(int64)
		if ok1 && ok2 {
			return old, n, nil
		}
	}
	return "", 0, fmt.Errorf("auth: route swap answered %v", v)
}

// recordPresence reports a presence change when someone listens; the
// change itself (the route) is done, so a failure is logged only.
func (s *Service) recordPresence(ctx context.Context, uid int64, device string, online bool) {
	if s.presence == nil {
		return
	}
	if err := s.presence.UserPresence(ctx, uid, device, online); err != nil {
		s.log.Warn("presence event not recorded", zap.Int64("user_id", uid), zap.Bool("online", online), zap.Error(err))
	}
}

// Wait waits (bounded by ctx) for background kicks.
func (s *Service) Wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.kicks.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Rebind restores the routes of connections a gate re-reported after
// Resync (Redis lost the route table): HSETNX, so a route written by a
// newer AUTH is never overwritten. It returns how many it restored.
func (s *Service) Rebind(ctx context.Context, gateID string, bindings []*logicv1.Binding) (int, error) {
	var restore []routesweep.Route
	for _, b := range bindings {
		sess := b.GetSession()
		if sess.GetUserId() <= 0 || !protocol.ValidDeviceID(sess.GetDeviceId()) {
			continue
		}
		restore = append(restore, routesweep.Route{UserID: sess.GetUserId(), DeviceID: sess.GetDeviceId(),
			Entry: route.Entry{GateID: gateID, ConnID: b.GetConnId(), SinceMs: sess.GetSinceMs()}})
	}
	if s.routes != nil && len(restore) > 0 {
		// Indexed first, as at AUTH: a restored route must be findable
		// when its gate dies.
		if err := s.routes.AddBatch(ctx, restore); err != nil {
			return 0, fmt.Errorf("auth: rebind: %w", err)
		}
	}
	var cmds []*redis.BoolCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range restore {
			cmds = append(cmds, p.HSetNX(ctx, rediskey.Route(r.UserID), r.DeviceID, r.Entry.String()))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("auth: rebind: %w", err)
	}
	n := 0
	for _, c := range cmds {
		if c.Val() {
			n++
		}
	}
	return n, nil
}
