package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/stdwebhook"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// hookDelivery is one POST a receiver answered 2xx.
type hookDelivery struct {
	webhookID string
	body      string
	typ       string
	data      map[string]any
}

// hookReceiver is a business server: it verifies every request's
// signature with the secrets it knows and answers what the test scripts.
type hookReceiver struct {
	srv *httptest.Server

	mu        sync.Mutex
	secrets   []stdwebhook.Secret
	status    int            // answer; 0 means 200
	attempts  map[string]int // webhook-id → POSTs, answered or not
	delivered []hookDelivery
	sigCounts []int // signatures per request
	bad       []string
	changed   chan struct{}
}

func newHookReceiver(t *testing.T, secret string) *hookReceiver {
	r := &hookReceiver{attempts: map[string]int{}, changed: make(chan struct{})}
	r.setSecrets(t, secret)
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *hookReceiver) url() string { return r.srv.URL + "/hook" }

func (r *hookReceiver) setSecrets(t *testing.T, secrets ...string) {
	t.Helper()
	var ss []stdwebhook.Secret
	for _, s := range secrets {
		sec, err := stdwebhook.ParseSecret(s)
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, sec)
	}
	r.mu.Lock()
	r.secrets = ss
	r.mu.Unlock()
}

func (r *hookReceiver) setStatus(code int) {
	r.mu.Lock()
	r.status = code
	r.mu.Unlock()
}

func (r *hookReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	r.mu.Lock()
	defer func() {
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}()
	id := req.Header.Get(stdwebhook.HeaderID)
	r.attempts[id]++
	if err != nil {
		r.bad = append(r.bad, "read body: "+err.Error())
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	// Every signature in the list must verify with one of the secrets.
	for _, sig := range strings.Fields(req.Header.Get(stdwebhook.HeaderSignature)) {
		h := req.Header.Clone()
		h.Set(stdwebhook.HeaderSignature, sig)
		if err := stdwebhook.Verify(h, body, time.Now(), r.secrets...); err != nil {
			r.bad = append(r.bad, fmt.Sprintf("%s: %v", id, err))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
	}
	if r.status != 0 && r.status != http.StatusOK {
		if r.status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(r.status)
		return
	}
	var env struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		r.bad = append(r.bad, fmt.Sprintf("%s: body %q: %v", id, body, err))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.sigCounts = append(r.sigCounts, len(strings.Fields(req.Header.Get(stdwebhook.HeaderSignature))))
	r.delivered = append(r.delivered, hookDelivery{webhookID: id, body: string(body), typ: env.Type, data: env.Data})
	w.WriteHeader(http.StatusNoContent)
}

// waitFor waits until cond holds over the deliveries (under the lock).
func (r *hookReceiver) waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.After(d)
	for {
		r.mu.Lock()
		ok, ch := cond(), r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("%s: not within %v (%d deliveries, %d bad: %v)", what, d, len(r.delivered), len(r.bad), r.bad)
		}
	}
}

// sentMsgIDs are the msg_ids of the message.sent deliveries (under the
// lock), each as often as it came.
func (r *hookReceiver) sentMsgIDs() map[string]int {
	out := map[string]int{}
	for _, d := range r.delivered {
		if d.typ == "message.sent" {
			out[d.data["msg_id"].(string)]++
		}
	}
	return out
}

func (r *hookReceiver) checkClean(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) > 0 {
		t.Fatalf("receiver refused %d requests: %v", len(r.bad), r.bad)
	}
	// The same webhook-id always carries the same body.
	bodies := map[string]string{}
	for _, d := range r.delivered {
		if b, ok := bodies[d.webhookID]; ok && b != d.body {
			t.Fatalf("webhook-id %s delivered with two bodies:\n%s\n%s", d.webhookID, b, d.body)
		}
		bodies[d.webhookID] = d.body
	}
}

