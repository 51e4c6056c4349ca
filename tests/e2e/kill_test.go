package e2e

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/rediskey"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// killLoad is the steady load of a kill test: P2P pairs across the two
// gates, both ways, and a group whose first members also send to it.
type killLoad struct {
	c       *framework.Cluster
	devs    []*sessionDevice
	members []int64 // the group's members
	gid     int64
	stop    chan struct{}
	wg      sync.WaitGroup
}

// startKillLoad signs pairs of devices in: the first of each pair with
// addrsA, the second with addrsB. The group holds the first groupSize
// users of each side; its first two members send to it too.
func startKillLoad(t *testing.T, ctx context.Context, c *framework.Cluster, base int64, pairs, groupSize int, addrsA, addrsB []string) *killLoad {
	t.Helper()
	l := &killLoad{c: c, stop: make(chan struct{})}
	for i := range pairs {
		l.devs = append(l.devs, startSessionDevice(t, c, base+int64(i), addrsA), startSessionDevice(t, c, base+100+int64(i), addrsB))
	}
	for _, d := range l.devs {
		if _, err := d.sess.Conn(ctx); err != nil {
			t.Fatalf("user %d never signed in: %v", d.userID, err)
		}
	}
	for _, d := range l.devs[:2*groupSize] {
		l.members = append(l.members, d.userID)
	}
	api, actx := apiClient(t, c, ctx)
	g, err := api.CreateGroup(actx, &logicv1.CreateGroupRequest{OwnerId: l.members[0], MemberIds: l.members[1:], Name: "kill"})
	if err != nil {
		t.Fatal(err)
	}
	l.gid = g.Group.GroupId
	return l
}

// run starts every sender: each device to its pair peer, and the group's
// first two members to the group as well.
func (l *killLoad) run(t *testing.T, interval time.Duration) {
	for i := 0; i < len(l.devs); i += 2 {
		a, b := l.devs[i], l.devs[i+1]
		l.wg.Add(2)
		go func() { defer l.wg.Done(); a.sendSteadily(t, b.userID, 0, interval, l.stop) }()
		go func() { defer l.wg.Done(); b.sendSteadily(t, a.userID, 0, interval, l.stop) }()
	}
	for _, d := range l.devs[:2] {
		l.wg.Add(1)
		go func() { defer l.wg.Done(); d.sendSteadily(t, 0, l.gid, interval, l.stop) }()
	}
}

// finish stops the senders and waits for their last sends to be acked.
func (l *killLoad) finish() {
	close(l.stop)
	l.wg.Wait()
}

// recipients are the users a message of d reaches: peer, or for a
// group message (peer 0) every other member.
func (l *killLoad) recipients(d *sessionDevice, peer int64) []int64 {
	if peer != 0 {
		return []int64{peer}
	}
	var out []int64
	for _, u := range l.members {
		if u != d.userID {
			out = append(out, u)
		}
	}
	return out
}

// check runs a last sync on every device (unless pushOnly) and then
// verifies the invariants: every acked message is in MySQL exactly once
// under its client_msg_id and with its acked id, and every recipient
// device has it, by push or sync (by push alone when pushOnly). It
// returns how many messages were acked.
func (l *killLoad) check(t *testing.T, ctx context.Context, pushOnly bool) int {
	t.Helper()
	byUser := map[int64]*sessionDevice{}
	for _, d := range l.devs {
		byUser[d.userID] = d
	}
	if !pushOnly {
		finalSync(t, ctx, l.devs)
	}
	total, resends, missing := 0, 0, 0
	for _, d := range l.devs {
		d.mu.Lock()
		acked, to := d.acked, d.to
		resends += d.resends
		d.mu.Unlock()
		for id, msgID := range acked {
			total++
			var n int
			var stored int64
			if err := l.c.DB().QueryRow("SELECT COUNT(*), COALESCE(MAX(id), 0) FROM t_messages WHERE sender_id = ? AND client_msg_id = ?", d.userID, id).Scan(&n, &stored); err != nil {
				t.Fatal(err)
			}
			if n != 1 || stored != msgID {
				t.Errorf("user %d %s: acked as %d, stored %d times (id %d)", d.userID, id, msgID, n, stored)
			}
			for _, u := range l.recipients(d, to[id]) {
				if !byUser[u].has(msgID) {
					missing++
					if missing <= 10 {
						t.Errorf("user %d never got %d (%s from %d; push only: %v)", u, msgID, id, d.userID, pushOnly)
					}
				}
			}
		}
	}
	if missing > 10 {
		t.Errorf("%d deliveries missing in all", missing)
	}
	// Every row of the test's senders is an acked message: nothing was
	// stored twice or without its ack.
	if n := l.c.CountRows("SELECT COUNT(*) FROM t_messages WHERE client_msg_id LIKE 'steady-%'"); n != total {
		t.Errorf("%d rows stored for %d acked messages", n, total)
	}
	t.Logf("%d acked messages (%d sends tried again with their client_msg_id), each stored once and at every recipient", total, resends)
	return total
}

