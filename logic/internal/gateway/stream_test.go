package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sparkim/spark/logic/internal/auth"
	"github.com/sparkim/spark/logic/internal/gateway"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// fakePush is a gate Push server that records kicks.
type fakePush struct {
	gatev1.UnimplementedPushServer
	kicks chan *gatev1.KickRequest
}

func (f *fakePush) Kick(ctx context.Context, req *gatev1.KickRequest) (*gatev1.KickReply, error) {
	f.kicks <- req
	return &gatev1.KickReply{Kicked: uint32(len(req.Targets))}, nil
}

func startFakePush(t *testing.T) (*fakePush, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakePush{kicks: make(chan *gatev1.KickRequest, 8)}
	g := grpc.NewServer(clusterauth.NewGuard(clusterSecret).ServerOptions()...)
	gatev1.RegisterPushServer(g, f)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return f, ln.Addr().String()
}

func startLogic(t *testing.T, e *env) (*gateway.Server, *grpc.ClientConn) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gw, err := gateway.NewServer(context.Background(), e.handler, e.reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(clusterauth.NewGuard(clusterSecret, clusterauth.HealthPrefix).ServerOptions()...)
	logicv1.RegisterGatewayServer(gs, gw)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return gw, cc
}

func withSecret(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, clusterauth.MetadataKey, clusterSecret)
}

type gateStream struct {
	t *testing.T
	s logicv1.Gateway_ConnectClient
}

func (g *gateStream) send(f *logicv1.GateFrame) {
	g.t.Helper()
	if err := g.s.Send(f); err != nil {
		g.t.Fatal(err)
	}
}

func (g *gateStream) request(r *logicv1.Request) {
	g.t.Helper()
	g.send(&logicv1.GateFrame{Kind: &logicv1.GateFrame_Request{Request: r}})
}

func (g *gateStream) recv() *logicv1.Response {
	g.t.Helper()
	f, err := g.s.Recv()
	if err != nil {
		g.t.Fatal(err)
	}
	return f.GetResponse()
}

