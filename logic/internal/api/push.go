package api

import (
	"context"

	"github.com/sparkim/spark/logic/internal/online"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// PushToUsers sends a transient push to the users' online devices.
func (s *Server) PushToUsers(ctx context.Context, req *logicv1.PushToUsersRequest) (*logicv1.PushReply, error) {
	if len(req.UserIds) == 0 {
		return nil, invalid("user_ids", "empty")
	}
	if req.Payload == "" {
		return nil, invalid("payload", "must be a JSON object")
	}
	r, err := s.online.Push(ctx, req.UserIds, []byte(req.Payload))
	if err != nil {
		return nil, s.statusOf("PushToUsers", err)
	}
	return pushReplyOf(r), nil
}

// Broadcast sends a transient push to every connection on every gate.
func (s *Server) Broadcast(ctx context.Context, req *logicv1.BroadcastRequest) (*logicv1.PushReply, error) {
	if req.Payload == "" {
		return nil, invalid("payload", "must be a JSON object")
	}
	r, err := s.online.Broadcast(ctx, []byte(req.Payload))
	if err != nil {
		return nil, s.statusOf("Broadcast", err)
	}
	return pushReplyOf(r), nil
}

func pushReplyOf(r online.PushResult) *logicv1.PushReply {
	return &logicv1.PushReply{Delivered: uint32(r.Delivered), Dropped: uint32(r.Dropped), FailedGates: r.FailedGates}
}
