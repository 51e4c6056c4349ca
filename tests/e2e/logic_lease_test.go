package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/tests/framework"
)

// A logic whose machine-id lease cannot be renewed (an armed
// logic/lease/renew failpoint: Redis unreachable from it alone) stops
// issuing ids — its sends answer 50301 and store nothing — while the key
// is still live in Redis, a safety margin before it could expire. A second
// logic configured with the same machine id then takes it, and the first
// one, finding its lease taken, stops.
func TestLogicWithALostMachineLeaseAnswers50301BeforeItExpiresAndASecondLogicTakesTheID(t *testing.T) {
	// The logic's lease timings (server.MachineLeaseTTL, MachineLeaseMargin).
	const ttl, margin = 15 * time.Second, 5 * time.Second
	c := framework.NewCluster(t, framework.Options{Gates: 1})
	ctx := ctxT(t, 2*time.Minute)
	first := c.Logics[0]
	sender := c.Login(t, 0, 7901, "s")
	_ = c.Login(t, 0, 7902, "p")
	if _, err := sender.Send(ctx, sendTo(7902, "lease-ok", text(t, "while the lease is renewed"))); err != nil {
		t.Fatal(err)
	}
	r := c.Redis.Client()
	defer r.Close()
	key := rediskey.MachineLease(first.MachineID)

	if err := framework.Failpoint(first.AdminAddr, "logic/lease/renew", "error"); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	var (
		refused string
		left    time.Duration
	)
	for i := 0; refused == ""; i++ {
		if time.Since(cut) > ttl-margin+2*time.Second {
			t.Fatalf("sends still acked %v after renewals stopped; ids must stop %v after the last renewal", time.Since(cut), ttl-margin)
		}
		id := fmt.Sprintf("lease-%d", i)
		reply, err := sender.Request(ctx, protocol.CmdSendMessage, sendTo(7902, id, text(t, id)))
		if err != nil {
			t.Fatal(err)
		}
		switch reply.Envelope.Code {
		case errcode.OK:
			time.Sleep(200 * time.Millisecond)
		case errcode.Busy:
			refused = id
			if left, err = r.PTTL(ctx, key).Result(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("send %s: code %s, want 0 or 50301", id, reply.Envelope.Code)
		}
	}
	stopped := time.Since(cut)
	// Stopped before the key could expire: about the margin still left.
	if left < margin/2 {
		t.Fatalf("ids stopped %v after renewals failed with the key's PTTL at %v; want them stopped about %v before it expires", stopped, left, margin)
	}
	if n := c.CountRows("SELECT COUNT(*) FROM t_messages WHERE sender_id = 7901 AND client_msg_id = ?", refused); n != 0 {
		t.Fatalf("send %s answered 50301 but stored %d times", refused, n)
	}
	t.Logf("ids stopped %v after renewals began failing, %v before the lease could expire", stopped.Round(time.Millisecond), left.Round(time.Millisecond))

	// A second logic with the same machine id gets it once it expired.
	port := func() string { return "127.0.0.1:" + strconv.Itoa(framework.FreePort(t)) }
	second := framework.NewProcess(t, "logic-1b", c.Bins.Logic, []string{"-config", c.Config}, []string{
		"IM_LOGIC_GRPC_ADDR=" + port(), "IM_LOGIC_HTTP_ADDR=" + port(), "IM_LOGIC_ADMIN_ADDR=" + port(), "IM_LOGIC_MACHINE_ID=" + strconv.Itoa(first.MachineID),
	})
	t.Cleanup(func() { _ = second.Stop() })
	if err := second.Start(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(cut)
	if took < stopped+left-200*time.Millisecond {
		t.Fatalf("second logic ready %v after the cut, before the first one's lease (PTTL %v at %v) expired", took, left, stopped)
	}
	t.Logf("a second logic with machine id %d became ready %v after renewals failed", first.MachineID, took.Round(time.Millisecond))

	// The first one's renewals get through again, find the key taken and
	// stop it.
	if err := framework.Failpoint(first.AdminAddr, "logic/lease/renew", "off"); err != nil {
		t.Fatal(err)
	}
	if err := first.WaitExit(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := first.WaitLog(ctx, "msgid machine lease lost; stopping", time.Second); err != nil {
		t.Fatal(err)
	}
}
