// Package clusterauth authenticates the internal gRPC links (gate ⇄ logic,
// deliver/logic → gate Push) with a shared cluster secret in metadata, so
// nothing outside the cluster can inject frames or pushes. Its Guard also
// serves other metadata keys, such as the business API's keys.
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

// Guard admits calls whose metadata key holds one of its secrets. It
// checks only the methods it applies to.
type Guard struct {
	key     string
	secrets [][]byte
	applies func(method string) bool
	refusal string
}

// NewGuard returns a Guard for the cluster secret on every method except
// those whose full name starts with one of the exempt prefixes (health
// checks, reflection, the business API with its own keys).
func NewGuard(secret string, exemptPrefixes ...string) *Guard {
	return &Guard{
		key: MetadataKey, secrets: [][]byte{[]byte(secret)}, refusal: "cluster secret required",
		applies: func(method string) bool {
			for _, p := range exemptPrefixes {
				if strings.HasPrefix(method, p) {
					return false
				}
			}
			return true
		},
	}
}

// NewKeyGuard returns a Guard that requires one of keys (blank ones are
// ignored; with none every guarded call is refused) in metadata key, on the
// methods whose full name starts with prefix only.
func NewKeyGuard(key string, keys []string, prefix string) *Guard {
	g := &Guard{key: key, refusal: "a valid " + key + " is required",
		applies: func(method string) bool { return strings.HasPrefix(method, prefix) }}
	for _, k := range keys {
		if k = strings.TrimSpace(k); k != "" {
			g.secrets = append(g.secrets, []byte(k))
		}
	}
	return g
}

func (g *Guard) check(ctx context.Context, method string) error {
	if !g.applies(method) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(g.key) {
		if g.Allows(v) {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, g.refusal)
}

// Allows reports whether v is one of the guard's secrets, in constant
// time: the same check for a front door that is not gRPC (an HTTP header).
func (g *Guard) Allows(v string) bool {
	ok := 0
	for _, s := range g.secrets {
		ok |= subtle.ConstantTimeCompare([]byte(v), s)
	}
	return ok == 1
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