// requireSteady fails the test unless the load was steady: at least
// minTotal messages acked in all, and at least minAfter acked after the
// event (the kill or SIGTERM), so service went on without the process.
func (l *killLoad) requireSteady(t *testing.T, total int, event time.Time) {
	t.Helper()
	const minTotal, minAfter = 150, 50
	after := 0
	for _, d := range l.devs {
		d.mu.Lock()
		for _, at := range d.ackedAt {
			if at.After(event) {
				after++
			}
		}
		d.mu.Unlock()
	}
	if total < minTotal || after < minAfter {
		t.Fatalf("%d messages acked, %d of them after the event; want at least %d and %d: the load was not steady", total, after, minTotal, minAfter)
	}
	t.Logf("%d of the %d acked messages were acked after the event", after, total)
}

// ackedAcross counts the sends that began before t and were answered
// after it with their SEND_ACK: in flight at t, and finished.
func (l *killLoad) ackedAcross(t time.Time) int {
	n := 0
	for _, d := range l.devs {
		d.mu.Lock()
		for _, a := range d.attempts {
			if a.acked && a.began.Before(t) && a.answered.After(t) {
				n++
			}
		}
		d.mu.Unlock()
	}
	return n
}

// slowest is the longest any device waited for one answer to a send.
func (l *killLoad) slowest() time.Duration {
	var w time.Duration
	for _, d := range l.devs {
		d.mu.Lock()
		w = max(w, d.slowest)
		d.mu.Unlock()
	}
	return w
}

// pushDuplicates is how many MESSAGE pushes repeated a msg_id a device
// already had by push (folded by the client; reported, not an error).
func (l *killLoad) pushDuplicates() int {
	n := 0
	for _, d := range l.devs {
		d.mu.Lock()
		for _, k := range d.pushed {
			n += k - 1
		}
		d.mu.Unlock()
	}
	return n
}

// kill -9 of a gate under steady P2P and group load (issue 12): its
// clients reconnect to the other gate and catch up by sync; every acked
// message is stored once and reaches every recipient device.
func TestKillGateUnderLoadClientsMoveToTheOtherGateAndNoAckedMessageIsLost(t *testing.T) {
	c := framework.NewCluster(t, framework.Options{Gates: 2})
	ctx := ctxT(t, 3*time.Minute)
	g1, g2 := c.Gates[0].TCPAddr, c.Gates[1].TCPAddr
	l := startKillLoad(t, ctx, c, 7401, 6, 3, []string{g1, g2}, []string{g2})
	l.run(t, 100*time.Millisecond)
	time.Sleep(1500 * time.Millisecond)

	if err := c.Gates[0].Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for i := 0; i < len(l.devs); i += 2 {
		d := l.devs[i]
		for deadline := time.Now().Add(20 * time.Second); d.sess.Connects() < 2 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		if d.sess.Connects() != 2 || d.sess.Addr() != g2 || d.sess.Err() != nil {
			t.Fatalf("user %d of the killed gate: %d sign-ins, now at %s (gate-2 %s), err %v", d.userID, d.sess.Connects(), d.sess.Addr(), g2, d.sess.Err())
		}
	}
	t.Logf("every client of gate-1 signed in again on gate-2 within %v of the kill", time.Since(killed).Round(time.Millisecond))
	time.Sleep(3 * time.Second) // the load goes on through gate-2
	l.finish()
	l.requireSteady(t, l.check(t, ctx, false), killed)
	t.Logf("%d pushes repeated a msg_id (folded by the clients)", l.pushDuplicates())
}

// kill -9 of one of two logic processes under steady load (issue 12):
// sends in flight on it get 50301 from the gate or no answer, the client
// sends them again with the same client_msg_id and they are stored once;
// every acked message reaches its recipients. The dead logic's machine id
// is not taken again while its lease could still be valid: a logic
// restarted with that id at once becomes ready only after the lease
// expired.
func TestKillLogicUnderLoadResendsAreStoredOnceAndItsMachineIDWaitsForTheLease(t *testing.T) {
	c := framework.NewCluster(t, framework.Options{Gates: 2, Logics: 2})
	ctx := ctxT(t, 3*time.Minute)
	g1, g2 := c.Gates[0].TCPAddr, c.Gates[1].TCPAddr
	l := startKillLoad(t, ctx, c, 7501, 6, 3, []string{g1, g2}, []string{g2, g1})
	l.run(t, 100*time.Millisecond)
	time.Sleep(1500 * time.Millisecond)

	dead := c.Logics[0]
	r := c.Redis.Client()
	defer r.Close()
	if err := dead.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	pttl, err := r.PTTL(ctx, rediskey.MachineLease(dead.MachineID)).Result()
	if err != nil || pttl <= 0 {
		t.Fatalf("machine lease of the killed logic: PTTL %v (%v), want it still live", pttl, err)
	}
	time.Sleep(3 * time.Second) // the load goes on through logic-2
	l.finish()
	l.requireSteady(t, l.check(t, ctx, false), killed)

	// Restarted with the same machine id: it waits for the old lease.
	if err := dead.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waited := time.Since(killed)
	if waited < pttl-200*time.Millisecond {
		t.Fatalf("logic-1 ready %v after the kill, but its old lease had %v left: the machine id was taken while possibly valid", waited, pttl)
	}
	t.Logf("the killed logic's lease had %v left; restarted with its machine id, it became ready %v after the kill", pttl.Round(time.Millisecond), waited.Round(time.Millisecond))
}

