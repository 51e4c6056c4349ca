package api

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/webhook"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/msgid"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// webhooks returns the endpoint manager, or 40901 while webhooks are off:
// an endpoint created then would receive nothing.
func (s *Server) webhooks() (*webhook.Service, error) {
	if s.hooks == nil {
		return nil, withCode(errcode.Conflict, "webhooks are off (logic.webhook.enabled)")
	}
	return s.hooks, nil
}

// webhookErr maps the manager's errors: no such endpoint is 40401; bad
// input is already a 40001 naming the field.
func (s *Server) webhookErr(op string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return withCode(errcode.NotFound, "no such webhook endpoint")
	}
	return s.statusOf(op, err)
}

func endpointOf(ep store.WebhookEndpoint, withSecret bool) *logicv1.WebhookEndpoint {
	out := &logicv1.WebhookEndpoint{
		EndpointId: ep.ID, Url: ep.URL, Status: webhook.StatusName(ep.Status), CursorId: ep.CursorID,
		Attempts: int32(ep.Attempts), LastError: ep.LastError, FromConfig: ep.FromConfig, CreatedAtMs: ep.CreatedAt.UnixMilli(),
	}
	if ep.Events != "" {
		out.Events = strings.Split(ep.Events, ",")
	}
	if withSecret {
		out.Secret = ep.Secret
	}
	if ep.NextAttemptAt.Valid {
		out.NextAttemptMs = ep.NextAttemptAt.Time.UnixMilli()
	}
	if ep.OldSecret != "" && ep.OldSecretUntil.Valid {
		out.OldSecretUntilMs = ep.OldSecretUntil.Time.UnixMilli()
	}
	return out
}

// CreateWebhookEndpoint adds an endpoint and answers it with its secret.
func (s *Server) CreateWebhookEndpoint(ctx context.Context, req *logicv1.CreateWebhookEndpointRequest) (*logicv1.WebhookEndpoint, error) {
	h, err := s.webhooks()
	if err != nil {
		return nil, err
	}
	if req.Url == "" {
		return nil, invalid("url", "empty")
	}
	ep, err := h.Create(ctx, req.Url, req.Events)
	if err != nil {
		return nil, s.webhookErr("CreateWebhookEndpoint", err)
	}
	return endpointOf(ep, true), nil
}

// ListWebhookEndpoints lists every endpoint, without secrets.
func (s *Server) ListWebhookEndpoints(ctx context.Context, _ *logicv1.ListWebhookEndpointsRequest) (*logicv1.ListWebhookEndpointsReply, error) {
	h, err := s.webhooks()
	if err != nil {
		return nil, err
	}
	eps, err := h.List(ctx)
	if err != nil {
		return nil, s.webhookErr("ListWebhookEndpoints", err)
	}
	out := &logicv1.ListWebhookEndpointsReply{}
	for _, ep := range eps {
		e := endpointOf(ep, false)
		id, err := h.OldestPending(ctx, ep)
		if err != nil {
			return nil, s.webhookErr("ListWebhookEndpoints", err)
		}
		if id > 0 {
			e.OldestPendingMs = msgid.TimeOf(id).UnixMilli()
		}
		out.Endpoints = append(out.Endpoints, e)
	}
	return out, nil
}

// DisableWebhookEndpoint stops deliveries to an endpoint.
func (s *Server) DisableWebhookEndpoint(ctx context.Context, req *logicv1.WebhookEndpointRef) (*logicv1.WebhookEndpoint, error) {
	h, err := s.webhooks()
	if err != nil {
		return nil, err
	}
	if err := positive("endpoint_id", req.EndpointId); err != nil {
		return nil, err
	}
	ep, err := h.Disable(ctx, req.EndpointId)
	if err != nil {
		return nil, s.webhookErr("DisableWebhookEndpoint", err)
	}
	return endpointOf(ep, false), nil
}

// RotateWebhookSecret gives an endpoint a new secret and answers it.
func (s *Server) RotateWebhookSecret(ctx context.Context, req *logicv1.RotateWebhookSecretRequest) (*logicv1.WebhookEndpoint, error) {
	h, err := s.webhooks()
	if err != nil {
		return nil, err
	}
	if err := positive("endpoint_id", req.EndpointId); err != nil {
		return nil, err
	}
	if req.GraceSeconds < 0 || req.GraceSeconds > int64(webhook.MaxRotationGrace/time.Second) {
		return nil, invalid("grace_seconds", "must be 0 to 604800")
	}
	ep, err := h.Rotate(ctx, req.EndpointId, time.Duration(req.GraceSeconds)*time.Second)
	if err != nil {
		return nil, s.webhookErr("RotateWebhookSecret", err)
	}
	return endpointOf(ep, true), nil
}

// ReplayWebhookEndpoint resends every event after from_id.
func (s *Server) ReplayWebhookEndpoint(ctx context.Context, req *logicv1.ReplayWebhookEndpointRequest) (*logicv1.WebhookEndpoint, error) {
	h, err := s.webhooks()
	if err != nil {
		return nil, err
	}
	if err := positive("endpoint_id", req.EndpointId); err != nil {
		return nil, err
	}
	if req.FromId < 0 {
		return nil, invalid("from_id", "must be an event id or 0 (resume at the cursor)")
	}
	ep, err := h.Replay(ctx, req.EndpointId, req.FromId)
	if err != nil {
		return nil, s.webhookErr("ReplayWebhookEndpoint", err)
	}
	return endpointOf(ep, false), nil
}

// TestWebhookEndpoint posts one webhook.test event and reports the answer.
func (s *Server) TestWebhookEndpoint(ctx context.Context, req *logicv1.WebhookEndpointRef) (*logicv1.TestWebhookEndpointReply, error) {
	h, err := s.webhooks()
	if err != nil {
		return nil, err
	}
	if err := positive("endpoint_id", req.EndpointId); err != nil {
		return nil, err
	}
	r, err := h.SendTest(ctx, req.EndpointId)
	if err != nil {
		return nil, s.webhookErr("TestWebhookEndpoint", err)
	}
	out := &logicv1.TestWebhookEndpointReply{WebhookId: r.WebhookID, Status: int32(r.Status)}
	if r.Err != nil {
		out.Error = r.Err.Error()
	}
	return out, nil
}