// endpointByURL finds an endpoint through the API.
func endpointByURL(t *testing.T, api logicv1.ApiClient, ctx context.Context, url string) *logicv1.WebhookEndpoint {
	t.Helper()
	l, err := api.ListWebhookEndpoints(ctx, &logicv1.ListWebhookEndpointsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range l.Endpoints {
		if ep.Url == url {
			return ep
		}
	}
	t.Fatalf("no endpoint for %s in %v", url, l.Endpoints)
	return nil
}

// TestWebhooks runs one cluster whose logic posts every event to test
// receivers: signatures, event types and order, kill -9 of logic and
// deliver and an endpoint answering 503 without a lost event, a 410 that
// disables, replay, and the API's endpoint calls. Serial: it kills
// processes.
func TestWebhooks(t *testing.T) {
	main := newHookReceiver(t, hookSecret)
	gone := newHookReceiver(t, hookSecret)
	gone.setStatus(http.StatusGone)
	c := framework.NewCluster(t, framework.Options{Gates: 1, LogicEnv: []string{
		"IM_LOGIC_WEBHOOK_ENABLED=true",
		"IM_LOGIC_WEBHOOK_URLS=" + main.url() + "," + gone.url(),
		// The before-send tests' secret signs these endpoints too.
		"IM_LOGIC_WEBHOOK_SECRET=" + hookSecret,
		// The receivers listen on loopback.
		"IM_LOGIC_WEBHOOK_ALLOW_PRIVATE_URLS=true",
		"IM_LOGIC_REQUEST_TIMEOUT=2s", "IM_LOGIC_WEBHOOK_SETTLE=2500ms",
		"IM_LOGIC_WEBHOOK_POLL_INTERVAL=100ms", "IM_LOGIC_WEBHOOK_RETRY_BASE=200ms",
		"IM_LOGIC_WEBHOOK_RETRY_MAX_INTERVAL=1s", "IM_LOGIC_WEBHOOK_LEASE_TTL=2s",
		// Long enough for the 503 period, short enough to see an endpoint
		// die.
		"IM_LOGIC_WEBHOOK_RETRY_FOR=20s",
	}})
	ctx := ctxT(t, 4*time.Minute)
	api, actx := apiClient(t, c, ctx)
	const base = int64(7_100_000)
	send := func(from, to int64, cid string) (*logicv1.SendMessageReply, error) {
		return api.SendMessage(actx, &logicv1.SendMessageRequest{SenderId: from, ToUserId: to, ClientMsgId: cid, MessageType: 1,
			Content: `{"t":1,"text":"` + cid + `"}`})
	}

	for _, u := range []int64{1, 2, 3, 10, 11, 20, 21} {
		// Issuing a token creates the user.
		if _, err := api.IssueToken(actx, &logicv1.IssueTokenRequest{UserId: base + u}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("every change arrives signed, messages in order per conversation", func(t *testing.T) {
		owner, m1, m2 := base+1, base+2, base+3
		g, err := api.CreateGroup(actx, &logicv1.CreateGroupRequest{OwnerId: owner, MemberIds: []int64{m1}, Name: "hooks"})
		if err != nil {
			t.Fatal(err)
		}
		gid := g.Group.GroupId
		steps := []func() error{
			func() error {
				_, err := api.AddGroupMembers(actx, &logicv1.ChangeGroupMembersRequest{OperatorId: owner, GroupId: gid, UserIds: []int64{m2}})
				return err
			},
			func() error {
				_, err := api.SetGroupRole(actx, &logicv1.SetGroupRoleRequest{OperatorId: owner, GroupId: gid, UserId: m1, Role: logicv1.GroupRole_GROUP_ROLE_ADMIN})
				return err
			},
			func() error {
				_, err := api.MuteGroupMember(actx, &logicv1.MuteGroupMemberRequest{OperatorId: owner, GroupId: gid, UserId: m2, UntilMs: time.Now().Add(time.Hour).UnixMilli()})
				return err
			},
			func() error {
				_, err := api.RemoveGroupMembers(actx, &logicv1.ChangeGroupMembersRequest{OperatorId: owner, GroupId: gid, UserIds: []int64{m2}})
				return err
			},
			func() error {
				_, err := api.AddFriend(actx, &logicv1.FriendPair{UserId: owner, FriendId: m2})
				return err
			},
			func() error { _, err := api.Block(actx, &logicv1.BlockRequest{UserId: m1, TargetId: m2}); return err },
			func() error {
				_, err := api.DissolveGroup(actx, &logicv1.GroupRef{OperatorId: owner, GroupId: gid})
				return err
			},
		}
		for i, step := range steps {
			if err := step(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		var last *logicv1.SendMessageReply
		for i := range 5 {
			if last, err = send(owner, m1, "order-"+strconv.Itoa(i)); err != nil {
				t.Fatal(err)
			}
		}
		dev := c.Login(t, 0, owner, "hook-dev")
		if err := dev.Recall(ctx, last.ConversationId, last.MsgId); err != nil {
			t.Fatal(err)
		}
		// The owner's only device leaves: the last one out.
		if err := dev.Close(); err != nil {
			t.Fatal(err)
		}
		want := []string{"group.created", "group.members_added", "group.role_changed", "group.member_muted",
			"group.members_removed", "friend.added", "block.added", "group.dissolved", "message.sent",
			"user.online", "message.recalled", "user.offline"}
		main.waitFor(t, "every event type", 30*time.Second, func() bool {
			seen := map[string]bool{}
			for _, d := range main.delivered {
				seen[d.typ] = true
			}
			for _, w := range want {
				if !seen[w] {
					return false
				}
			}
			return len(main.sentMsgIDs()) >= 5
		})
		main.mu.Lock()
		var order []string
		var msgs []string
		for _, d := range main.delivered {
			if !slices.Contains(order, d.typ) {
				order = append(order, d.typ)
			}
			if d.typ == "message.sent" {
				msgs = append(msgs, d.data["msg_id"].(string))
				if d.data["to_user_id"] != strconv.FormatInt(m1, 10) || d.data["sender_id"] != strconv.FormatInt(owner, 10) {
					t.Errorf("message.sent data %v", d.data)
				}
			}
		}
		main.mu.Unlock()
		if !slices.Equal(order, want) {
			t.Errorf("first arrival of each type in order %v, want %v", order, want)
		}
		if !slices.IsSortedFunc(msgs, func(a, b string) int {
			x, _ := strconv.ParseInt(a, 10, 64)
			y, _ := strconv.ParseInt(b, 10, 64)
			return int(x - y)
		}) {
			t.Errorf("message.sent out of order: %v", msgs)
		}
		main.checkClean(t)
	})

	t.Run("410 disables the endpoint after one attempt", func(t *testing.T) {
		gone.waitFor(t, "an attempt at the 410 endpoint", 30*time.Second, func() bool { return len(gone.attempts) > 0 })
		var ep *logicv1.WebhookEndpoint
		for deadline := time.Now().Add(10 * time.Second); ; {
			if ep = endpointByURL(t, api, actx, gone.url()); ep.Status == "gone" || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if ep.Status != "gone" || !strings.Contains(ep.LastError, "410") {
			t.Fatalf("endpoint after 410: %v", ep)
		}
		if _, err := send(base+1, base+2, "after-gone"); err != nil {
			t.Fatal(err)
		}
		main.waitFor(t, "the message after the 410", 30*time.Second, func() bool { return len(main.sentMsgIDs()) >= 6 })
		gone.mu.Lock()
		n := 0
		for _, k := range gone.attempts {
			n += k
		}
		gone.mu.Unlock()
		if n != 1 {
			t.Fatalf("the gone endpoint got %d attempts, want 1", n)
		}
	})

	t.Run("kill -9 of logic and deliver and a 503 endpoint lose no event", func(t *testing.T) {
		var (
			mu    sync.Mutex
			acked []string
		)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Each try under its own id; a failed call (logic down) is
				// simply not counted: only acknowledged sends must arrive.
				r, err := send(base+10, base+11, "kill-"+strconv.Itoa(i))
				if err == nil {
					mu.Lock()
					acked = append(acked, strconv.FormatInt(r.MsgId, 10))
					mu.Unlock()
				} else {
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		ackedN := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
		waitAcked := func(n int) {
			for deadline := time.Now().Add(30 * time.Second); ackedN() < n; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("only %d sends acknowledged", ackedN())
				}
			}
		}
		waitAcked(30)
		// Some were delivered, some wait behind the settle bound.
		main.waitFor(t, "deliveries under load", 30*time.Second, func() bool { return len(main.sentMsgIDs()) > 10 })
		if err := c.Logics[0].Kill(); err != nil {
			t.Fatal(err)
		}
		if err := c.Logics[0].Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitAcked(ackedN() + 20)
		if err := c.Delivers[0].Kill(); err != nil {
			t.Fatal(err)
		}
		if err := c.Delivers[0].Start(ctx); err != nil {
			t.Fatal(err)
		}
		main.setStatus(http.StatusServiceUnavailable)
		waitAcked(ackedN() + 30)
		main.waitFor(t, "retries of a 503", 30*time.Second, func() bool {
			for _, n := range main.attempts {
				if n >= 3 {
					return true
				}
			}
			return false
		})
		main.setStatus(http.StatusOK)
		close(stop)
		wg.Wait()
		mu.Lock()
		all := slices.Clone(acked)
		mu.Unlock()
		main.waitFor(t, "every acknowledged message", 60*time.Second, func() bool {
			got := main.sentMsgIDs()
			for _, id := range all {
				if got[id] == 0 {
					return false
				}
			}
			return true
		})
		main.checkClean(t)
		// The retried ones came under the webhook-id of their first try.
		main.mu.Lock()
		defer main.mu.Unlock()
		ids := map[string]bool{}
		for _, d := range main.delivered {
			ids[d.webhookID] = true
		}
		retried := 0
		for id, n := range main.attempts {
			if n > 1 {
				retried++
				if !ids[id] {
					t.Errorf("webhook-id %s was tried %d times and never delivered", id, n)
				}
			}
		}
		if retried == 0 {
			t.Error("no webhook-id was tried twice: the 503 was not retried")
		}
	})

	t.Run("replay from an offset resends with the same webhook-ids", func(t *testing.T) {
		main.mu.Lock()
		var first hookDelivery
		for _, d := range main.delivered {
			if d.typ == "message.sent" {
				first = d
				break
			}
		}
		main.mu.Unlock()
		if first.data == nil {
			t.Fatal("no message.sent delivered to replay")
		}
		from, _ := strconv.ParseInt(first.data["msg_id"].(string), 10, 64)
		gone.setStatus(http.StatusOK)
		ep := endpointByURL(t, api, actx, gone.url())
		r, err := api.ReplayWebhookEndpoint(actx, &logicv1.ReplayWebhookEndpointRequest{EndpointId: ep.EndpointId, FromId: from - 1})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != "active" || r.CursorId != from-1 {
			t.Fatalf("after replay: %v", r)
		}
		gone.waitFor(t, "the replayed first message", 30*time.Second, func() bool {
			for _, d := range gone.delivered {
				if d.webhookID == first.webhookID {
					return d.body == first.body
				}
			}
			return false
		})
		gone.checkClean(t)
	})

	t.Run("endpoint over HTTP JSON: test event, rotation signs with both secrets", func(t *testing.T) {
		third := newHookReceiver(t, hookSecret)
		var ep logicv1.WebhookEndpoint
		httpOK(t, c.Logics[0].HTTPAddr, "POST", "/v1/webhooks", `{"url":"`+third.url()+`","events":["message.sent"]}`, &ep)
		if !strings.HasPrefix(ep.Secret, "whsec_") || ep.Status != "active" {
			t.Fatalf("created %v", &ep)
		}
		third.setSecrets(t, ep.Secret)
		var tr logicv1.TestWebhookEndpointReply
		httpOK(t, c.Logics[0].HTTPAddr, "POST", "/v1/webhooks/"+strconv.FormatInt(ep.EndpointId, 10)+"/test", `{}`, &tr)
		if tr.Status != http.StatusNoContent || tr.Error != "" || !strings.HasPrefix(tr.WebhookId, "test_") {
			t.Fatalf("test event: %v", &tr)
		}
		old := ep.Secret
		var rot logicv1.WebhookEndpoint
		httpOK(t, c.Logics[0].HTTPAddr, "POST", "/v1/webhooks/"+strconv.FormatInt(ep.EndpointId, 10)+"/rotate", `{"grace_seconds":600}`, &rot)
		if rot.Secret == old || rot.OldSecretUntilMs == 0 {
			t.Fatalf("rotated %v", &rot)
		}
		// Every signature must verify with one of the two.
		third.setSecrets(t, rot.Secret, old)
		if _, err := send(base+20, base+21, "rotated"); err != nil {
			t.Fatal(err)
		}
		third.waitFor(t, "a message signed after the rotation", 30*time.Second, func() bool {
			for i, d := range third.delivered {
				if d.typ == "message.sent" && third.sigCounts[i] == 2 {
					return true
				}
			}
			return false
		})
		third.checkClean(t)
		if code, b := httpCall(t, c.Logics[0].HTTPAddr, framework.APIKey, "POST", "/v1/webhooks", `{"url":"ftp://x"}`); code != http.StatusBadRequest {
			t.Fatalf("ftp url: %d %s", code, b)
		}
		if code, b := httpCall(t, c.Logics[0].HTTPAddr, framework.APIKey, "POST", "/v1/webhooks", `{"url":"http://x.example","events":["nope"]}`); code != http.StatusBadRequest {
			t.Fatalf("unknown event type: %d %s", code, b)
		}
		if code, b := httpCall(t, c.Logics[0].HTTPAddr, framework.APIKey, "POST", "/v1/webhooks/999999/disable", `{}`); code != http.StatusNotFound {
			t.Fatalf("disable of a missing endpoint: %d %s", code, b)
		}
	})

	t.Run("an endpoint failing past retry_for is dead until replayed", func(t *testing.T) {
		down := newHookReceiver(t, hookSecret)
		down.setStatus(http.StatusInternalServerError)
		ep, err := api.CreateWebhookEndpoint(actx, &logicv1.CreateWebhookEndpointRequest{Url: down.url(), Events: []string{"message.sent"}})
		if err != nil {
			t.Fatal(err)
		}
		down.setSecrets(t, ep.Secret)
		sent, err := send(base+20, base+21, "to-the-dead")
		if err != nil {
			t.Fatal(err)
		}
		var got *logicv1.WebhookEndpoint
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if got = endpointByURL(t, api, actx, down.url()); got.Status == "dead" || time.Now().After(deadline) {
				break
			}
		}
		if got.Status != "dead" || got.Attempts < 2 || !strings.Contains(got.LastError, "500") {
			t.Fatalf("endpoint after 20 s of 500s: %v", got)
		}
		down.setStatus(http.StatusOK)
		if _, err := api.ReplayWebhookEndpoint(actx, &logicv1.ReplayWebhookEndpointRequest{EndpointId: ep.EndpointId}); err != nil {
			t.Fatal(err)
		}
		want := strconv.FormatInt(sent.MsgId, 10)
		down.waitFor(t, "the message after the replay", 30*time.Second, func() bool { return down.sentMsgIDs()[want] > 0 })
		down.checkClean(t)
	})
}

// presence lists the user.online / user.offline deliveries as
// "online 12/phone" (under the lock).
func (r *hookReceiver) presence() []string {
	var out []string
	for _, d := range r.delivered {
		if d.typ == "user.online" || d.typ == "user.offline" {
			out = append(out, fmt.Sprintf("%s %v/%v", strings.TrimPrefix(d.typ, "user."), d.data["user_id"], d.data["device_id"]))
		}
	}
	return out
}

// TestUserOfflineWhenTheGateOfTheLastDeviceIsKilled: a gate killed with
// -9 closes nothing, yet the user whose only device was there gets a
// user.offline once the gate's registry entry expires (the route sweep,
// decision 97), and a user with a device left on the other gate gets none
// until that one leaves too.
func TestUserOfflineWhenTheGateOfTheLastDeviceIsKilled(t *testing.T) {
	t.Parallel()
	rcv := newHookReceiver(t, hookSecret)
	c := framework.NewCluster(t, framework.Options{Gates: 2, LogicEnv: []string{
		"IM_LOGIC_WEBHOOK_ENABLED=true",
		"IM_LOGIC_WEBHOOK_URLS=" + rcv.url(),
		"IM_LOGIC_WEBHOOK_SECRET=" + hookSecret,
		"IM_LOGIC_WEBHOOK_EVENTS=user.online,user.offline",
		"IM_LOGIC_WEBHOOK_ALLOW_PRIVATE_URLS=true",
		"IM_LOGIC_REQUEST_TIMEOUT=2s", "IM_LOGIC_WEBHOOK_SETTLE=2500ms",
		"IM_LOGIC_WEBHOOK_POLL_INTERVAL=100ms",
		"IM_LOGIC_WEBHOOK_GATE_SWEEP_INTERVAL=500ms",
	}})
	const lone, pair = int64(7_180_001), int64(7_180_002)
	c.Login(t, 0, lone, "phone")
	c.Login(t, 0, pair, "phone")
	pad := c.Login(t, 1, pair, "pad")
	online := []string{fmt.Sprintf("online %d/phone", lone), fmt.Sprintf("online %d/phone", pair)}
	rcv.waitFor(t, "both users online", 30*time.Second, func() bool {
		got := rcv.presence()
		slices.Sort(got)
		return slices.Equal(got, online)
	})

	if err := c.Gates[0].Kill(); err != nil {
		t.Fatal(err)
	}
	// The gate's registry entry lives 30 s after its last refresh.
	offline := fmt.Sprintf("offline %d/phone", lone)
	rcv.waitFor(t, "user.offline of the user whose only device was on the killed gate", 60*time.Second, func() bool {
		return slices.Contains(rcv.presence(), offline)
	})
	// A few more sweeps: the user with the pad online stays online.
	time.Sleep(2 * time.Second)
	rcv.mu.Lock()
	got := rcv.presence()
	rcv.mu.Unlock()
	if want := append(slices.Clone(online), offline); len(got) != len(want) {
		t.Fatalf("presence events %v after the gate's death, want only %v", got, want)
	}

	// The pad leaves normally: now the pair is offline, by the pad.
	if err := pad.Close(); err != nil {
		t.Fatal(err)
	}
	last := fmt.Sprintf("offline %d/pad", pair)
	rcv.waitFor(t, "user.offline of the pair's last device", 30*time.Second, func() bool {
		return slices.Contains(rcv.presence(), last)
	})
	rcv.mu.Lock()
	got = rcv.presence()
	rcv.mu.Unlock()
	if len(got) != 4 {
		t.Fatalf("presence events %v, want exactly online×2, the lone user's offline and the pair's", got)
	}
	rcv.checkClean(t)
}
