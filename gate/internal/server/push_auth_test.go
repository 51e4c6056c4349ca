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

// holdingLogic records the requests it gets and never answers: an AUTH
// stays in flight for as long as the test wants.
type holdingLogic struct {
	logicv1.UnimplementedGatewayServer
	reqs chan *logicv1.Request
}

func (h *holdingLogic) Connect(ss logicv1.Gateway_ConnectServer) error {
	for {
		in, err := ss.Recv()
		if err != nil {
			return nil
		}
		if r := in.GetRequest(); r != nil {
			h.reqs <- r
		}
	}
}

// Logic writes a device's route while it answers AUTH, before the gate
// binds the session. A push that lands in between must not be reported
// missing — deliver would delete the live route and the device would miss
// every later push — but dropped, which keeps the route.
func TestPushDuringAuthIsDroppedNotMissing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl := &holdingLogic{reqs: make(chan *logicv1.Request, 16)}
	gs := grpc.NewServer(clusterauth.NewGuard(testSecret).ServerOptions()...)
	logicv1.RegisterGatewayServer(gs, hl)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)

	s := startGate(t, testGateConfig(ln.Addr().String()))
	pc := pushClient(t, s)
	c := dial(t, s)
	c.send(protocol.CmdAuth, 1, 1, []byte(`{"token":"user:42","device_id":"dev-a","platform":"t","app_version":"1"}`))
	var auth *logicv1.Request
	select {
	case auth = <-hl.reqs:
	case <-time.After(safety):
		t.Fatal("the AUTH never reached logic")
	}
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
