package e2e

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// TestUpstreamReachesPullAndWebhookAcrossLogicKill: devices on TCP and
// WebSocket send UPSTREAM frames to a pulled service and a webhook one;
// logic is killed -9 as soon as every frame is acknowledged (before any
// can have been handed on: they wait behind the settle bound) and
// restarted. Every acknowledged frame then reaches its service: the
// webhook receiver verifies each signature, the puller gets them again
// after the visibility timeout until it acks, never after; a resent
// upstream_id is one item, under one id and one webhook-id; bad frames
// get their codes and reach nobody; imcli -upstream sends one. Serial: it
// kills logic.
func TestUpstreamReachesPullAndWebhookAcrossLogicKill(t *testing.T) {
	hook := newHookReceiver(t, hookSecret)
	c := framework.NewCluster(t, framework.Options{Gates: 1, LogicEnv: []string{
		"IM_LOGIC_UPSTREAM_SERVICES=orders,hooked",
		"IM_LOGIC_UPSTREAM_MAX_BODY=1024",
		"IM_LOGIC_UPSTREAM_VISIBILITY=2s",
		"IM_LOGIC_WEBHOOK_ENABLED=true",
		"IM_LOGIC_WEBHOOK_URLS=" + hook.url(),
		"IM_LOGIC_WEBHOOK_SECRET=" + hookSecret,
		"IM_LOGIC_WEBHOOK_EVENTS=upstream.hooked",
		"IM_LOGIC_WEBHOOK_ALLOW_PRIVATE_URLS=true",
		"IM_LOGIC_REQUEST_TIMEOUT=2s", "IM_LOGIC_WEBHOOK_SETTLE=2500ms",
		"IM_LOGIC_WEBHOOK_POLL_INTERVAL=100ms", "IM_LOGIC_WEBHOOK_LEASE_TTL=2s",
	}})
	ctx := ctxT(t, 3*time.Minute)
	api, actx := apiClient(t, c, ctx)
	const tcpUser, wsUser = int64(7_300_001), int64(7_300_002)
	tcp := c.Login(t, 0, tcpUser, "tcp")
	wsConn, err := client.Dial(ctx, c.Gates[0].WSAddr, client.Options{Dial: client.WSDialer{}.DialContext})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wsConn.Close() })
	if _, err := wsConn.Auth(ctx, c.Token(wsUser, "ws"), "ws", "test", "1.0.0"); err != nil {
		t.Fatal(err)
	}

	// Bad frames: each its code, nothing queued.
	bad := []struct {
		name string
		body any
		code errcode.Code
	}{
		{"unknown service", protocol.UpstreamRequest{Service: "billing", Body: "x"}, errcode.NotFound},
		{"no service", protocol.UpstreamRequest{Body: "x"}, errcode.InvalidArgument},
		{"body over max_body", protocol.UpstreamRequest{Service: "orders", Body: strings.Repeat("x", 1025)}, errcode.TooLarge},
		{"body not a string", map[string]any{"service": "orders", "body": 5}, errcode.InvalidArgument},
	}
	for _, b := range bad {
		r, err := tcp.Request(ctx, protocol.CmdUpstream, b.body)
		if err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
		var ce *client.CodeError
		if err := r.Err(); !errors.As(err, &ce) || ce.Code != b.code {
			t.Fatalf("%s: answered %v, want %s", b.name, err, b.code)
		}
	}

	// Five frames per device and service, the first of each resent with
	// its upstream_id.
	type sent struct{ id, body string }
	want := map[string][]sent{} // service → frames in order per device, both devices appended
	for _, d := range []struct {
		name string
		conn *client.Conn
	}{{"tcp", tcp}, {"ws", wsConn}} {
		for _, service := range []string{"orders", "hooked"} {
			for i := range 5 {
				body := fmt.Sprintf(`{"from":%q,"n":%d}`, d.name, i)
				uid := fmt.Sprintf("%s-%s-%d", d.name, service, i)
				r, err := d.conn.Upstream(ctx, service, body, uid)
				if err != nil || r.Duplicate {
					t.Fatalf("%s %s %d: %+v, %v", d.name, service, i, r, err)
				}
				if i == 0 {
					again, err := d.conn.Upstream(ctx, service, body, uid)
					if err != nil || !again.Duplicate || again.ID != r.ID {
						t.Fatalf("resent %s: %+v, %v; first %+v", uid, again, err, r)
					}
				}
				want[service] = append(want[service], sent{fmt.Sprint(r.ID.Int64()), body})
			}
		}
	}
	if err := c.Logics[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Logics[0].Start(ctx); err != nil {
		t.Fatal(err)
	}

	// Pull: all ten, each device's in its order; not acked, they come
	// again after the visibility timeout; acked, never again.
	pullAll := func() []*logicv1.UpstreamItem {
		t.Helper()
		var got []*logicv1.UpstreamItem
		for deadline := time.Now().Add(30 * time.Second); len(got) < 10; {
			if time.Now().After(deadline) {
				t.Fatalf("pulled %d of 10: %v", len(got), got)
			}
			r, err := api.PullUpstream(actx, &logicv1.PullUpstreamRequest{Service: "orders", MaxItems: 4, WaitMs: 5000})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r.Items...)
		}
		return got
	}
	check := func(got []*logicv1.UpstreamItem) {
		t.Helper()
		byDevice := map[string][]string{}
		for _, it := range got {
			if it.Service != "orders" || (it.DeviceId == "tcp") != (it.UserId == tcpUser) {
				t.Fatalf("item %v", it)
			}
			byDevice[it.DeviceId] = append(byDevice[it.DeviceId], fmt.Sprintf("%d %s", it.Id, it.Body))
		}
		for i, dev := range []string{"tcp", "ws"} {
			var w []string
			for _, s := range want["orders"][i*5 : i*5+5] {
				w = append(w, s.id+" "+s.body)
			}
			if strings.Join(byDevice[dev], "\n") != strings.Join(w, "\n") {
				t.Fatalf("%s pulled\n%s\nwant\n%s", dev, strings.Join(byDevice[dev], "\n"), strings.Join(w, "\n"))
			}
		}
	}
	first := pullAll()
	check(first)
	again := pullAll()
	check(again)
	last := again[len(again)-1].Id
	if r, err := api.AckUpstream(actx, &logicv1.AckUpstreamRequest{Service: "orders", UpToId: last}); err != nil || r.CursorId != last {
		t.Fatalf("ack: %v, %v", r, err)
	}
	if r, err := api.PullUpstream(actx, &logicv1.PullUpstreamRequest{Service: "orders", WaitMs: 3000}); err != nil || len(r.Items) != 0 {
		t.Fatalf("pull after the ack: %v, %v", r, err)
	}

	// imcli sends one frame and prints its id; the puller gets it.
	const cliUser = int64(7_300_003)
	out, err := exec.CommandContext(ctx, c.Bins.IMCli, append(imcliArgs(t, c, 0, cliUser, filepath.Join(t.TempDir(), "state.json")),
		"-upstream", "orders", "-text", `{"from":"imcli"}`)...).CombinedOutput()
	if err != nil {
		t.Fatalf("imcli -upstream: %v\n%s", err, out)
	}
	r, err := api.PullUpstream(actx, &logicv1.PullUpstreamRequest{Service: "orders", WaitMs: 10000})
	if err != nil || len(r.Items) != 1 || r.Items[0].Body != `{"from":"imcli"}` || r.Items[0].UserId != cliUser ||
		!strings.HasSuffix(string(out), fmt.Sprintf("\nupstream orders queued: id %d\n", r.Items[0].Id)) {
		t.Fatalf("imcli printed %q; pulled %v, %v", out, r, err)
	}

	// Webhook: the ten hooked frames, signed, once per webhook-id at
	// least, each device's in its order; orders' frames never.
	hook.waitFor(t, "the hooked frames", 30*time.Second, func() bool {
		ids := map[string]bool{}
		for _, d := range hook.delivered {
			ids[d.webhookID] = true
		}
		return len(ids) >= 10
	})
	hook.checkClean(t)
	hook.mu.Lock()
	defer hook.mu.Unlock()
	seen := map[string]bool{}
	byDevice := map[string][]string{}
	for _, d := range hook.delivered {
		if d.typ != "upstream.hooked" || d.webhookID != "evt_"+d.data["id"].(string) {
			t.Fatalf("delivery %s %s", d.webhookID, d.body)
		}
		if seen[d.webhookID] {
			continue
		}
		seen[d.webhookID] = true
		byDevice[d.data["device_id"].(string)] = append(byDevice[d.data["device_id"].(string)], d.data["id"].(string)+" "+d.data["body"].(string))
	}
	for i, dev := range []string{"tcp", "ws"} {
		var w []string
		for _, s := range want["hooked"][i*5 : i*5+5] {
			w = append(w, s.id+" "+s.body)
		}
		if strings.Join(byDevice[dev], "\n") != strings.Join(w, "\n") {
			t.Fatalf("%s delivered\n%s\nwant\n%s", dev, strings.Join(byDevice[dev], "\n"), strings.Join(w, "\n"))
		}
	}
}
