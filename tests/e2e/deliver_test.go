package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/tests/framework"
)

// pendingJobs counts deliver jobs not yet acknowledged, over all partitions.
func pendingJobs(t *testing.T, c *framework.Cluster, partitions int) int64 {
	t.Helper()
	r := c.Redis.Client()
	defer r.Close()
	var n int64
	for p := 0; p < partitions; p++ {
		res, err := r.XPending(context.Background(), rediskey.Deliver(p), rediskey.DeliverGroup).Result()
		if err != nil {
			continue // stream not created yet
		}
		n += res.Count
	}
	return n
}

func waitNoPending(t *testing.T, c *framework.Cluster, partitions int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if pendingJobs(t, c, partitions) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%d deliver jobs still unacknowledged after %v", pendingJobs(t, c, partitions), within)
}

// A recipient whose gate died (kill -9) is treated as offline: the job is
// acknowledged, the stale route removed, and other traffic keeps flowing.
func TestDeliverWithDeadGate(t *testing.T) {
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4})
	ctx := ctxT(t, time.Minute)
	sender := c.Login(t, 0, 9001, "s")
	_ = c.Login(t, 1, 9002, "on-dying-gate")
	other := c.Login(t, 0, 9003, "o")

	if err := c.Gates[1].Kill(); err != nil {
		t.Fatal(err)
	}
	ack, err := sender.Send(ctx, sendTo(9002, "to-dead", text(t, "you are offline")))
	if err != nil {
		t.Fatal(err)
	}
	waitNoPending(t, c, 4, 15*time.Second)
	if n := c.CountRows("SELECT COUNT(*) FROM t_messages WHERE id = ?", ack.MsgID.Int64()); n != 1 {
		t.Fatal("message not stored")
	}
	ack2, err := sender.Send(ctx, sendTo(9003, "to-alive", text(t, "you are online")))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := nextMessage(other, 10*time.Second); err != nil || m.MsgID != ack2.MsgID {
		t.Fatalf("other: %+v %v", m, err)
	}
	// The dead connection's route is gone once the gate's registration
	// expires or deliver's push finds nothing (whichever comes first).
	r := c.Redis.Client()
	defer r.Close()
	deadline := time.Now().Add(45 * time.Second)
	for {
		if n, _ := r.HLen(ctx, rediskey.Route(9002)).Result(); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("stale route of the dead gate never removed")
		}
		if _, err := sender.Send(ctx, sendTo(9002, "probe-"+time.Now().Format("150405.000"), text(t, "probe"))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
	}
}

// deliver dies (kill -9 at the failpoint) after pushing but before acking:
// the restarted instance takes the job over and the message still arrives.
func TestDeliverCrashBeforeAck(t *testing.T) {
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4})
	ctx := ctxT(t, time.Minute)
	sender := c.Login(t, 0, 9101, "s")
	peer := c.Login(t, 1, 9102, "p")
	d := c.Delivers[0]

	if err := framework.Failpoint(d.AdminAddr, "deliver/job/beforePush", "exit"); err != nil {
		t.Fatal(err)
	}
	ack, err := sender.Send(ctx, sendTo(9102, "crash-1", text(t, "survives a deliver crash")))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-time.After(10 * time.Second):
		t.Fatal("deliver did not hit the failpoint")
	case <-waitExit(d.Process):
	}
	if _, err := nextMessage(peer, 300*time.Millisecond); err == nil {
		t.Fatal("pushed although deliver died before the push")
	}
	// Restart without the failpoint: the pending job is claimed and pushed.
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := nextMessage(peer, 20*time.Second)
	if err != nil || m.MsgID != ack.MsgID {
		t.Fatalf("after restart: %+v %v", m, err)
	}
	waitNoPending(t, c, 4, 15*time.Second)
}

func waitExit(p *framework.Process) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for p.Running() {
			time.Sleep(20 * time.Millisecond)
		}
		close(ch)
	}()
	return ch
}
