package server

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/protocol"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// holdingLogic records the requests it gets and answers none by itself:
// an AUTH stays in flight until the test answers it (answerAuth).
type holdingLogic struct {
	logicv1.UnimplementedGatewayServer
	reqs chan heldRequest
}

type heldRequest struct {
	req *logicv1.Request
	ss  logicv1.Gateway_ConnectServer
}

func (h *holdingLogic) Connect(ss logicv1.Gateway_ConnectServer) error {
	for {
		in, err := ss.Recv()
		if err != nil {
			return nil
		}
		if r := in.GetRequest(); r != nil {
			h.reqs <- heldRequest{req: r, ss: ss}
		}
	}
}

// startHoldingLogic serves a holdingLogic and returns it with its address.
func startHoldingLogic(t *testing.T) (*holdingLogic, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl := &holdingLogic{reqs: make(chan heldRequest, 16)}
	gs := grpc.NewServer(clusterauth.NewGuard(testSecret).ServerOptions()...)
	logicv1.RegisterGatewayServer(gs, hl)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return hl, ln.Addr().String()
}

// next returns the next request the gate forwarded.
func (h *holdingLogic) next(t *testing.T) heldRequest {
	t.Helper()
	select {
	case r := <-h.reqs:
		return r
	case <-time.After(safety):
		t.Fatal("no request reached logic")
	}
	return heldRequest{}
}

// answerAuth answers a held AUTH with a successful bind of (uid, device).
func (h heldRequest) answerAuth(t *testing.T, uid int64, device string) {
	t.Helper()
	resp := &logicv1.Response{ConnId: h.req.ConnId, Command: h.req.Command, RequestId: h.req.RequestId, SequenceId: h.req.SequenceId,
		Body: envelope.OK("AAAAAAAAAAA", []byte(`{}`)), Bind: &logicv1.Session{UserId: uid, DeviceId: device, SinceMs: 1}}
	if err := h.ss.Send(&logicv1.LogicFrame{Kind: &logicv1.LogicFrame_Response{Response: resp}}); err != nil {
		t.Fatal(err)
	}
}

// Logic writes a device's route while it answers AUTH, before the gate
// binds the session. A push that lands in between must not be reported
// missing — deliver would delete the live route and the device would miss
// every later push — but dropped, which keeps the route.
func TestPushDuringAuthIsDroppedNotMissing(t *testing.T) {
	hl, addr := startHoldingLogic(t)
	s := startGate(t, testGateConfig(addr))
	pc := pushClient(t, s)
	c := dial(t, s)
	c.send(protocol.CmdAuth, 1, 1, []byte(`{"token":"user:42","device_id":"dev-a","platform":"t","app_version":"1"}`))
	auth := hl.next(t).req
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()
	target := &gatev1.Target{ConnId: auth.ConnId, UserId: 42, DeviceId: "dev-a"}
	r, err := pc.Push(ctx, &gatev1.PushRequest{Targets: []*gatev1.Target{target}, Command: uint32(protocol.CmdMessage),
		Body: envelope.OK("AAAAAAAAAAA", []byte(`{"msg_id":"1"}`))})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Missing) != 0 || len(r.Dropped) != 1 || r.Delivered != 0 {
		t.Fatalf("push during AUTH: %v, want dropped (never missing)", r)
	}
}

// A KICK for a connection whose AUTH answer is still on its way (a newer
// AUTH of the same device replaced its route meanwhile) is applied once the
// session binds: the client gets its AUTH answer, then the KICK, then the
// connection closes — never two live sessions of one device.
func TestKickDuringAuthAppliesAfterBind(t *testing.T) {
	hl, addr := startHoldingLogic(t)
	s := startGate(t, testGateConfig(addr))
	pc := pushClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()

	c := dial(t, s)
	c.send(protocol.CmdAuth, 1, 1, []byte(`{"token":"user:42","device_id":"dev-k","platform":"t","app_version":"1"}`))
	held := hl.next(t)
	r, err := pc.Kick(ctx, &gatev1.KickRequest{Targets: []*gatev1.Target{{ConnId: held.req.ConnId, UserId: 42, DeviceId: "dev-k"}}, Reason: "logged in elsewhere"})
	if err != nil || r.Kicked != 1 {
		t.Fatalf("kick during AUTH: %v %v", r, err)
	}
	held.answerAuth(t, 42, "dev-k")
	if a := c.read(); a.Command != protocol.CmdAuth || a.env.Code != "0" {
		t.Fatalf("first frame %+v code %s, want the AUTH answer", a.Header, a.env.Code)
	}
	if k := c.read(); k.Command != protocol.CmdKick {
		t.Fatalf("second frame %+v, want KICK", k.Header)
	}
	c.expectClosed()
}
