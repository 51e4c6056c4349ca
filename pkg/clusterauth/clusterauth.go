// Package clusterauth authenticates the internal gRPC links (gate ⇄ logic,
// deliver/logic → gate Push) with a shared cluster secret in metadata, so
// nothing outside the cluster can inject frames or pushes.
package clusterauth

import (
	"context"
	"crypto/subtle"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MetadataKey carries the cluster secret.
const MetadataKey = "x-cluster-secret"

// Credentials returns a dial option that sends secret on every call.
func Credentials(secret string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(creds(secret))
}

type creds string

func (c creds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{MetadataKey: string(c)}, nil
}

func (creds) RequireTransportSecurity() bool { return false }

// Guard checks the secret of incoming calls. Methods whose full name starts
// with one of the exempt prefixes (health checks, reflection, the business
// API with its own keys) pass without it.
type Guard struct {
	secret []byte
	exempt []string
}

// NewGuard returns a Guard for secret.
func NewGuard(secret string, exemptPrefixes ...string) *Guard {
	return &Guard{secret: []byte(secret), exempt: exemptPrefixes}
}

func (g *Guard) check(ctx context.Context, method string) error {
	for _, p := range g.exempt {
		if strings.HasPrefix(method, p) {
			return nil
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(MetadataKey) {
		if subtle.ConstantTimeCompare([]byte(v), g.secret) == 1 {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "cluster secret required")
}

// Unary is the unary server interceptor.
func (g *Guard) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := g.check(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// Stream is the stream server interceptor.
func (g *Guard) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := g.check(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

// ServerOptions returns the interceptors as server options.
func (g *Guard) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.Unary), grpc.ChainStreamInterceptor(g.Stream)}
}

// Exempt prefixes shared by every server.
const (
	HealthPrefix     = "/grpc.health.v1.Health/"
	ReflectionPrefix = "/grpc.reflection."
)
