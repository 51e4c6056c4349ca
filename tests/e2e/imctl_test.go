package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/tests/framework"
)

// runIMCtl runs the imctl binary against the cluster (API address from
// the flag, API key and cluster secret from the cluster's config file)
// and returns its stdout; a failure exit fails the test.
func runIMCtl(t *testing.T, ctx context.Context, c *framework.Cluster, args ...string) []byte {
	t.Helper()
	if _, err := os.Stat(c.Bins.IMCtl); err != nil {
		t.Fatalf("imctl binary: %v (make build-failpoints builds it into bin/failpoints)", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(rctx, c.Bins.IMCtl, append([]string{"-config", c.Config, "-api", c.Logics[0].GRPCAddr}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("imctl %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("imctl %v: %v", args, err)
	}
	return stdout.Bytes()
}

// imctlJSON runs imctl -o json and decodes its output into v.
func imctlJSON(t *testing.T, ctx context.Context, c *framework.Cluster, v any, args ...string) {
	t.Helper()
	out := runIMCtl(t, ctx, c, append([]string{"-o", "json"}, args...)...)
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("imctl %v output: %v\n%s", args, err, out)
	}
}

// Each imctl command against a running cluster, its JSON checked against
// what really happened: the token it issues signs a client in; gates and
// where show that client's gate, device and connection; the system
// message reaches it; a device kick closes only that device with KICK, a
// user kick every device of another user; a revoke kicks the first
// user's last device and the issued token is then refused at AUTH;
// queue-lag shows a job deliver cannot push where Redis has it, then
// the empty queue; a wrong API
// key fails with exit status 1.
func TestIMCtlCommands(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4})
	ctx := ctxT(t, 3*time.Minute)
	const user = 41001

	var tok struct {
		UserID      int64  `json:"user_id"`
		DeviceID    string `json:"device_id"`
		Token       string `json:"token"`
		ExpiresAtMs int64  `json:"expires_at_ms"`
	}
	imctlJSON(t, ctx, c, &tok, "token", "issue", "41001", "-device", "phone", "-ttl", "1h")
	if tok.UserID != user || tok.DeviceID != "phone" || tok.Token == "" ||
		time.Until(time.UnixMilli(tok.ExpiresAtMs)) < 55*time.Minute || time.Until(time.UnixMilli(tok.ExpiresAtMs)) > 61*time.Minute {
		t.Fatalf("token issue: %+v", tok)
	}
	phone := c.Dial(t, 1)
	if _, err := phone.Auth(ctx, tok.Token, "phone", "test", "1.0.0"); err != nil {
		t.Fatalf("AUTH with imctl's token: %v", err)
	}
	since := time.Now()

	t.Run("gates", func(t *testing.T) {
		var gates []struct {
			GateID        string   `json:"gate_id"`
			ClientAddrs   []string `json:"client_addrs"`
			PushAddr      string   `json:"push_addr"`
			StartedAtMs   int64    `json:"started_at_ms"`
			Connections   uint64   `json:"connections"`
			Authenticated uint64   `json:"authenticated"`
			Version       string   `json:"version"`
			Error         string   `json:"error"`
		}
		imctlJSON(t, ctx, c, &gates, "gates")
		if len(gates) != 2 {
			t.Fatalf("gates: %+v, want 2", gates)
		}
		byID := map[string]int{}
		for i, g := range gates {
			byID[g.GateID] = i
			// Both gates run the same binary, so they report one version.
			if g.Error != "" || g.StartedAtMs == 0 || len(g.ClientAddrs) == 0 || g.Version == "" || g.Version != gates[0].Version {
				t.Fatalf("gate %+v", g)
			}
		}
		for i, want := range []uint64{0, 1} {
			j, ok := byID[c.Gates[i].ID]
			if !ok {
				t.Fatalf("gate %s missing from %+v", c.Gates[i].ID, gates)
			}
			if g := gates[j]; g.Authenticated != want || g.Connections != want || g.PushAddr != c.Gates[i].PushAddr {
				t.Fatalf("gate %s: %+v, want %d connection(s) and push %s", c.Gates[i].ID, g, want, c.Gates[i].PushAddr)
			}
		}
		table := string(runIMCtl(t, ctx, c, "gates"))
		if !strings.HasPrefix(table, "GATE ") || !strings.Contains(table, " VERSION ") || !strings.Contains(table, c.Gates[1].ID) || !strings.Contains(table, gates[0].Version) {
			t.Fatalf("gates table:\n%s", table)
		}
	})

	web := c.Login(t, 0, user, "web")
	type device struct {
		UserID   int64  `json:"user_id"`
		DeviceID string `json:"device_id"`
		GateID   string `json:"gate_id"`
		ConnID   uint64 `json:"conn_id"`
		SinceMs  int64  `json:"since_ms"`
		RealIP   string `json:"real_ip"`
	}
	t.Run("where", func(t *testing.T) {
		var devs []device
		imctlJSON(t, ctx, c, &devs, "where", "41001")
		got := map[string]device{}
		for _, d := range devs {
			got[d.DeviceID] = d
		}
		p, w := got["phone"], got["web"]
		// The clients dial the gates over loopback without PROXY headers.
		if len(devs) != 2 || p.GateID != c.Gates[1].ID || w.GateID != c.Gates[0].ID || p.UserID != user || p.ConnID == 0 ||
			p.RealIP != "127.0.0.1" || w.RealIP != "127.0.0.1" {
			t.Fatalf("where: %+v, want phone on %s and web on %s", devs, c.Gates[1].ID, c.Gates[0].ID)
		}
		if d := time.UnixMilli(p.SinceMs).Sub(since); d < -10*time.Second || d > 10*time.Second {
			t.Fatalf("phone online since %v, signed in at %v", time.UnixMilli(p.SinceMs), since)
		}
		table := string(runIMCtl(t, ctx, c, "where", "41001"))
		if !strings.Contains(table, "REAL_IP") || !strings.Contains(table, "127.0.0.1") {
			t.Fatalf("where table:\n%s", table)
		}
		var none []device
		imctlJSON(t, ctx, c, &none, "where", "41999")
		if len(none) != 0 {
			t.Fatalf("where for an offline user: %+v", none)
		}
	})

	t.Run("send-system", func(t *testing.T) {
		var sent struct {
			MsgID          int64  `json:"msg_id"`
			ConversationID int64  `json:"conversation_id"`
			ServerTimeMs   int64  `json:"server_time_ms"`
			ClientMsgID    string `json:"client_msg_id"`
		}
		imctlJSON(t, ctx, c, &sent, "send-system", "41001", "maintenance at 02:00", "-client-msg-id", "ops-1")
		if sent.MsgID == 0 || sent.ConversationID == 0 || sent.ClientMsgID != "ops-1" {
			t.Fatalf("send-system: %+v", sent)
		}
		m, err := framework.NextMessage(phone, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var content struct {
			T    int    `json:"t"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(m.Content, &content); err != nil {
			t.Fatal(err)
		}
		if m.MsgID.Int64() != sent.MsgID || m.SenderID.Int64() != 1 || content.Text != "maintenance at 02:00" || m.MessageType != 1 {
			t.Fatalf("phone got %+v (%+v), want msg %d from the system user 1", m, content, sent.MsgID)
		}
	})

	t.Run("kick one device", func(t *testing.T) {
		var k struct {
			UserID   int64  `json:"user_id"`
			DeviceID string `json:"device_id"`
			Reason   string `json:"reason"`
			Kicked   uint32 `json:"kicked"`
		}
		imctlJSON(t, ctx, c, &k, "kick", "41001", "web")
		if k.Kicked != 1 || k.DeviceID != "web" {
			t.Fatalf("kick: %+v", k)
		}
		if reason := kickReason(t, web); reason != "kicked" {
			t.Fatalf("kick reason %q", reason)
		}
		waitClosed(t, web, "web")
		if _, err := phone.Heartbeat(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("the other device: %v", err)
		}
	})

	t.Run("token revoke", func(t *testing.T) {
		var r struct {
			UserID       int64  `json:"user_id"`
			ValidAfterMs int64  `json:"valid_after_ms"`
			Kicked       uint32 `json:"kicked"`
		}
		imctlJSON(t, ctx, c, &r, "token", "revoke", "41001")
		if r.UserID != user || r.Kicked != 1 || r.ValidAfterMs == 0 {
			t.Fatalf("revoke: %+v", r)
		}
		if reason := kickReason(t, phone); reason != "revoked" {
			t.Fatalf("kick reason %q", reason)
		}
		waitClosed(t, phone, "phone")
		again := c.Dial(t, 1)
		reply, err := again.Request(ctx, protocol.CmdAuth, protocol.AuthRequest{Token: tok.Token, DeviceID: "phone", Platform: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if reply.Envelope.Code != errcode.BadToken {
			t.Fatalf("AUTH with the revoked token: %+v, want 40101", reply.Envelope)
		}
	})

	t.Run("kick every device", func(t *testing.T) {
		const other = 41002
		conns := []*client.Conn{c.Login(t, 0, other, "a"), c.Login(t, 1, other, "b")}
		var k struct {
			UserID int64  `json:"user_id"`
			Reason string `json:"reason"`
			Kicked uint32 `json:"kicked"`
		}
		imctlJSON(t, ctx, c, &k, "kick", "41002", "-reason", "maintenance")
		if k.UserID != other || k.Kicked != 2 || k.Reason != "maintenance" {
			t.Fatalf("kick: %+v", k)
		}
		for i, conn := range conns {
			if reason := kickReason(t, conn); reason != "maintenance" {
				t.Fatalf("device %d: kick reason %q", i, reason)
			}
			waitClosed(t, conn, "device")
		}
	})

	t.Run("wrong API key", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, c.Bins.IMCtl, "-config", c.Config, "-api", c.Logics[0].GRPCAddr, "-api-key", "nope", "where", "41001")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "Unauthenticated") {
			t.Fatalf("imctl with a wrong key: %v\n%s", err, out)
		}
	})

	t.Run("queue-lag", func(t *testing.T) {
		// A job deliver cannot push stays in its stream, read and not
		// acknowledged: queue-lag must show it where Redis has it.
		admin := c.Delivers[0].AdminAddr
		if err := framework.Failpoint(admin, "deliver/job/beforePush", "error"); err != nil {
			t.Fatal(err)
		}
		if out := runIMCtl(t, ctx, c, "send-system", "41002", "queued"); !strings.HasPrefix(string(out), "MSG_ID ") {
			t.Fatalf("send-system table:\n%s", out)
		}
		match := func(what string, ok func(length, pending int64, age float64) bool) {
			t.Helper()
			matchQueue(t, ctx, c, []string{"queue-lag", "-deliver-admin", admin}, 4, rediskey.Deliver, what, ok)
		}
		match("the stuck job", func(length, pending int64, age float64) bool { return length == 1 && pending == 1 && age > 0 })
		if err := framework.Failpoint(admin, "deliver/job/beforePush", "off"); err != nil {
			t.Fatal(err)
		}
		match("an empty queue", func(length, pending int64, age float64) bool { return length == 0 && pending == 0 && age == 0 })
	})

	// Last: it takes gate 0 out of the cluster.
	t.Run("drain", func(t *testing.T) {
		const sender, receiver = 41010, 41011
		a, b := c.Login(t, 0, sender, "a"), c.Login(t, 0, receiver, "b")
		var acked []int64
		var conv int64
		for i := range 5 {
			ack, err := a.SendText(ctx, receiver, fmt.Sprintf("before the drain %d", i))
			if err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
			acked, conv = append(acked, ack.MsgID.Int64()), ack.ConversationID.Int64()
		}
		var d struct {
			GateID      string `json:"gate_id"`
			WindowMs    int64  `json:"window_ms"`
			Connections uint32 `json:"connections"`
		}
		imctlJSON(t, ctx, c, &d, "drain", c.Gates[0].ID, "-window", "1s")
		if d.GateID != c.Gates[0].ID || d.WindowMs != 1000 || d.Connections < 2 {
			t.Fatalf("drain: %+v, want gate %s kicking a and b over 1000 ms", d, c.Gates[0].ID)
		}
		for name, conn := range map[string]*client.Conn{"a": a, "b": b} {
			if reason := kickReason(t, conn); reason != "server_shutdown" {
				t.Fatalf("%s: kick reason %q, want server_shutdown", name, reason)
			}
			waitClosed(t, conn, name)
		}
		if st := readyzStatus(c.Gates[0].AdminAddr); st != http.StatusServiceUnavailable {
			t.Fatalf("the drained gate's /readyz: %d, want 503", st)
		}
		// New clients are refused: the connection closes before AUTH answers.
		if late, err := client.Dial(ctx, c.Gates[0].TCPAddr, client.Options{}); err == nil {
			_, err = late.Auth(ctxT(t, 5*time.Second), c.Token(receiver, "late"), "late", "test", "1.0.0")
			_ = late.Close()
			if err == nil {
				t.Fatal("the drained gate accepted a new client")
			}
		}
		// A second drain kicks nothing more.
		imctlJSON(t, ctx, c, &d, "drain", c.Gates[0].ID)
		if d.Connections != 0 {
			t.Fatalf("second drain: %+v", d)
		}
		// The clients move to the other gate and find every acked message.
		b2 := c.Login(t, 1, receiver, "b")
		msgs, _, err := b2.SyncMessages(ctx, conv, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		got := map[int64]bool{}
		for _, m := range msgs {
			got[m.MsgID.Int64()] = true
		}
		for _, id := range acked {
			if !got[id] {
				t.Fatalf("acked message %d missing after the move: got %d messages", id, len(msgs))
			}
		}
		var devs []device
		imctlJSON(t, ctx, c, &devs, "where", "41011")
		if len(devs) != 1 || devs[0].GateID != c.Gates[1].ID {
			t.Fatalf("where after the drain: %+v, want b on %s", devs, c.Gates[1].ID)
		}
	})
}

func waitClosed(t *testing.T, conn *client.Conn, name string) {
	t.Helper()
	select {
	case <-conn.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not closed after KICK", name)
	}
}

// imctl webhooks and push-queue against a cluster with both on: an
// endpoint answering 503 shows as failing, behind, with its last error,
// then caught up once it answers 200; a push job held unacknowledged by a
// failpoint shows in push-queue where Redis has it, then the empty queue.
func TestIMCtlShowsWebhookAndPushQueueState(t *testing.T) {
	t.Parallel()
	_, pushEnv := gatewayPush(t, "getui")
	rcv := newHookReceiver(t, hookSecret)
	rcv.setStatus(http.StatusServiceUnavailable)
	c := framework.NewCluster(t, framework.Options{Gates: 1, Env: append(pushEnv,
		"IM_PUSH_PARTITIONS=2", "IM_PUSH_CLAIM_IDLE=3s", "IM_PUSH_SEND_TIMEOUT=1s",
	), LogicEnv: []string{
		"IM_LOGIC_WEBHOOK_ENABLED=true", "IM_LOGIC_WEBHOOK_URLS=" + rcv.url(), "IM_LOGIC_WEBHOOK_SECRET=" + hookSecret,
		"IM_LOGIC_WEBHOOK_ALLOW_PRIVATE_URLS=true", "IM_LOGIC_REQUEST_TIMEOUT=2s", "IM_LOGIC_WEBHOOK_SETTLE=2500ms",
		"IM_LOGIC_WEBHOOK_POLL_INTERVAL=100ms", "IM_LOGIC_WEBHOOK_RETRY_BASE=200ms", "IM_LOGIC_WEBHOOK_RETRY_MAX_INTERVAL=1s",
	}})
	ctx := ctxT(t, 3*time.Minute)
	admin := c.Logics[0].AdminAddr
	const away, sender = 42001, 42002
	phone := c.Login(t, 0, away, "phone")
	if err := phone.RegisterPushToken(ctx, client.PushToken{Platform: "gateway", Token: "gt-42001", Gateway: "getui"}); err != nil {
		t.Fatal(err)
	}
	_ = phone.Close()
	// The job is read and processed but never acknowledged.
	if err := framework.Failpoint(admin, "logic/push/beforeAck", "error"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Login(t, 0, sender, "web").SendText(ctx, away, "while you were out"); err != nil {
		t.Fatal(err)
	}

	t.Run("webhooks", func(t *testing.T) {
		type endpointJSON struct {
			EndpointID    int64    `json:"endpoint_id"`
			URL           string   `json:"url"`
			Events        []string `json:"events"`
			Status        string   `json:"status"`
			CursorID      int64    `json:"cursor_id,string"`
			BehindSeconds float64  `json:"behind_seconds"`
			Attempts      int32    `json:"attempts"`
			NextAttemptMs int64    `json:"next_attempt_ms"`
			LastError     string   `json:"last_error"`
			FromConfig    bool     `json:"from_config"`
		}
		poll := func(what string, ok func(e endpointJSON) bool) endpointJSON {
			t.Helper()
			deadline := time.Now().Add(30 * time.Second)
			for {
				var eps []endpointJSON
				imctlJSON(t, ctx, c, &eps, "webhooks")
				if len(eps) != 1 || eps[0].URL != rcv.url() || !eps[0].FromConfig {
					t.Fatalf("webhooks: %+v, want the one endpoint from config", eps)
				}
				if ok(eps[0]) {
					return eps[0]
				}
				if time.Now().After(deadline) {
					t.Fatalf("webhooks never showed %s: last %+v", what, eps[0])
				}
				time.Sleep(300 * time.Millisecond)
			}
		}
		failing := poll("the failing endpoint behind", func(e endpointJSON) bool {
			return e.Status == "active" && e.Attempts >= 2 && strings.Contains(e.LastError, "503") && e.BehindSeconds > 0 && e.NextAttemptMs > 0
		})
		if table := string(runIMCtl(t, ctx, c, "webhooks")); !strings.HasPrefix(table, "ID ") || !strings.Contains(table, rcv.url()) {
			t.Fatalf("webhooks table:\n%s", table)
		}
		rcv.setStatus(http.StatusOK)
		caught := poll("the endpoint caught up", func(e endpointJSON) bool {
			return e.Attempts == 0 && e.LastError == "" && e.BehindSeconds == 0 && e.CursorID > failing.CursorID
		})
		if caught.EndpointID != failing.EndpointID {
			t.Fatalf("endpoint id changed: %d then %d", failing.EndpointID, caught.EndpointID)
		}
	})

	t.Run("push-queue", func(t *testing.T) {
		match := func(what string, ok func(length, pending int64, age float64) bool) {
			t.Helper()
			matchQueue(t, ctx, c, []string{"push-queue", "-logic-admin", admin}, 2, rediskey.Push, what, ok)
		}
		match("the unacknowledged job", func(length, pending int64, age float64) bool { return length == 1 && pending == 1 && age > 0 })
		if err := framework.Failpoint(admin, "logic/push/beforeAck", "off"); err != nil {
			t.Fatal(err)
		}
		match("an empty queue", func(length, pending int64, age float64) bool { return length == 0 && pending == 0 && age == 0 })
	})
}

// queueJSON is the JSON of imctl queue-lag and push-queue.
type queueJSON struct {
	Partitions []struct {
		Partition        int     `json:"partition"`
		Length           int64   `json:"length"`
		Pending          int64   `json:"pending"`
		OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	} `json:"partitions"`
	Sources []struct {
		Addr  string `json:"addr"`
		Ready bool   `json:"ready"`
		Error string `json:"error"`
	} `json:"sources"`
}

// matchQueue runs an imctl queue command (args) until, within 30 s (the
// gauges are sampled every 5 s), its one source is ready, it lists the
// partitions, each one's length agrees with its stream's XLEN and ok
// accepts the totals.
func matchQueue(t *testing.T, ctx context.Context, c *framework.Cluster, args []string, partitions int, stream func(int) string,
	what string, ok func(length, pending int64, age float64) bool) {
	t.Helper()
	rdb := c.Redis.Client()
	defer func() { _ = rdb.Close() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var q queueJSON
		imctlJSON(t, ctx, c, &q, args...)
		if len(q.Sources) != 1 || !q.Sources[0].Ready || q.Sources[0].Error != "" || len(q.Partitions) != partitions {
			t.Fatalf("%s: %+v", args[0], q)
		}
		agree := true
		var length, pending int64
		var age float64
		for i, p := range q.Partitions {
			n, err := rdb.XLen(ctx, stream(i)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if p.Partition != i || p.Pending > p.Length || p.OldestAgeSeconds < 0 {
				t.Fatalf("%s partition %d: %+v", args[0], i, p)
			}
			agree = agree && p.Length == n
			length, pending, age = length+p.Length, pending+p.Pending, max(age, p.OldestAgeSeconds)
		}
		if agree && ok(length, pending, age) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed %s: last %+v", args[0], what, q)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
