package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/tests/framework"
)

// sigtermDevice is one device of the SIGTERM test: a reconnecting session
// and everything it saw.
type sigtermDevice struct {
	userID int64
	sess   *client.Session
	runner *client.SyncRunner

	mu       sync.Mutex
	kickedAt []time.Time      // KICK server_shutdown arrivals
	kicks    []string         // every KICK reason
	has      map[int64]bool   // msg ids received by push or sync
	syncErrs []error          // failed syncs
	acked    map[string]int64 // client_msg_id → acked msg id, of its sends
	ackedTo  map[string]int64 // client_msg_id → recipient
	syncs    int              // syncs run after a sign-in
}

func startSigtermDevice(t *testing.T, c *framework.Cluster, userID int64, addrs []string) *sigtermDevice {
	t.Helper()
	d := &sigtermDevice{userID: userID, has: map[int64]bool{}, acked: map[string]int64{}, ackedTo: map[string]int64{}}
	r, err := client.NewSyncRunner(context.Background(), client.FileStateStore{Path: filepath.Join(t.TempDir(), "state.json")}, userID, "d", client.SyncRunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.runner = r
	d.sess, err = client.StartSession(client.SessionOptions{
		Addrs: addrs, Token: c.Token(userID, "d"), DeviceID: "d", Platform: "test",
		Runner: r, OnSync: d.noteSync,
		ReconnectMin: 200 * time.Millisecond, ReconnectMax: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.sess.Close() })
	go func() {
		for f := range d.sess.Pushes() {
			if reason, ok := client.KickReason(f); ok {
				d.mu.Lock()
				d.kicks = append(d.kicks, reason)
				if reason == client.KickServerShutdown {
					d.kickedAt = append(d.kickedAt, time.Now())
				}
				d.mu.Unlock()
				continue
			}
			if f.Command == protocol.CmdMessage {
				if m, err := f.Message(); err == nil {
					d.mu.Lock()
					d.has[m.MsgID.Int64()] = true
					d.mu.Unlock()
				}
			}
		}
	}()
	return d
}

func (d *sigtermDevice) noteSync(res client.SyncResult, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncs++
	if err != nil {
		d.syncErrs = append(d.syncErrs, err)
	}
	for _, ms := range res.Messages {
		for _, m := range ms {
			d.has[m.MsgID.Int64()] = true
		}
	}
}

// sendSteadily sends to peer every interval until stop closes, each send
// retried across reconnects with its client_msg_id by the session.
func (d *sigtermDevice) sendSteadily(t *testing.T, peer int64, interval time.Duration, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-time.After(interval):
		}
		id := fmt.Sprintf("sig-%d-%d", d.userID, i)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ack, err := d.sess.Send(ctx, sendTo(peer, id, text(t, id)))
		cancel()
		if err != nil {
			// Not acked: the test asserts nothing about it (a retry under
			// another id would be a new message).
			t.Logf("user %d: send %s not acked: %v", d.userID, id, err)
			continue
		}
		d.mu.Lock()
		d.acked[id] = ack.MsgID.Int64()
		d.ackedTo[id] = peer
		d.mu.Unlock()
	}
}

// SIGTERM on a gate under load (issue 12, must-show 3): its clients get
// KICK server_shutdown spread over gate.shutdown_kick_window, reconnect to
// the other gate and sync; every acked message is stored once and reaches
// its recipient; the gate exits 0 within its bound.
func TestGateSIGTERMSpreadsServerShutdownKicksClientsMoveToTheOtherGateNoAckedMessageLost(t *testing.T) {
	const window = 2 * time.Second
	c := framework.NewCluster(t, framework.Options{Gates: 2, GateEnv: []string{"IM_GATE_SHUTDOWN_KICK_WINDOW=" + window.String()}})
	g1, g2 := c.Gates[0].TCPAddr, c.Gates[1].TCPAddr
	const pairs = 8
	var movers, stayers []*sigtermDevice
	for i := range pairs {
		movers = append(movers, startSigtermDevice(t, c, int64(7101+i), []string{g1, g2}))
		stayers = append(stayers, startSigtermDevice(t, c, int64(7201+i), []string{g2}))
	}
	ctx := ctxT(t, 3*time.Minute)
	for _, d := range append(append([]*sigtermDevice{}, movers...), stayers...) {
		if _, err := d.sess.Conn(ctx); err != nil {
			t.Fatalf("user %d never signed in: %v", d.userID, err)
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range pairs {
		wg.Add(2)
		go func() { defer wg.Done(); movers[i].sendSteadily(t, stayers[i].userID, 50*time.Millisecond, stop) }()
		go func() { defer wg.Done(); stayers[i].sendSteadily(t, movers[i].userID, 50*time.Millisecond, stop) }()
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
	all := append(append([]*sigtermDevice{}, movers...), stayers...)
	byUser := map[int64]*sigtermDevice{}
	for _, d := range all {
		byUser[d.userID] = d
		conn, err := d.sess.Conn(ctx)
		if err != nil {
			t.Fatalf("user %d: %v", d.userID, err)
		}
		res, err := d.runner.Sync(ctx, conn)
		d.noteSync(res, err)
		d.mu.Lock()
		if len(d.syncErrs) > 0 {
			t.Errorf("user %d: syncs failed: %v", d.userID, d.syncErrs)
		}
		d.mu.Unlock()
	}
	total := 0
	for _, d := range all {
		d.mu.Lock()
		acked, to := d.acked, d.ackedTo
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
			r.mu.Lock()
			ok := r.has[msgID]
			r.mu.Unlock()
			if !ok {
				t.Errorf("user %d never got %d (%s from %d)", r.userID, msgID, id, d.userID)
			}
		}
	}
	if total < pairs*2*10 {
		t.Fatalf("only %d messages acked: the load was not steady", total)
	}
	t.Logf("%d acked messages, each stored once and received", total)
}
