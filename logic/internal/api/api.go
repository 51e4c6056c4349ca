// Package api is logic.v1.Api, the business API (API-key authenticated).
package api

import (
	"context"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/token"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// maxTokenTTL bounds a requested token lifetime.
const maxTokenTTL = 366 * 24 * time.Hour

// Server implements logicv1.ApiServer.
type Server struct {
	logicv1.UnimplementedApiServer

	store    *store.Store
	secret   []byte
	tokenTTL time.Duration
	log      *zap.Logger
}

// New returns the API server.
func New(st *store.Store, secret []byte, tokenTTL time.Duration, log *zap.Logger) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	return &Server{store: st, secret: secret, tokenTTL: tokenTTL, log: log}
}

// IssueToken mints a client token and makes sure the user row exists.
func (s *Server) IssueToken(ctx context.Context, req *logicv1.IssueTokenRequest) (*logicv1.IssueTokenReply, error) {
	if req.UserId <= 0 {
		return nil, status.Error(codes.InvalidArgument, "user_id must be positive")
	}
	if req.DeviceId != "" && !protocol.ValidDeviceID(req.DeviceId) {
		return nil, status.Error(codes.InvalidArgument, "device_id must be 1-64 of [A-Za-z0-9._-]")
	}
	if req.TtlSeconds < 0 {
		return nil, status.Error(codes.InvalidArgument, "ttl_seconds must not be negative")
	}
	ttl := s.tokenTTL
	if req.TtlSeconds > 0 {
		ttl = time.Duration(req.TtlSeconds) * time.Second
	}
	if ttl > maxTokenTTL {
		return nil, status.Error(codes.InvalidArgument, "ttl_seconds is over a year")
	}
	now := time.Now()
	if err := s.store.EnsureUser(ctx, req.UserId, now); err != nil {
		s.log.Warn("issue token: user row", zap.Int64("user_id", req.UserId), zap.Error(err))
		return nil, status.Error(codes.Unavailable, "database unavailable")
	}
	tok, exp, err := token.Mint(s.secret, req.UserId, req.DeviceId, ttl, now)
	if err != nil {
		return nil, status.Error(codes.Internal, "mint token")
	}
	s.log.Info("token issued", zap.Int64("user_id", req.UserId), zap.String("device_id", req.DeviceId), zap.Time("expires_at", exp))
	return &logicv1.IssueTokenReply{Token: tok, ExpiresAtMs: exp.UnixMilli()}, nil
}
