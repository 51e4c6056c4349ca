package api_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sparkim/spark/logic/internal/api"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/logic/internal/webhook"
	"github.com/sparkim/spark/pkg/config"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// The webhook calls refuse bad input with 40001 and change nothing
// (a private or loopback URL under the default config: SSRF), answer
// 40401 for an unknown endpoint, and 40901 while webhooks are off.
func TestWebhookCallsRefuseBadInput(t *testing.T) {
	_, db := testenv.MySQL(t)
	st := store.New(db)
	ctx := context.Background()
	on := api.New(api.Services{Store: st, Webhooks: webhook.NewService(st, config.Default().Logic.Webhook, []string{"orders"})}, api.Config{}, nil, nil)
	off := api.New(api.Services{Store: st}, api.Config{}, nil, nil)
	create := func(srv *api.Server, url string, events ...string) error {
		_, err := srv.CreateWebhookEndpoint(ctx, &logicv1.CreateWebhookEndpointRequest{Url: url, Events: events})
		return err
	}
	tests := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"webhooks off", func() error { return create(off, "https://8.8.8.8/hook") }, codes.FailedPrecondition, "logic.webhook.enabled"},
		{"no url", func() error { return create(on, "") }, codes.InvalidArgument, "url"},
		{"loopback", func() error { return create(on, "http://127.0.0.1:9000/hook") }, codes.InvalidArgument, "url: endpoint address is not public"},
		{"cloud metadata", func() error { return create(on, "http://169.254.169.254/latest") }, codes.InvalidArgument, "url: endpoint address is not public"},
		{"private v4", func() error { return create(on, "https://10.1.2.3/hook") }, codes.InvalidArgument, "url: endpoint address is not public"},
		{"localhost", func() error { return create(on, "http://localhost/hook") }, codes.InvalidArgument, "url: endpoint address is not public"},
		{"not http", func() error { return create(on, "ftp://8.8.8.8/hook") }, codes.InvalidArgument, "url: url \"ftp://8.8.8.8/hook\": want http"},
		{"unknown event type", func() error { return create(on, "https://8.8.8.8/hook", "message.sent", "message.forwarded") }, codes.InvalidArgument, "events: unknown event type \"message.forwarded\""},
		{"upstream type of an unconfigured service", func() error { return create(on, "https://8.8.8.8/hook", "upstream.billing") }, codes.InvalidArgument, "events: unknown event type \"upstream.billing\""},
		{"disable unknown", func() error {
			_, err := on.DisableWebhookEndpoint(ctx, &logicv1.WebhookEndpointRef{EndpointId: 987654})
			return err
		}, codes.NotFound, "webhook endpoint"},
		{"disable without id", func() error {
			_, err := on.DisableWebhookEndpoint(ctx, &logicv1.WebhookEndpointRef{})
			return err
		}, codes.InvalidArgument, "endpoint_id"},
		{"rotate with a grace over 7 days", func() error {
			_, err := on.RotateWebhookSecret(ctx, &logicv1.RotateWebhookSecretRequest{EndpointId: 1, GraceSeconds: 8 * 24 * 3600})
			return err
		}, codes.InvalidArgument, "grace_seconds"},
		{"replay from a negative id", func() error {
			_, err := on.ReplayWebhookEndpoint(ctx, &logicv1.ReplayWebhookEndpointRequest{EndpointId: 1, FromId: -1})
			return err
		}, codes.InvalidArgument, "from_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("got %v, want %v naming %q", err, tt.code, tt.msg)
			}
		})
	}
	if l, err := on.ListWebhookEndpoints(ctx, &logicv1.ListWebhookEndpointsRequest{}); err != nil || len(l.Endpoints) != 0 {
		t.Fatalf("refused calls created endpoints: %v, %v", l, err)
	}
	// A public address is taken; the secret is answered once.
	ep, err := on.CreateWebhookEndpoint(ctx, &logicv1.CreateWebhookEndpointRequest{Url: "https://8.8.8.8/hook", Events: []string{"message.sent"}})
	if err != nil || !strings.HasPrefix(ep.Secret, "whsec_") || ep.Status != "active" {
		t.Fatalf("create: %v, %v", ep, err)
	}
	l, err := on.ListWebhookEndpoints(ctx, &logicv1.ListWebhookEndpointsRequest{})
	if err != nil || len(l.Endpoints) != 1 || l.Endpoints[0].Secret != "" {
		t.Fatalf("list after create: %v, %v", l, err)
	}
}
