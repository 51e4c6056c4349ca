package api_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sparkim/spark/logic/internal/api"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/token"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

func TestIssueToken(t *testing.T) {
	_, db := testenv.MySQL(t)
	secret := []byte("s3cret")
	lis := bufconn.Listen(1 << 20)
	guard := clusterauth.NewGuard("cluster", clusterauth.HealthPrefix, api.Prefix)
	keys := api.NewKeyGuard([]string{"key-1", "key-2"})
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(guard.Unary, keys.Unary))
	logicv1.RegisterApiServer(gs, api.New(store.New(db), secret, time.Hour, nil))
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := logicv1.NewApiClient(cc)
	uid := testenv.RandomUserID()
	tests := []struct {
		name string
		key  string
		req  *logicv1.IssueTokenRequest
		want codes.Code
		ttl  time.Duration
	}{
		{"no key", "", &logicv1.IssueTokenRequest{UserId: uid}, codes.Unauthenticated, 0},
		{"wrong key", "nope", &logicv1.IssueTokenRequest{UserId: uid}, codes.Unauthenticated, 0},
		{"zero user", "key-1", &logicv1.IssueTokenRequest{}, codes.InvalidArgument, 0},
		{"bad device", "key-1", &logicv1.IssueTokenRequest{UserId: uid, DeviceId: "a b"}, codes.InvalidArgument, 0},
		{"negative ttl", "key-1", &logicv1.IssueTokenRequest{UserId: uid, TtlSeconds: -1}, codes.InvalidArgument, 0},
		{"default ttl", "key-1", &logicv1.IssueTokenRequest{UserId: uid}, codes.OK, time.Hour},
		{"device and ttl", "key-2", &logicv1.IssueTokenRequest{UserId: uid, DeviceId: "dev-9", TtlSeconds: 60}, codes.OK, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.key != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, api.MetadataKey, tt.key)
			}
			rep, err := c.IssueToken(ctx, tt.req)
			if status.Code(err) != tt.want {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tt.want)
			}
			if err != nil {
				return
			}
			cl, err := token.Verify(secret, rep.Token, time.Now())
			if err != nil || cl.UserID != tt.req.UserId || cl.DeviceID != tt.req.DeviceId {
				t.Fatalf("claims %+v (%v)", cl, err)
			}
			if d := time.Until(time.UnixMilli(rep.ExpiresAtMs)); d > tt.ttl || d < tt.ttl-5*time.Second {
				t.Fatalf("expires in %v, want about %v", d, tt.ttl)
			}
		})
	}
	var n int
	if err := db.Get(&n, "SELECT COUNT(*) FROM t_users WHERE id = ?", uid); err != nil || n != 1 {
		t.Fatalf("user row: %d (%v)", n, err)
	}
}
