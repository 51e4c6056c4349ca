package message_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/testredis"
)

// deadRedisAddr returns the address of a Redis that is down: "refused" is
// a closed port, "hung" a listener that accepts and never answers (a
// stopped or partitioned server).
func deadRedisAddr(t *testing.T, mode string) string {
	t.Helper()
	if mode == "hung" {
		return testredis.HungAddr(t)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// With Redis down, a send's row is committed but its job cannot be
// queued: the send answers 50301 (never an ack) within the enqueue budget
// and a little, not after every XADD attempt's timeout, and a retry with
// the same client_msg_id does not add a row.
func TestSendWithRedisDownAnswersBusyWithinTheEnqueueBudget(t *testing.T) {
	const bound = 1500 * time.Millisecond // the 1 s budget, the commit, slack
	e := newEnv(t)
	g, err := msgid.New(context.Background(), msgid.Settings{MachineID: 62, Store: store.NewHighWater(e.hw)})
	if err != nil {
		t.Fatal(err)
	}
	e.lease(t, 62)
	for _, mode := range []string{"refused", "hung"} {
		t.Run(mode, func(t *testing.T) {
			// As pkg/redisconn builds it: go-redis's defaults but for
			// ContextTimeoutEnabled, without which it ignores the deadline
			// on a connection that never answers (decision 72).
			rdb := redis.NewClient(&redis.Options{Addr: deadRedisAddr(t, mode), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = rdb.Close() })
			svc, err := message.New(e.st, rdb, g, testConfig(message.Config{}), nil, e.metrics)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(svc.Close)
			u := e.users(t, 2)
			from := message.Sender{UserID: u[0], DeviceID: "d"}
			req := sendReq(body("to_user_id", u[1], "client_msg_id", "down-"+mode, "message_type", 1, "content", text("queued later")))
			for attempt := 1; attempt <= 2; attempt++ {
				start := time.Now()
				ack, err := svc.Send(context.Background(), from, req)
				took := time.Since(start)
				if code(err) != errcode.Busy || ack != nil {
					t.Fatalf("attempt %d: ack %+v, error %v; want 50301 and no ack", attempt, ack, err)
				}
				if took > bound {
					t.Errorf("attempt %d answered 50301 after %v, want within %v", attempt, took, bound)
				}
			}
			var rows int
			if err := e.st.DB().Get(&rows, "SELECT COUNT(*) FROM t_messages WHERE sender_id = ?", u[0]); err != nil || rows != 1 {
				t.Fatalf("%d rows (%v), want the one committed row", rows, err)
			}
		})
	}
}
