package clusterauth

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestGuards(t *testing.T) {
	cluster := NewGuard("s3cret", HealthPrefix, "/logic.v1.Api/")
	keys := NewKeyGuard("x-api-key", []string{" k1 ", "k2", ""}, "/logic.v1.Api/")
	none := NewKeyGuard("x-api-key", []string{" "}, "/logic.v1.Api/")
	md := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	tests := []struct {
		name   string
		g      *Guard
		ctx    context.Context
		method string
		ok     bool
	}{
		{"cluster secret", cluster, md(MetadataKey, "s3cret"), "/logic.v1.Gateway/Connect", true},
		{"wrong secret", cluster, md(MetadataKey, "nope"), "/logic.v1.Gateway/Connect", false},
		{"no metadata", cluster, context.Background(), "/gate.v1.Push/Push", false},
		{"health exempt", cluster, context.Background(), "/grpc.health.v1.Health/Check", true},
		{"api exempt from the cluster guard", cluster, context.Background(), "/logic.v1.Api/IssueToken", true},
		{"api key", keys, md("x-api-key", "k2"), "/logic.v1.Api/IssueToken", true},
		{"trimmed api key", keys, md("x-api-key", "k1"), "/logic.v1.Api/IssueToken", true},
		{"wrong api key", keys, md("x-api-key", "k3"), "/logic.v1.Api/IssueToken", false},
		{"empty api key never matches", keys, md("x-api-key", ""), "/logic.v1.Api/IssueToken", false},
		{"key guard ignores other services", keys, context.Background(), "/logic.v1.Gateway/Connect", true},
		{"no keys configured", none, md("x-api-key", " "), "/logic.v1.Api/IssueToken", false},
	}
	handler := func(context.Context, any) (any, error) { return "ok", nil }
	for _, tt := range tests {
		_, err := tt.g.Unary(tt.ctx, nil, &grpc.UnaryServerInfo{FullMethod: tt.method}, handler)
		if (err == nil) != tt.ok || (err != nil && status.Code(err) != codes.Unauthenticated) {
			t.Errorf("%s: err %v", tt.name, err)
		}
	}
}
