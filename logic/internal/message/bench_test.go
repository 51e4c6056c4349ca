package message_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/metrics"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/msgid"
)

// BenchmarkSend is the send path against the real MariaDB and Redis: 64
// concurrent senders (one request at a time each, like a connection), one
// P2P conversation each, through the group commit with its defaults.
func BenchmarkSend(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	g, err := msgid.New(ctx, msgid.Settings{MachineID: 70, Store: store.NewHighWater(e.hw)})
	if err != nil {
		b.Fatal(err)
	}
	m := metrics.New(nil)
	svc, err := message.New(e.st, e.rdb, g, testConfig(message.Config{}), nil, m)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(svc.Close)
	const senders = 64
	u := e.users(b, 2*senders)
	bodies := make([][]byte, 0, senders)
	for i := 0; i < senders; i++ {
		// the conversation exists, as for a chat in progress
		if _, err := svc.Send(ctx, message.Sender{UserID: u[2*i], DeviceID: "d"}, sendReq(body("to_user_id", u[2*i+1], "client_msg_id", "warm", "message_type", 1, "content", text("x")))); err != nil {
			b.Fatal(err)
		}
		bodies = append(bodies, []byte(fmt.Sprintf(`{"to_user_id":"%d","client_msg_id":"%%d","message_type":1,"content":{"t":1,"text":"hello, this is a benchmark message"}}`, u[2*i+1])))
	}
	var next, seq atomic.Int64
	b.SetParallelism((senders + 1) / 2) // GOMAXPROCS is 2 here; at least 64 goroutines elsewhere
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)-1) % senders
		from := message.Sender{UserID: u[2*i], DeviceID: "d"}
		for pb.Next() {
			body := []byte(fmt.Sprintf(string(bodies[i]), seq.Add(1)))
			if _, err := svc.Send(ctx, from, sendReq(body)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
}
