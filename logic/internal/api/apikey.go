package api

import (
	"context"
	"crypto/subtle"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MetadataKey carries a business API key.
const MetadataKey = "x-api-key"

// Prefix is the full-method prefix of the business API.
const Prefix = "/logic.v1.Api/"

// KeyGuard admits calls of the business API that carry one of the
// configured keys; other services pass through untouched.
type KeyGuard struct {
	keys [][]byte
}

// NewKeyGuard returns a guard for keys (empty keys are ignored; with none,
// every API call is refused).
func NewKeyGuard(keys []string) *KeyGuard {
	g := &KeyGuard{}
	for _, k := range keys {
		if k = strings.TrimSpace(k); k != "" {
			g.keys = append(g.keys, []byte(k))
		}
	}
	return g
}

func (g *KeyGuard) check(ctx context.Context, method string) error {
	if !strings.HasPrefix(method, Prefix) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(MetadataKey) {
		ok := 0
		for _, k := range g.keys {
			ok |= subtle.ConstantTimeCompare([]byte(v), k)
		}
		if ok == 1 {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "a valid x-api-key is required")
}

// Unary is the unary server interceptor.
func (g *KeyGuard) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := g.check(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// Stream is the stream server interceptor.
func (g *KeyGuard) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := g.check(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}
