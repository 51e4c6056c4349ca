package e2e

import (
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/tests/framework"
)

// SIGTERM on a gate under load (issue 12, must-show 3): its clients get
// KICK server_shutdown spread over gate.shutdown_kick_window, reconnect to
// the other gate and sync; every acked message is stored once and reaches
// its recipient; the gate exits 0 within its bound.
func TestGateSIGTERMSpreadsServerShutdownKicksClientsMoveToTheOtherGateNoAckedMessageLost(t *testing.T) {
	const window = 2 * time.Second
	c := framework.NewCluster(t, framework.Options{Gates: 2, GateEnv: []string{"IM_GATE_SHUTDOWN_KICK_WINDOW=" + window.String()}})
	g1, g2 := c.Gates[0].TCPAddr, c.Gates[1].TCPAddr
	const pairs = 8
	var movers, stayers []*sessionDevice
	for i := range pairs {
		movers = append(movers, startSessionDevice(t, c, int64(7101+i), []string{g1, g2}))
		stayers = append(stayers, startSessionDevice(t, c, int64(7201+i), []string{g2}))
	}
	ctx := ctxT(t, 3*time.Minute)
	for _, d := range append(append([]*sessionDevice{}, movers...), stayers...) {
		if _, err := d.sess.Conn(ctx); err != nil {
			t.Fatalf("user %d never signed in: %v", d.userID, err)
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range pairs {
		wg.Add(2)
		go func() { defer wg.Done(); movers[i].sendSteadily(t, stayers[i].userID, 0, 50*time.Millisecond, stop) }()
		go func() { defer wg.Done(); stayers[i].sendSteadily(t, movers[i].userID, 0, 50*time.Millisecond, stop) }()
	}
	time.Sleep(time.Second)

	start := time.Now()
	err := c.Gates[0].Stop()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("gate-1 after SIGTERM: %v\n%s", err, c.Gates[0].Tail(30))
	}
	// The window, then the last connections' answers (drain 5 s at most,
	// milliseconds in practice) and stopping the streams.
	if bound := window + 7*time.Second; took > bound {
		t.Fatalf("gate-1 took %v to exit, want at most %v", took, bound)
	}
	time.Sleep(1500 * time.Millisecond) // load goes on through gate-2
	close(stop)
	wg.Wait()

	var first, last time.Time
	for _, d := range movers {
		deadline := time.Now().Add(20 * time.Second)
		for d.sess.Connects() < 2 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		d.mu.Lock()
		kicked, kicks, syncs := d.kickedAt, d.kicks, d.syncs
		d.mu.Unlock()
		if len(kicked) != 1 || len(kicks) != 1 {
			t.Fatalf("user %d on gate-1 got KICKs %v, want one %s", d.userID, kicks, client.KickServerShutdown)
		}
		if d.sess.Connects() != 2 || d.sess.Addr() != g2 || d.sess.Err() != nil {
			t.Fatalf("user %d: %d sign-ins, now at %s (gate-2 %s), err %v", d.userID, d.sess.Connects(), d.sess.Addr(), g2, d.sess.Err())
		}
		if syncs < 2 {
			t.Fatalf("user %d synced %d times, want again after moving", d.userID, syncs)
		}
		if first.IsZero() || kicked[0].Before(first) {
			first = kicked[0]
		}
		if kicked[0].After(last) {
			last = kicked[0]
		}
	}
	if spread := last.Sub(first); spread < window/2 {
		t.Fatalf("the %d KICKs came within %v, want them spread over about %v", pairs, spread, window)
	}
	t.Logf("gate-1 exited in %v; KICKs spread over %v", took, last.Sub(first))

	// A final sync on every device, then the checks against MySQL.
	all := append(append([]*sessionDevice{}, movers...), stayers...)
	byUser := map[int64]*sessionDevice{}
	for _, d := range all {
		byUser[d.userID] = d
	}
	finalSync(t, ctx, all)
	total := 0
	for _, d := range all {
		d.mu.Lock()
		acked, to := d.acked, d.to
		d.mu.Unlock()
		for id, msgID := range acked {
			total++
			var n int
			var stored int64
			if err := c.DB().QueryRow("SELECT COUNT(*), COALESCE(MAX(id), 0) FROM t_messages WHERE sender_id = ? AND client_msg_id = ?", d.userID, id).Scan(&n, &stored); err != nil {
				t.Fatal(err)
			}
			if n != 1 || stored != msgID {
				t.Errorf("user %d %s: acked as %d, stored %d times (id %d)", d.userID, id, msgID, n, stored)
			}
			r := byUser[to[id]]
			if !r.has(msgID) {
				t.Errorf("user %d never got %d (%s from %d)", r.userID, msgID, id, d.userID)
			}
		}
	}
	if total < pairs*2*10 {
		t.Fatalf("only %d messages acked: the load was not steady", total)
	}
	t.Logf("%d acked messages, each stored once and received", total)
}
