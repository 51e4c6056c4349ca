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

// sessionDevice is one device of a failover test (kill -9, SIGTERM): a
// reconnecting session, what it sent and was acked, every msg_id it
// received, by push and by sync apart, and the KICKs it got.
type sessionDevice struct {
	userID int64
	sess   *client.Session
	runner *client.SyncRunner

	mu       sync.Mutex
	pushed   map[int64]int        // msg id → MESSAGE pushes of it
	synced   map[int64]bool       // msg ids brought by sync
	syncs    int                  // syncs run (after every sign-in, and final ones)
	syncErrs []error              // failed syncs
	kicks    []string             // every KICK reason
	kickedAt []time.Time          // KICK server_shutdown arrivals
	acked    map[string]int64     // client_msg_id → acked msg id
	to       map[string]int64     // client_msg_id → recipient user, 0 for the group
	resends  int                  // sends tried again with the same client_msg_id
	slowest  time.Duration        // the longest wait for one answer (ack or error)
	ackedAt  map[string]time.Time // client_msg_id → its ack
	attempts []sendAttempt        // every Session.Send, in order
}

// sendAttempt is one Session.Send: when it began and was answered, and
// whether the answer was the SEND_ACK.
type sendAttempt struct {
	began, answered time.Time
	acked           bool
}

// startSessionDevice signs userID's device "d" in through a session over
// addrs, in order, and records what it receives until the test ends.
func startSessionDevice(t *testing.T, c *framework.Cluster, userID int64, addrs []string) *sessionDevice {
	t.Helper()
	d := &sessionDevice{userID: userID, pushed: map[int64]int{}, synced: map[int64]bool{},
		acked: map[string]int64{}, to: map[string]int64{}, ackedAt: map[string]time.Time{}}
	r, err := client.NewSyncRunner(context.Background(), client.FileStateStore{Path: filepath.Join(t.TempDir(), "state.json")}, userID, "d", client.SyncRunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.runner = r
	d.sess, err = client.StartSession(client.SessionOptions{
		Addrs: addrs, Token: c.Token(userID, "d"), DeviceID: "d", Platform: "test",
		Runner: r, OnSync: d.noteSync,
		ReconnectMin: 200 * time.Millisecond, ReconnectMax: 2 * time.Second,
		// One attempt a send: a 50301 reaches sendSteadily, which counts
		// the resend with the same client_msg_id.
		Conn: client.Options{SendAttempts: 1},
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
			if f.Command != protocol.CmdMessage || !f.IsPush() {
				continue
			}
			if m, err := f.Message(); err == nil {
				d.mu.Lock()
				d.pushed[m.MsgID.Int64()]++
				d.mu.Unlock()
			}
		}
	}()
	return d
}

func (d *sessionDevice) noteSync(res client.SyncResult, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncs++
	if err != nil {
		d.syncErrs = append(d.syncErrs, err)
	}
	for _, ms := range res.Messages {
		for _, m := range ms {
			d.synced[m.MsgID.Int64()] = true
		}
	}
}

// has reports whether the device got id by push or sync.
func (d *sessionDevice) has(id int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pushed[id] > 0 || d.synced[id]
}

// sendSteadily sends one message every interval until stop closes: to
// peer, or to group gid when peer is 0. A send that is not acknowledged
// (its answer lost with a killed process, 50301s past the client's
// attempts) is sent again with the same client_msg_id, as an app does,
// until acked; nothing is given up, so every message ends acked once.
func (d *sessionDevice) sendSteadily(t *testing.T, peer, gid int64, interval time.Duration, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-time.After(interval):
		}
		id := fmt.Sprintf("steady-%d-%d-%d", d.userID, peer, i)
		req := sendTo(peer, id, text(t, id))
		if peer == 0 {
			req = sendToGroup(gid, id, text(t, id))
		}
		deadline := time.Now().Add(60 * time.Second)
		for attempt := 0; ; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			began := time.Now()
			ack, err := d.sess.Send(ctx, req)
			waited := time.Since(began)
			cancel()
			d.mu.Lock()
			d.slowest = max(d.slowest, waited)
			d.attempts = append(d.attempts, sendAttempt{began: began, answered: began.Add(waited), acked: err == nil})
			d.mu.Unlock()
			if err == nil {
				d.mu.Lock()
				d.acked[id] = ack.MsgID.Int64()
				d.ackedAt[id] = time.Now()
				d.to[id] = peer
				d.resends += attempt
				d.mu.Unlock()
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("user %d: %s not acked within a minute of retries: %v", d.userID, id, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// finalSync syncs every device once more, on whatever gate its session
// is on now, and fails the test for any sync that failed during the run.
func finalSync(t *testing.T, ctx context.Context, devs []*sessionDevice) {
	t.Helper()
	for _, d := range devs {
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
}
