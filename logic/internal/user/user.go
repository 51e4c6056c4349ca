// Package user is the users domain of the business API: profiles
// (nickname, avatar, the business's extra JSON), disabling a user, and
// revoking a user's tokens. Revoking and disabling also end the user's
// live sessions at once, through a Sessions implementation (the online
// service), because a refused token only stops the next AUTH.
//
// Errors a caller should show are *errcode.Error (40001 naming the field,
// 40401, 50301).
package user

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
)

// Limits of a profile (the column sizes of t_users).
const (
	MaxNicknameLen = 64  // characters
	MaxAvatarLen   = 512 // characters
	MaxExtraLen    = 4 << 10
)

// Kick reasons sent with the KICK of a revoked or disabled user's
// connections.
const (
	ReasonRevoked  = "revoked"
	ReasonDisabled = "disabled"
)

// Status is a user's status.
type Status int

// The statuses (t_users.status).
const (
	StatusActive   Status = store.UserActive
	StatusDisabled Status = store.UserDisabled
)

// Profile is a user as the business API shows it.
type Profile struct {
	UserID   int64
	Nickname string
	Avatar   string
	// Extra is the business's JSON object ("{}" when never set).
	Extra              json.RawMessage
	Status             Status
	TokensValidAfterMs int64
	CreatedAt          time.Time
	UpdatedAt          time.Time
}

// UpsertRequest creates a user or sets the non-nil fields.
type UpsertRequest struct {
	UserID   int64
	Nickname *string
	Avatar   *string
	// Extra is a JSON object; nil keeps the stored one.
	Extra *string
}

// Sessions ends a user's live connections (an *online.Service).
type Sessions interface {
	KickUser(ctx context.Context, uid int64, reason string) (int, error)
}

// Service is the users service. It is safe for concurrent use.
type Service struct {
	store    *store.Store
	sessions Sessions
	now      func() time.Time
}

// New returns a Service.
func New(st *store.Store, sessions Sessions) *Service {
	return &Service{store: st, sessions: sessions, now: time.Now}
}

func checkID(id int64) error {
	if id <= 0 {
		return errcode.Invalid("user_id", "must be a positive id")
	}
	return nil
}

func checkText(field string, v *string, maxLen int) error {
	switch {
	case v == nil:
		return nil
	case !utf8.ValidString(*v):
		return errcode.Invalid(field, "not valid UTF-8")
	case utf8.RuneCountInString(*v) > maxLen:
		return errcode.Invalid(field, fmt.Sprintf("longer than %d characters", maxLen))
	}
	return nil
}

// compactObject checks that s is one JSON object of at most MaxExtraLen
// bytes and returns it compacted.
func compactObject(s string) ([]byte, error) {
	if len(s) > MaxExtraLen {
		return nil, errcode.Invalid("extra", fmt.Sprintf("over %d bytes", MaxExtraLen))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &obj); err != nil || obj == nil {
		return nil, errcode.Invalid("extra", "must be a JSON object")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		return nil, errcode.Invalid("extra", "must be a JSON object")
	}
	return b.Bytes(), nil
}

// Upsert creates the user or updates the fields that are set, and returns
// the profile as stored.
func (s *Service) Upsert(ctx context.Context, req UpsertRequest) (Profile, error) {
	if err := checkID(req.UserID); err != nil {
		return Profile{}, err
	}
	if err := checkText("nickname", req.Nickname, MaxNicknameLen); err != nil {
		return Profile{}, err
	}
	if err := checkText("avatar", req.Avatar, MaxAvatarLen); err != nil {
		return Profile{}, err
	}
	u := store.ProfileUpdate{ID: req.UserID, Nickname: req.Nickname, Avatar: req.Avatar}
	if req.Extra != nil {
		b, err := compactObject(*req.Extra)
		if err != nil {
			return Profile{}, err
		}
		u.Extra = b
	}
	if err := s.store.UpsertProfile(ctx, u, s.now()); err != nil {
		return Profile{}, errcode.Unavailable("user: upsert", err)
	}
	return s.Get(ctx, req.UserID)
}

// Get reads a user's profile: 40401 when the user has no row.
func (s *Service) Get(ctx context.Context, uid int64) (Profile, error) {
	if err := checkID(uid); err != nil {
		return Profile{}, err
	}
	p, err := s.store.GetProfile(ctx, uid)
	if errors.Is(err, store.ErrNotFound) {
		return Profile{}, errcode.New(errcode.NotFound, "not found: user_id")
	}
	if err != nil {
		return Profile{}, errcode.Unavailable("user: get", err)
	}
	out := Profile{
		UserID: p.ID, Nickname: p.Nickname, Avatar: p.Avatar, Extra: json.RawMessage(p.Extra),
		Status: Status(p.Status), TokensValidAfterMs: p.TokensValidAfterMs, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}
	if len(out.Extra) == 0 {
		out.Extra = json.RawMessage("{}")
	}
	return out, nil
}

// Revoked is the outcome of RevokeTokens and Disable.
type Revoked struct {
	// ValidAfterMs: tokens issued before it (by their whole-second "iat")
	// are refused with 40101.
	ValidAfterMs int64
	// Kicked counts the live connections kicked.
	Kicked int
}

// RevokeTokens refuses every token of the user issued up to now (AUTH
// answers 40101) and kicks every live connection of the user with reason
// "revoked". The revocation is written first, so a connection that AUTHs
// while the kicks run is refused; a gate that cannot be reached is 50301
// after the revocation was stored (retrying is safe).
func (s *Service) RevokeTokens(ctx context.Context, uid int64) (Revoked, error) {
	return s.revoke(ctx, uid, false, ReasonRevoked)
}

// Disable sets the user's status to disabled (AUTH refuses any token with
// 40101), revokes the tokens, and kicks the live connections with reason
// "disabled". A user without a row gets a disabled one. The business
// re-enables a user with no call here yet: see docs/decisions.md.
func (s *Service) Disable(ctx context.Context, uid int64) (Revoked, error) {
	return s.revoke(ctx, uid, true, ReasonDisabled)
}

// Enable lets a disabled user sign in again (40401 for an unknown user)
// and returns the profile. Tokens revoked by the disable stay revoked.
func (s *Service) Enable(ctx context.Context, uid int64) (Profile, error) {
	if err := checkID(uid); err != nil {
		return Profile{}, err
	}
	err := s.store.EnableUser(ctx, uid, s.now())
	if errors.Is(err, store.ErrNotFound) {
		return Profile{}, errcode.New(errcode.NotFound, "user not found")
	}
	if err != nil {
		return Profile{}, errcode.Unavailable("user: enable", err)
	}
	return s.Get(ctx, uid)
}

func (s *Service) revoke(ctx context.Context, uid int64, disable bool, reason string) (Revoked, error) {
	if err := checkID(uid); err != nil {
		return Revoked{}, err
	}
	now := s.now()
	// Tokens carry whole seconds: a token minted in this very second may
	// predate the call, so everything up to now counts as revoked, and a
	// token minted later in this second is refused too (decisions.md).
	v, err := s.store.RevokeTokens(ctx, uid, now.UnixMilli(), disable, now)
	if err != nil {
		return Revoked{}, errcode.Unavailable("user: revoke", err)
	}
	out := Revoked{ValidAfterMs: v}
	if s.sessions == nil {
		return out, nil
	}
	out.Kicked, err = s.sessions.KickUser(ctx, uid, reason)
	return out, err
}
