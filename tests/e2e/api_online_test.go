package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// nextTransient waits for the next TRANSIENT push on conn, skipping other
// pushes, and returns its payload.
func nextTransient(conn *client.Conn, timeout time.Duration) (json.RawMessage, error) {
	deadline := time.Now().Add(timeout)
	for {
		f, err := framework.NextPush(conn, time.Until(deadline))
		if err != nil {
			return nil, err
		}
		if f.Command != protocol.CmdTransient {
			continue
		}
		env, err := f.Envelope()
		if err != nil {
			return nil, err
		}
		var data struct {
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(env.Data, &data); err != nil {
			return nil, fmt.Errorf("transient data %s: %w", env.Data, err)
		}
		return data.Payload, nil
	}
}

// noTransient fails if a TRANSIENT push reaches conn within d.
func noTransient(t *testing.T, conn *client.Conn, d time.Duration, what string) {
	t.Helper()
	if p, err := nextTransient(conn, d); err == nil {
		t.Fatalf("%s got a TRANSIENT push %s", what, p)
	}
}

// tableRows counts the rows of every table of the cluster's database.
func tableRows(t *testing.T, db *sql.DB) map[string]int {
	t.Helper()
	rows, err := db.Query("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	_ = rows.Close()
	out := map[string]int{}
	for _, n := range names {
		var c int
		if err := db.QueryRow("SELECT COUNT(*) FROM `" + n + "`").Scan(&c); err != nil {
			t.Fatal(err)
		}
		out[n] = c
	}
	return out
}

// The business API's online calls against the real binaries: presence on
// both gates, the gate list (gRPC and admin HTTP), PushToUsers to online
// devices only with nothing written to MySQL, Broadcast to every
// connection of both gates, and RevokeTokens kicking live sessions.
func TestBusinessAPIOnline(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2})
	ctx := metadata.AppendToOutgoingContext(ctxT(t, 2*time.Minute), "x-api-key", framework.APIKey)
	api := logicv1.NewApiClient(dialGRPC(t, c.Logics[0].GRPCAddr))

	const alice, bob, carol, offline = 31001, 31002, 31003, 31004
	alicePhone := c.Login(t, 0, alice, "phone")
	aliceWeb := c.Login(t, 1, alice, "web")
	bobPhone := c.Login(t, 1, bob, "phone")
	carolPad := c.Login(t, 0, carol, "pad")

	t.Run("presence on both gates", func(t *testing.T) {
		rep, err := api.GetPresence(ctx, &logicv1.GetPresenceRequest{UserIds: []int64{alice, bob, offline}})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Users) != 3 {
			t.Fatalf("presence %+v", rep)
		}
		devs := map[string]string{}
		for _, d := range rep.Users[0].Devices {
			devs[d.DeviceId] = d.GateId
			if d.SinceMs <= 0 || d.ConnId == 0 {
				t.Fatalf("device %+v", d)
			}
		}
		if devs["phone"] != c.Gates[0].ID || devs["web"] != c.Gates[1].ID || len(devs) != 2 {
			t.Fatalf("alice's devices %+v", rep.Users[0].Devices)
		}
		if len(rep.Users[1].Devices) != 1 || rep.Users[1].Devices[0].GateId != c.Gates[1].ID {
			t.Fatalf("bob's devices %+v", rep.Users[1].Devices)
		}
		if len(rep.Users[2].Devices) != 0 {
			t.Fatalf("offline user has devices %+v", rep.Users[2].Devices)
		}
	})

	t.Run("gates", func(t *testing.T) {
		rep, err := api.ListGates(ctx, &logicv1.ListGatesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Gates) != 2 {
			t.Fatalf("gates %+v", rep.Gates)
		}
		for i, g := range rep.Gates {
			// Every gate advertises its plain TCP and its WebSocket
			// listener (no TLS in this cluster).
			want := []string{"tcp://" + c.Gates[i].TCPAddr, "ws://" + c.Gates[i].WSAddr + "/ws"}
			if g.GateId != c.Gates[i].ID || g.Error != "" || g.Authenticated != 2 || fmt.Sprint(g.ClientAddrs) != fmt.Sprint(want) {
				t.Fatalf("gate %d: %+v, want client addresses %v", i, g, want)
			}
		}
		res, err := http.Get("http://" + c.Logics[0].AdminAddr + "/gates")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var js struct {
			Gates []struct {
				GateID        string   `json:"gate_id"`
				ClientAddrs   []string `json:"client_addrs"`
				Authenticated uint64   `json:"authenticated"`
			} `json:"gates"`
		}
		if err := json.NewDecoder(res.Body).Decode(&js); err != nil || res.StatusCode != http.StatusOK || len(js.Gates) != 2 {
			t.Fatalf("admin /gates %d %+v %v", res.StatusCode, js, err)
		}
		if js.Gates[1].GateID != c.Gates[1].ID || js.Gates[1].ClientAddrs[0] != "tcp://"+c.Gates[1].TCPAddr || js.Gates[1].Authenticated != 2 {
			t.Fatalf("admin /gates %+v", js)
		}
	})

	t.Run("push to online devices only, nothing stored", func(t *testing.T) {
		before := tableRows(t, c.DB())
		rep, err := api.PushToUsers(ctx, &logicv1.PushToUsersRequest{UserIds: []int64{alice, offline}, Payload: `{"kind":"typing","from":"31002"}`})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Delivered != 2 || len(rep.FailedGates) != 0 {
			t.Fatalf("push reply %+v", rep)
		}
		for name, conn := range map[string]*client.Conn{"alice phone": alicePhone, "alice web": aliceWeb} {
			p, err := nextTransient(conn, 5*time.Second)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if string(p) != `{"kind":"typing","from":"31002"}` {
				t.Fatalf("%s: payload %s", name, p)
			}
		}
		noTransient(t, bobPhone, 300*time.Millisecond, "bob (not a target)")
		// The offline user, connecting now, gets nothing: it was never stored.
		late := c.Login(t, 1, offline, "phone")
		noTransient(t, late, 500*time.Millisecond, "the user who was offline")
		after := tableRows(t, c.DB())
		// Logging in wrote only the user row of the late user.
		after["t_users"]--
		for table, n := range before {
			if after[table] != n {
				t.Fatalf("%s: %d rows before the push, %d after", table, n, after[table])
			}
		}
	})

	t.Run("broadcast reaches every connection on both gates", func(t *testing.T) {
		rep, err := api.Broadcast(ctx, &logicv1.BroadcastRequest{Payload: `{"notice":"maintenance at 02:00"}`})
		if err != nil {
			t.Fatal(err)
		}
		// The four connections of the test (the late one closed with its
		// subtest).
		if rep.Delivered != 4 || len(rep.FailedGates) != 0 {
			t.Fatalf("broadcast reply %+v", rep)
		}
		for name, conn := range map[string]*client.Conn{"alice phone": alicePhone, "alice web": aliceWeb, "bob": bobPhone, "carol": carolPad} {
			p, err := nextTransient(conn, 5*time.Second)
			if err != nil || string(p) != `{"notice":"maintenance at 02:00"}` {
				t.Fatalf("%s: %s %v", name, p, err)
			}
		}
	})

	t.Run("revoke kicks live sessions and refuses old tokens", func(t *testing.T) {
		oldToken := c.Token(carol, "pad")
		carolPhone := c.Login(t, 1, carol, "phone")
		rep, err := api.RevokeTokens(ctx, &logicv1.RevokeTokensRequest{UserId: carol})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Kicked != 2 {
			t.Fatalf("revoke reply %+v", rep)
		}
		for name, conn := range map[string]*client.Conn{"pad on gate-1": carolPad, "phone on gate-2": carolPhone} {
			if reason := kickReason(t, conn); reason != "revoked" {
				t.Fatalf("%s: kick reason %q", name, reason)
			}
			select {
			case <-conn.Done():
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: not closed after KICK", name)
			}
		}
		again := c.Dial(t, 0)
		reply, err := again.Request(context.Background(), protocol.CmdAuth, protocol.AuthRequest{Token: oldToken, DeviceID: "pad", Platform: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if reply.Envelope.Code != errcode.BadToken {
			t.Fatalf("AUTH with a revoked token: %+v, want 40101", reply.Envelope)
		}
		// Bob was not touched.
		if _, err := bobPhone.Heartbeat(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("another user's connection: %v", err)
		}
	})
}

// kickReason waits for a KICK push and returns its reason.
func kickReason(t *testing.T, conn *client.Conn) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, err := framework.NextPush(conn, time.Until(deadline))
		if err != nil {
			t.Fatalf("no KICK: %v", err)
		}
		if f.Command != protocol.CmdKick {
			continue
		}
		env, err := f.Envelope()
		if err != nil {
			t.Fatal(err)
		}
		var k protocol.Kick
		if err := json.Unmarshal(env.Data, &k); err != nil {
			t.Fatal(err)
		}
		return k.Reason
	}
}
