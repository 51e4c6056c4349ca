package server_test

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sparkim/spark/logic/internal/server"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/config"
)

func testConfig(t *testing.T) *config.Config {
	t.Helper()
	dsn, _ := testenv.MySQL(t)
	rdb := testenv.Redis(t)
	cfg, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Cluster.Secret = "cluster"
	cfg.Logic.JWTSecret = "jwt"
	cfg.Logic.GRPCAddr = "127.0.0.1:0"
	cfg.Logic.AdminAddr = "127.0.0.1:0"
	cfg.Logic.HTTPAddr = "127.0.0.1:0"
	cfg.Logic.MySQL.DSN = dsn
	cfg.Logic.Redis.Addr = rdb.Options().Addr
	cfg.Logic.Redis.DB = rdb.Options().DB
	cfg.Logic.MachineID = 600 + rand.IntN(400)
	return cfg
}

func TestRunRefusesEmptySecrets(t *testing.T) {
	cfg, _ := config.Load("")
	tests := []struct {
		name           string
		cluster, jwt   string
		wantErrContain string
	}{
		{"no cluster secret", "", "j", "cluster.secret"},
		{"no jwt secret", "c", "", "logic.jwt_secret"},
	}
	for _, tt := range tests {
		c := *cfg
		c.Cluster.Secret, c.Logic.JWTSecret = tt.cluster, tt.jwt
		err := server.Run(context.Background(), &c, zap.NewNop())
		if err == nil || !strings.Contains(err.Error(), tt.wantErrContain) {
			t.Errorf("%s: err %v", tt.name, err)
		}
	}
}

func TestRunServesAndStops(t *testing.T) {
	cfg := testConfig(t)
	core, logs := observer.New(zap.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, cfg, zap.New(core)) }()

	var grpcAddr, adminAddr string
	for deadline := time.Now().Add(15 * time.Second); grpcAddr == ""; {
		for _, e := range logs.FilterMessage("ready to serve").All() {
			m := e.ContextMap()
			grpcAddr, _ = m["grpc"].(string)
			adminAddr, _ = m["admin"].(string)
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned before ready: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no ready line")
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Get("http://" + adminAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz %d %s", resp.StatusCode, body)
	}
	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v (%v)", hc, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
}