// kill -9 of one of two deliver instances under steady load (issue 12):
// the survivor takes over the dead one's partitions and pending jobs
// within the stated bound, lease_ttl + 2·lease_ttl/3 + 1 s (6 s at the
// e2e clusters' 3 s), and every acked message reaches every recipient by
// push, not only by sync.
func TestKillDeliverUnderLoadTheSurvivorTakesOverWithinTheBoundAndPushesEverything(t *testing.T) {
	const partitions, leaseTTL = 8, 3 * time.Second
	bound := leaseTTL + 2*leaseTTL/3 + time.Second
	c := framework.NewCluster(t, framework.Options{Gates: 2, Delivers: 2, Partitions: partitions})
	ctx := ctxT(t, 3*time.Minute)
	r := c.Redis.Client()
	defer r.Close()
	owners := func() (map[string][]int, error) {
		out := map[string][]int{}
		for p := 0; p < partitions; p++ {
			v, err := r.Get(ctx, rediskey.DeliverLease(p)).Result()
			if err != nil {
				v = "" // not held
			}
			out[v] = append(out[v], p)
		}
		return out, nil
	}
	// Both instances hold their share before the load starts.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		o, _ := owners()
		if len(o["deliver-1"]) > 0 && len(o["deliver-2"]) > 0 && len(o["deliver-1"])+len(o["deliver-2"]) == partitions {
			t.Logf("partitions: deliver-1 %v, deliver-2 %v", o["deliver-1"], o["deliver-2"])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitions never shared by both delivers: %v", o)
		}
	}
	g1, g2 := c.Gates[0].TCPAddr, c.Gates[1].TCPAddr
	l := startKillLoad(t, ctx, c, 7601, 6, 3, []string{g1}, []string{g2})
	l.run(t, 100*time.Millisecond)
	time.Sleep(1500 * time.Millisecond)

	if err := c.Delivers[0].Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	pendingOf := func(consumer string) (int64, error) {
		var n int64
		for p := 0; p < partitions; p++ {
			x, err := r.XPending(ctx, rediskey.Deliver(p), rediskey.DeliverGroup).Result()
			if err != nil {
				return 0, fmt.Errorf("XPENDING %s: %w", rediskey.Deliver(p), err)
			}
			n += x.Consumers[consumer]
		}
		return n, nil
	}
	left, err := pendingOf("deliver-1")
	if err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	for {
		o, _ := owners()
		pend, err := pendingOf("deliver-1")
		if err == nil && len(o["deliver-2"]) == partitions && pend == 0 {
			took = time.Since(killed)
			break
		}
		if time.Since(killed) > 2*bound {
			t.Fatalf("no takeover %v after the kill: owners %v, %d jobs still pending on deliver-1 (%v)", time.Since(killed), o, pend, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if took > bound {
		t.Fatalf("deliver-2 took over every partition and pending job %v after the kill, above the bound %v", took, bound)
	}
	t.Logf("deliver-2 took over all %d partitions and deliver-1's %d pending jobs %v after the kill (bound %v)", partitions, left, took.Round(time.Millisecond), bound)

	time.Sleep(2 * time.Second) // load after the takeover
	l.finish()
	waitNoPending(t, c, partitions, 30*time.Second)
	// Pushes still on their way get a moment; then every recipient must
	// have every acked message by push.
	deadline := time.Now().Add(10 * time.Second)
	for {
		missing := 0
		for _, d := range l.devs {
			d.mu.Lock()
			acked, to := maps.Clone(d.acked), maps.Clone(d.to)
			d.mu.Unlock()
			for id, msgID := range acked {
				for _, u := range l.recipients(d, to[id]) {
					if !byID(l.devs, u).has(msgID) {
						missing++
					}
				}
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	l.requireSteady(t, l.check(t, ctx, true), killed)
	t.Logf("%d pushes repeated a msg_id (folded by the clients)", l.pushDuplicates())
}

// byID returns the device of user u.
func byID(devs []*sessionDevice, u int64) *sessionDevice {
	for _, d := range devs {
		if d.userID == u {
			return d
		}
	}
	return nil
}
