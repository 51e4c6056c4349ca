package gateway

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sparkim/spark/logic/internal/gatepush"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// BenchmarkStreamBatch is the cost of the Gateway stream itself per
// request and answer, over loopback TCP, when the gate sends k requests per
// frame (k=1 is one per frame, as before batches). Requests carry no
// session, so logic answers each at once without storage (Redis holds only
// the gate registry entry). cpu-µs/item is
// the process's CPU (both ends of the stream) per request answered.
func BenchmarkStreamBatch(b *testing.B) {
	for _, k := range []int{1, 2, 4, 16, 64} {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) { benchStream(b, k) })
	}
}

func benchStream(b *testing.B, k int) {
	// Redis only holds the gate registry entry of the stream's Hello.
	rdb := testenv.Redis(b)
	srv, err := NewServer(context.Background(), &Handler{Timeout: config.Default().Logic.RequestTimeout, MaxFrameSize: config.Default().Logic.MaxFrameSize}, gatepush.NewRegistry(rdb, nil), nil)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	logicv1.RegisterGatewayServer(gs, srv)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := logicv1.NewGatewayClient(cc).Connect(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := cs.Send(&logicv1.GateFrame{Kind: &logicv1.GateFrame_Hello{Hello: &logicv1.Hello{GateId: "bench", Batches: true}}}); err != nil {
		b.Fatal(err)
	}
	if _, err := cs.Recv(); err != nil { // Welcome
		b.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		n := 0
		for n < b.N {
			f, err := cs.Recv()
			if err != nil {
				answered <- err
				return
			}
			if f.GetResponse() != nil {
				n++
			}
			n += len(f.GetBatch().GetResponses())
		}
		answered <- nil
	}()
	body := []byte(`{"to_user_id":"2","client_msg_id":"c1","message_type":1,"content":{"t":1,"text":"hello"}}`)
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		n := min(k, b.N-sent)
		events := make([]*logicv1.GateEvent, n)
		for i := range events {
			// Many connections, so logic handles them in parallel as it
			// would a gate's.
			events[i] = &logicv1.GateEvent{Kind: &logicv1.GateEvent_Request{Request: &logicv1.Request{
				ConnId: uint64((sent + i) % 512), Command: uint32(protocol.CmdSendMessage), RequestId: uint64(sent + i), Body: body}}}
		}
		f := &logicv1.GateFrame{Kind: &logicv1.GateFrame_Batch{Batch: &logicv1.GateBatch{Events: events}}}
		if n == 1 {
			f = &logicv1.GateFrame{Kind: &logicv1.GateFrame_Request{Request: events[0].GetRequest()}}
		}
		if err := cs.Send(f); err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	select {
	case err := <-answered:
		if err != nil {
			b.Fatal(err)
		}
	case <-time.After(time.Minute):
		b.Fatal("answers missing")
	}
	b.StopTimer()
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/item")
}
