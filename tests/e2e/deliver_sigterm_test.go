package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/tests/framework"
)

// leaseOwners returns each partition's lease holder ("" when free).
func leaseOwners(t *testing.T, c *framework.Cluster, partitions int) []string {
	t.Helper()
	r := c.Redis.Client()
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := make([]string, partitions)
	for p := range out {
		v, err := r.Get(ctx, rediskey.DeliverLease(p)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("GET %s: %v", rediskey.DeliverLease(p), err)
		}
		out[p] = v
	}
	return out
}

// SIGTERM on one of two delivers under steady P2P load: it finishes the
// batch in hand, releases the batch it read ahead and its leases, and
// leaves; the other owns every partition within the lease TTL (3 s here)
// of the exit, not after the leases expire. Every acked message reaches
// its recipient by push, none twice: a graceful stop neither drops nor
// repeats a job.
func TestDeliverSIGTERMHandsItsPartitionsOverWithoutLossOrRepeat(t *testing.T) {
	const partitions = 8
	c := framework.NewCluster(t, framework.Options{Gates: 2, Delivers: 2, Partitions: partitions})
	ctx := ctxT(t, 2*time.Minute)

	// Both delivers hold a share before the load starts.
	deadline := time.Now().Add(15 * time.Second)
	for {
		held := map[string]int{}
		for _, o := range leaseOwners(t, c, partitions) {
			held[o]++
		}
		if held["deliver-1"] > 0 && held["deliver-2"] > 0 && held[""] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitions not shared by both delivers: %v", held)
		}
		time.Sleep(100 * time.Millisecond)
	}

	const pairs, perSender = 4, 80
	type pair struct {
		recv  *device
		mu    sync.Mutex
		acks  []protocol.SendAck
		sendE error
	}
	ps := make([]*pair, pairs)
	var wg sync.WaitGroup
	for i := range ps {
		from, to := int64(9601+2*i), int64(9602+2*i)
		sender := c.Login(t, i%2, from, "s")
		ps[i] = &pair{recv: watch(t, fmt.Sprintf("recv-%d", to), c.Login(t, 1-i%2, to, "r"))}
		wg.Go(func() {
			for k := 0; k < perSender; k++ {
				ack, err := sender.Send(ctx, sendTo(to, fmt.Sprintf("sigterm-%d-%d", from, k), text(t, fmt.Sprintf("m%d", k))))
				ps[i].mu.Lock()
				if err != nil {
					ps[i].sendE = err
				} else {
					ps[i].acks = append(ps[i].acks, ack)
				}
				ps[i].mu.Unlock()
				time.Sleep(25 * time.Millisecond)
			}
		})
	}

	time.Sleep(700 * time.Millisecond)
	stopped := time.Now()
	if err := c.Delivers[0].Stop(); err != nil {
		t.Fatalf("SIGTERM deliver-1: %v", err)
	}
	exited := time.Now()
	// Drain (5 s) plus the lease and member clean-up bound the exit.
	if d := exited.Sub(stopped); d > 8*time.Second {
		t.Fatalf("deliver-1 took %v to exit after SIGTERM", d)
	}
	deadline = exited.Add(3 * time.Second)
	for {
		all := true
		for _, o := range leaseOwners(t, c, partitions) {
			all = all && o == "deliver-2"
		}
		if all {
			t.Logf("deliver-1 exited %v after SIGTERM; deliver-2 owned every partition %v after that",
				exited.Sub(stopped).Round(time.Millisecond), time.Since(exited).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("3 s after deliver-1 exited, partitions are held by %v", leaseOwners(t, c, partitions))
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()

	for _, p := range ps {
		if p.sendE != nil {
			t.Fatalf("a send failed while only deliver stopped: %v", p.sendE)
		}
		if len(p.acks) != perSender {
			t.Fatalf("%d acks, want %d", len(p.acks), perSender)
		}
		if n := waitPushed(t, []*device{p.recv}, p.acks, 20*time.Second)[0]; n != perSender {
			t.Fatalf("%s: %d of %d acked messages pushed", p.recv.name, n, perSender)
		}
		pushes := map[int64]int{}
		for _, m := range p.recv.pushed() {
			pushes[m.MsgID.Int64()]++
		}
		for id, k := range pushes {
			if k != 1 {
				t.Fatalf("%s: msg %d pushed %d times; a graceful stop must not repeat a job", p.recv.name, id, k)
			}
		}
		// Pushes of one conversation arrive in id order.
		got := p.recv.pushed()
		for k := 1; k < len(got); k++ {
			if got[k].MsgID.Int64() <= got[k-1].MsgID.Int64() {
				t.Fatalf("%s: push %d (msg %s) after msg %s: out of order", p.recv.name, k, got[k].MsgID, got[k-1].MsgID)
			}
		}
	}
	waitNoPending(t, c, partitions, 10*time.Second)
}
