package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// readyzStatus is the HTTP status of a process's /readyz, 0 when it does
// not answer.
func readyzStatus(adminAddr string) int {
	hc := http.Client{Timeout: time.Second}
	resp, err := hc.Get("http://" + adminAddr + "/readyz")
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// Start-up in any order (docs/internals.md "Start-up, readiness,
// shutdown"): deliver first, then the gates,
// logic last. Meanwhile the gates report not ready; once logic is up
// every process logs its ready line, and P2P and group messages flow
// through all of them.
func TestStartupInAnyOrderDeliverThenGatesThenLogicAllBecomeReadyAndMessagesFlow(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, Unstarted: true})
	ctx := ctxT(t, 2*time.Minute)
	launch := func(p *framework.Process) {
		t.Helper()
		if _, err := p.Launch(); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range c.Delivers {
		launch(d.Process)
	}
	for _, g := range c.Gates {
		launch(g.Process)
	}
	// Without logic the gates stay up, not ready, and retry.
	time.Sleep(2 * time.Second)
	for _, g := range c.Gates {
		if !g.Running() {
			t.Fatalf("%s exited without logic:\n%s", g.ID, g.Tail(20))
		}
		if s := readyzStatus(g.AdminAddr); s != http.StatusServiceUnavailable {
			t.Fatalf("%s /readyz %d without logic, want 503", g.ID, s)
		}
	}
	for _, l := range c.Logics {
		launch(l.Process)
	}
	for _, p := range []*framework.Process{c.Delivers[0].Process, c.Gates[0].Process, c.Gates[1].Process, c.Logics[0].Process} {
		if err := p.WaitLog(ctx, framework.ReadyLine, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range c.Gates {
		if s := readyzStatus(g.AdminAddr); s != http.StatusOK {
			t.Fatalf("%s /readyz %d once logic is up, want 200", g.ID, s)
		}
	}

	a := c.Login(t, 0, 7801, "a")
	b := c.Login(t, 1, 7802, "b")
	m := c.Login(t, 1, 7803, "m")
	ack, err := a.Send(ctx, sendTo(7802, "order-p2p", text(t, "hello after any-order start")))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := nextMessage(b, 10*time.Second); err != nil || got.MsgID != ack.MsgID {
		t.Fatalf("P2P push: %+v %v", got, err)
	}
	api, actx := apiClient(t, c, ctx)
	g, err := api.CreateGroup(actx, &logicv1.CreateGroupRequest{OwnerId: 7801, MemberIds: []int64{7802, 7803}, Name: "order"})
	if err != nil {
		t.Fatal(err)
	}
	gack, err := a.Send(ctx, sendToGroup(g.Group.GroupId, "order-group", text(t, "group after any-order start")))
	if err != nil {
		t.Fatal(err)
	}
	for i, conn := range []*client.Conn{b, m} {
		if got, err := nextMessage(conn, 10*time.Second); err != nil || got.MsgID != gack.MsgID {
			t.Fatalf("group push to member %d: %+v %v", i, got, err)
		}
	}
}
