package api

import (
	"context"
	"time"

	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// PullUpstream hands a service its oldest unacknowledged items, waiting
// up to wait_ms for one.
func (s *Server) PullUpstream(ctx context.Context, req *logicv1.PullUpstreamRequest) (*logicv1.PullUpstreamReply, error) {
	items, err := s.upstream.Pull(ctx, req.Service, int(req.MaxItems), time.Duration(req.WaitMs)*time.Millisecond)
	if err != nil {
		return nil, s.statusOf("PullUpstream", err)
	}
	out := &logicv1.PullUpstreamReply{Items: make([]*logicv1.UpstreamItem, 0, len(items))}
	for _, it := range items {
		out.Items = append(out.Items, &logicv1.UpstreamItem{
			Id: int64(it.ID), Service: it.Service, UserId: int64(it.UserID), DeviceId: it.DeviceID,
			UpstreamId: it.UpstreamID, Body: it.Body, ReceivedAtMs: it.ReceivedAt.UnixMilli(),
		})
	}
	return out, nil
}

// AckUpstream acknowledges a service's items up to up_to_id.
func (s *Server) AckUpstream(ctx context.Context, req *logicv1.AckUpstreamRequest) (*logicv1.AckUpstreamReply, error) {
	cur, err := s.upstream.Ack(ctx, req.Service, req.UpToId)
	if err != nil {
		return nil, s.statusOf("AckUpstream", err)
	}
	return &logicv1.AckUpstreamReply{CursorId: cur}, nil
}
