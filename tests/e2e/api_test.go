package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sparkim/spark/pkg/clusterauth"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

func dialGRPC(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// The business API mints tokens only for a valid API key; the internal
// services refuse callers without the cluster secret; health answers.
func TestBusinessAPIAndInternalAuth(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 1})
	ctx := ctxT(t, time.Minute)
	logic := dialGRPC(t, c.Logics[0].GRPCAddr)
	api := logicv1.NewApiClient(logic)

	withKey := metadata.AppendToOutgoingContext(ctx, "x-api-key", framework.APIKey)
	reply, err := api.IssueToken(withKey, &logicv1.IssueTokenRequest{UserId: 11001, DeviceId: "issued-dev"})
	if err != nil {
		t.Fatal(err)
	}
	if reply.ExpiresAtMs <= time.Now().UnixMilli() {
		t.Fatalf("expires_at %d in the past", reply.ExpiresAtMs)
	}
	conn := c.Dial(t, 0)
	if _, err := conn.Auth(ctx, reply.Token, "issued-dev", "test", "1"); err != nil {
		t.Fatalf("AUTH with an issued token: %v", err)
	}

	bad := []struct {
		name string
		ctx  context.Context
		req  *logicv1.IssueTokenRequest
		code codes.Code
	}{
		{"no key", ctx, &logicv1.IssueTokenRequest{UserId: 1}, codes.Unauthenticated},
		{"wrong key", metadata.AppendToOutgoingContext(ctx, "x-api-key", "nope"), &logicv1.IssueTokenRequest{UserId: 1}, codes.Unauthenticated},
		{"user id zero", withKey, &logicv1.IssueTokenRequest{UserId: 0}, codes.InvalidArgument},
		{"bad device id", withKey, &logicv1.IssueTokenRequest{UserId: 1, DeviceId: "a b"}, codes.InvalidArgument},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := api.IssueToken(tt.ctx, tt.req)
			if status.Code(err) != tt.code {
				t.Fatalf("got %v, want %v", err, tt.code)
			}
		})
	}

	t.Run("gateway stream without the cluster secret", func(t *testing.T) {
		st, err := logicv1.NewGatewayClient(logic).Connect(ctx)
		if err == nil {
			_ = st.Send(&logicv1.GateFrame{Kind: &logicv1.GateFrame_Hello{Hello: &logicv1.Hello{GateId: "intruder"}}})
			_, err = st.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("got %v, want Unauthenticated", err)
		}
	})
	t.Run("push without the cluster secret", func(t *testing.T) {
		push := gatev1.NewPushClient(dialGRPC(t, c.Gates[0].PushAddr))
		if _, err := push.Broadcast(ctx, &gatev1.BroadcastRequest{Command: 6, Body: []byte(`{}`)}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("got %v, want Unauthenticated", err)
		}
		withSecret := gatev1.NewPushClient(dialGRPC(t, c.Gates[0].PushAddr, clusterauth.Credentials(framework.ClusterSecret)))
		stats, err := withSecret.Stats(ctx, &gatev1.StatsRequest{})
		if err != nil || stats.GateId != c.Gates[0].ID || stats.Authenticated < 1 {
			t.Fatalf("stats %+v %v", stats, err)
		}
	})
	t.Run("health", func(t *testing.T) {
		for _, addr := range []string{c.Logics[0].GRPCAddr, c.Gates[0].PushAddr} {
			res, err := healthpb.NewHealthClient(dialGRPC(t, addr)).Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("%s: %v %v", addr, res, err)
			}
		}
	})
}
