package e2e

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/tests/framework"
)

// SIGTERM on one of two logic processes under steady P2P and group load
// (issue 12, "graceful"): it stops taking requests (50301, or the gates
// move the connections to the other logic), answers the sends already in
// flight, releases its machine-id lease and exits 0. Nothing acked is
// lost, and no send waits for an answer longer than logic's drain bound.
func TestLogicSIGTERMUnderLoadFinishesInFlightSendsReleasesItsLeaseAndLosesNothing(t *testing.T) {
	// drainBound is logic's drain timeout (server.drainTimeout): the
	// longest an in-flight request may be held before its answer.
	const drainBound = 5 * time.Second
	c := framework.NewCluster(t, framework.Options{Gates: 2, Logics: 2})
	ctx := ctxT(t, 3*time.Minute)
	g1, g2 := c.Gates[0].TCPAddr, c.Gates[1].TCPAddr
	l := startKillLoad(t, ctx, c, 7701, 6, 3, []string{g1, g2}, []string{g2, g1})
	l.run(t, 100*time.Millisecond)
	time.Sleep(1500 * time.Millisecond)

	stopping := c.Logics[0]
	// Sends on logic-1 are held for half a second after their commit, so
	// SIGTERM finds some in flight: the drain must answer them.
	const hold = 500 * time.Millisecond
	if err := framework.Failpoint(stopping.AdminAddr, "logic/send/afterCommit", "sleep(500)"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := stopping.Stop(); err != nil {
		t.Fatalf("logic-1 after SIGTERM: %v\n%s", err, stopping.Tail(30))
	}
	took := time.Since(start)
	if took > drainBound+2*time.Second {
		t.Fatalf("logic-1 exited %v after SIGTERM, want within the drain bound %v and a little", took, drainBound)
	}
	r := c.Redis.Client()
	defer r.Close()
	if v, err := r.Get(ctx, rediskey.MachineLease(stopping.MachineID)).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("machine lease of the stopped logic: %q (%v), want it released", v, err)
	}
	time.Sleep(3 * time.Second) // the load goes on through logic-2
	l.finish()
	l.requireSteady(t, l.check(t, ctx, false), start)
	// The sends held on logic-1 when SIGTERM came were answered with
	// their SEND_ACK, not cut off.
	inflight := l.ackedAcross(start)
	if inflight == 0 {
		t.Fatalf("no send in flight at SIGTERM was acked (logic-1 held its sends %v after their commit)", hold)
	}
	if w := l.slowest(); w > drainBound {
		t.Fatalf("a send waited %v for its answer, above the drain bound %v", w, drainBound)
	}
	t.Logf("logic-1 exited 0 %v after SIGTERM and released its lease; %d sends in flight then were acked; the slowest answer to a send took %v",
		took.Round(time.Millisecond), inflight, l.slowest().Round(time.Millisecond))
}
