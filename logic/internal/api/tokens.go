package api

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/token"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// maxTokenTTL bounds a requested token lifetime.
const maxTokenTTL = 366 * 24 * time.Hour

// IssueToken mints a client token and makes sure the user row exists.
func (s *Server) IssueToken(ctx context.Context, req *logicv1.IssueTokenRequest) (*logicv1.IssueTokenReply, error) {
	if req.UserId <= 0 {
		return nil, invalid("user_id", "must be a positive id")
	}
	if req.DeviceId != "" && !protocol.ValidDeviceID(req.DeviceId) {
		return nil, invalid("device_id", "must be 1-64 of [A-Za-z0-9._-]")
	}
	if req.TtlSeconds < 0 {
		return nil, invalid("ttl_seconds", "must not be negative")
	}
	ttl := s.cfg.TokenTTL
	if req.TtlSeconds > 0 {
		ttl = time.Duration(req.TtlSeconds) * time.Second
	}
	if ttl > maxTokenTTL {
		return nil, invalid("ttl_seconds", "over a year")
	}
	now := time.Now()
	if err := s.store.EnsureUser(ctx, req.UserId, now); err != nil {
		return nil, s.statusOf("IssueToken", errcode.Wrap(errcode.Busy, "database unavailable", fmt.Errorf("user row of %d: %w", req.UserId, err)))
	}
	tok, exp, err := token.Mint(s.cfg.JWTSecret, req.UserId, req.DeviceId, ttl, now)
	if err != nil {
		return nil, s.statusOf("IssueToken", errcode.Wrap(errcode.Internal, "mint token", err))
	}
	s.log.Info("token issued", zap.Int64("user_id", req.UserId), zap.String("device_id", req.DeviceId), zap.Time("expires_at", exp))
	return &logicv1.IssueTokenReply{Token: tok, ExpiresAtMs: exp.UnixMilli()}, nil
}

// RevokeTokens refuses the user's tokens issued so far and kicks the
// user's live connections.
func (s *Server) RevokeTokens(ctx context.Context, req *logicv1.RevokeTokensRequest) (*logicv1.RevokeTokensReply, error) {
	if err := positive("user_id", req.UserId); err != nil {
		return nil, err
	}
	r, err := s.users.RevokeTokens(ctx, req.UserId)
	if err != nil {
		return nil, s.statusOf("RevokeTokens", err)
	}
	s.log.Info("tokens revoked", zap.Int64("user_id", req.UserId), zap.Int("kicked", r.Kicked))
	return &logicv1.RevokeTokensReply{ValidAfterMs: r.ValidAfterMs, Kicked: uint32(r.Kicked)}, nil
}
