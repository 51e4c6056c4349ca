package api

import (
	"context"

	"github.com/sparkim/spark/logic/internal/push"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// RegisterPushToken stores a device's push token.
func (s *Server) RegisterPushToken(ctx context.Context, req *logicv1.RegisterPushTokenRequest) (*logicv1.PushTokenReply, error) {
	err := s.push.Register(ctx, push.Registration{UserID: req.UserId, DeviceID: req.DeviceId, Platform: req.Platform,
		Token: req.Token, Topic: req.Topic, Sandbox: req.Sandbox, Gateway: req.Gateway})
	if err != nil {
		return nil, s.statusOf("RegisterPushToken", err)
	}
	return &logicv1.PushTokenReply{Registered: true}, nil
}

// UnregisterPushToken removes a device's push token.
func (s *Server) UnregisterPushToken(ctx context.Context, req *logicv1.UnregisterPushTokenRequest) (*logicv1.PushTokenReply, error) {
	if _, err := s.push.Unregister(ctx, req.UserId, req.DeviceId); err != nil {
		return nil, s.statusOf("UnregisterPushToken", err)
	}
	return &logicv1.PushTokenReply{Registered: false}, nil
}

// SetPushSettings sets a user's notification preview.
func (s *Server) SetPushSettings(ctx context.Context, req *logicv1.PushSettings) (*logicv1.PushSettings, error) {
	if err := s.push.SetPreview(ctx, req.UserId, req.Preview); err != nil {
		return nil, s.statusOf("SetPushSettings", err)
	}
	return s.GetPushSettings(ctx, &logicv1.GetPushSettingsRequest{UserId: req.UserId})
}

// GetPushSettings reads a user's push settings.
func (s *Server) GetPushSettings(ctx context.Context, req *logicv1.GetPushSettingsRequest) (*logicv1.PushSettings, error) {
	p, err := s.push.Preview(ctx, req.UserId)
	if err != nil {
		return nil, s.statusOf("GetPushSettings", err)
	}
	return &logicv1.PushSettings{UserId: req.UserId, Preview: p}, nil
}
