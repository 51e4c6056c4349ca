package api

import (
	"context"

	logicv1 "github.com/sparkim/spark/proto/logic/v1"

	"github.com/sparkim/spark/logic/internal/user"
)

// UpsertUser creates a user or sets the fields present in the request.
func (s *Server) UpsertUser(ctx context.Context, req *logicv1.UpsertUserRequest) (*logicv1.User, error) {
	if err := positive("user_id", req.UserId); err != nil {
		return nil, err
	}
	p, err := s.users.Upsert(ctx, user.UpsertRequest{
		UserID: req.UserId, Nickname: req.Nickname, Avatar: req.Avatar, Extra: req.Extra,
	})
	if err != nil {
		return nil, s.statusOf("UpsertUser", err)
	}
	return userOf(p), nil
}

// GetUser reads a user's profile.
func (s *Server) GetUser(ctx context.Context, req *logicv1.GetUserRequest) (*logicv1.User, error) {
	if err := positive("user_id", req.UserId); err != nil {
		return nil, err
	}
	p, err := s.users.Get(ctx, req.UserId)
	if err != nil {
		return nil, s.statusOf("GetUser", err)
	}
	return userOf(p), nil
}

// DisableUser disables a user, revokes their tokens and kicks their
// connections.
func (s *Server) DisableUser(ctx context.Context, req *logicv1.DisableUserRequest) (*logicv1.DisableUserReply, error) {
	if err := positive("user_id", req.UserId); err != nil {
		return nil, err
	}
	r, err := s.users.Disable(ctx, req.UserId)
	if err != nil {
		return nil, s.statusOf("DisableUser", err)
	}
	return &logicv1.DisableUserReply{Kicked: uint32(r.Kicked)}, nil
}

// EnableUser lets a disabled user sign in again with a new token.
func (s *Server) EnableUser(ctx context.Context, req *logicv1.EnableUserRequest) (*logicv1.User, error) {
	if err := positive("user_id", req.UserId); err != nil {
		return nil, err
	}
	p, err := s.users.Enable(ctx, req.UserId)
	if err != nil {
		return nil, s.statusOf("EnableUser", err)
	}
	return userOf(p), nil
}

func userOf(p user.Profile) *logicv1.User {
	return &logicv1.User{
		UserId: p.UserID, Nickname: p.Nickname, Avatar: p.Avatar, Extra: string(p.Extra),
		Status: int32(p.Status), TokensValidAfterMs: p.TokensValidAfterMs,
		CreatedAtMs: p.CreatedAt.UnixMilli(), UpdatedAtMs: p.UpdatedAt.UnixMilli(),
	}
}