func TestConnectStream(t *testing.T) {
	e := newEnv(t, 33)
	push, pushAddr := startFakePush(t)
	gw, cc := startLogic(t, e)
	client := logicv1.NewGatewayClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Without the cluster secret: refused.
	s0, err := client.Connect(ctx)
	if err == nil {
		_, err = s0.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no secret: %v", err)
	}
	// First frame not Hello: refused.
	s1, err := client.Connect(withSecret(ctx))
	if err != nil {
		t.Fatal(err)
	}
	_ = s1.Send(&logicv1.GateFrame{Kind: &logicv1.GateFrame_Request{Request: &logicv1.Request{Command: 1}}})
	if _, err := s1.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("request before Hello: %v", err)
	}

	gateID := testenv.RandomName("gate-t-")
	raw, err := client.Connect(withSecret(ctx))
	if err != nil {
		t.Fatal(err)
	}
	g := &gateStream{t: t, s: raw}
	g.send(&logicv1.GateFrame{Kind: &logicv1.GateFrame_Hello{Hello: &logicv1.Hello{GateId: gateID, PushAddr: pushAddr}}})

	a, b := testenv.RandomUserID(), testenv.RandomUserID()
	authOn := func(conn uint64, uid int64, dev string) *logicv1.Session {
		t.Helper()
		g.request(&logicv1.Request{ConnId: conn, Command: 1, RequestId: conn, Body: authBody(mint(t, secret, uid, "", time.Hour, time.Now()), dev)})
		resp := g.recv()
		if r := decode(t, resp.Body); r.Code != errcode.OK || resp.Bind == nil || resp.ConnId != conn {
			t.Fatalf("AUTH on %d: %s %s", conn, r.Code, r.Msg)
		}
		return resp.Bind
	}
	routeOf := func(uid int64, dev string) string {
		v, _ := e.rdb.HGet(ctx, rediskey.Route(uid), dev).Result()
		return v
	}

	s1a := authOn(1, a, "phone")
	if addr, _ := e.rdb.HGet(ctx, rediskey.Gate(gateID), "push_addr").Result(); addr != pushAddr {
		t.Fatalf("gate registry push_addr %q, want %q", addr, pushAddr)
	}
	if ttl, _ := e.rdb.TTL(ctx, rediskey.Gate(gateID)).Result(); ttl <= 0 || ttl > 30*time.Second {
		t.Fatalf("gate registry ttl %v", ttl)
	}
	want1 := route.Entry{GateID: gateID, ConnID: 1, SinceMs: s1a.SinceMs}.String()
	if got := routeOf(a, "phone"); got != want1 {
		t.Fatalf("route %q, want %q", got, want1)
	}

	// Same device again on conn 2: conn 1 is kicked on its gate.
	s2a := authOn(2, a, "phone")
	select {
	case k := <-push.kicks:
		if k.Reason != auth.KickReason || len(k.Targets) != 1 || k.Targets[0].ConnId != 1 || k.Targets[0].UserId != a || k.Targets[0].DeviceId != "phone" {
			t.Fatalf("kick %+v", k)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("old connection not kicked")
	}
	want2 := route.Entry{GateID: gateID, ConnID: 2, SinceMs: s2a.SinceMs}.String()
	// The late close of conn 1 leaves conn 2's route alone.
	g.send(&logicv1.GateFrame{Kind: &logicv1.GateFrame_Closed{Closed: &logicv1.Closed{ConnId: 1, Session: s1a, Reason: "kicked"}}})
	g.request(&logicv1.Request{ConnId: 1, Session: s1a, Command: 3}) // answered after the Closed
	g.recv()
	if got := routeOf(a, "phone"); got != want2 {
		t.Fatalf("route after old close %q, want %q", got, want2)
	}

	// Back-to-back sends of one connection are answered in order with
	// increasing MsgIds.
	authOn(3, b, "web")
	const n = 30
	for i := 0; i < n; i++ {
		body, _ := json.Marshal(map[string]any{"to_user_id": fmt.Sprint(b), "client_msg_id": fmt.Sprint("m", i), "message_type": 1, "content": map[string]any{"t": 1, "text": "hi"}})
		g.request(&logicv1.Request{ConnId: 2, Session: s2a, Command: 4, RequestId: uint64(1000 + i), SequenceId: uint32(i), Body: body})
	}
	var last int64
	for i := 0; i < n; i++ {
		resp := g.recv()
		r := decode(t, resp.Body)
		if resp.Command != 5 || r.Code != errcode.OK || resp.RequestId != uint64(1000+i) {
			t.Fatalf("send %d: command %d code %s %s request %d", i, resp.Command, r.Code, r.Msg, resp.RequestId)
		}
		var ack struct {
			MsgID       json.Number `json:"msg_id"`
			ClientMsgID string      `json:"client_msg_id"`
		}
		if err := json.Unmarshal(r.Data, &ack); err != nil || ack.ClientMsgID != fmt.Sprint("m", i) {
			t.Fatalf("ack %s", r.Data)
		}
		id, _ := ack.MsgID.Int64()
		if id <= last {
			t.Fatalf("msg id %d after %d", id, last)
		}
		last = id
	}

	// Close of the current connection drops its route.
	g.send(&logicv1.GateFrame{Kind: &logicv1.GateFrame_Closed{Closed: &logicv1.Closed{ConnId: 2, Session: s2a}}})
	g.request(&logicv1.Request{ConnId: 2, Session: s2a, Command: 3})
	g.recv()
	if got := routeOf(a, "phone"); got != "" {
		t.Fatalf("route after close %q, want none", got)
	}

	// Drain ends the stream.
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel()
	go gw.Drain(dctx)
	if _, err := raw.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("stream after drain: %v", err)
	}
}
