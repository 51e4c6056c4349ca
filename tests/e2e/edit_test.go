package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// nextPushOf waits for the next push of command cmd on conn, skipping
// others.
func nextPushOf(t *testing.T, conn *client.Conn, cmd uint16, within time.Duration) client.Frame {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		f, err := framework.NextPush(conn, time.Until(deadline))
		if err != nil {
			t.Fatalf("no push %d within %v: %v", cmd, within, err)
		}
		if f.Command == cmd {
			return f
		}
	}
}

// TestEditMessageLiveBySyncAndInGroupsWithEveryRefusal: the sender edits
// a text message and the other member's online device gets the new
// version pushed, the sender's other device too; an offline device
// catches up by sync (an EDIT event, then the message fetched by id) and
// history and the conversation list show the newest text; a repeat
// changes nothing; a reply keeps its snapshot; every refusal (another
// user, a recalled message, past the window, a non-text message or
// content, a client-written snapshot) changes nothing;
// in a group the members get it through deliver, and the API edits too.
func TestEditMessageLiveBySyncAndInGroupsWithEveryRefusal(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, LogicEnv: []string{"IM_LOGIC_EDIT_WINDOW=10s", "IM_LOGIC_RECALL_WINDOW=1m"}})
	ctx := ctxT(t, 2*time.Minute)
	const alice, bob, carol = int64(24101), int64(24102), int64(24103)
	a := c.Login(t, 0, alice, "a")
	a2 := c.Login(t, 1, alice, "a2")
	b := c.Login(t, 1, bob, "b")
	bOff := c.Login(t, 0, bob, "b-off")
	rep := framework.NewReplica()
	if err := rep.Sync(ctx, bOff); err != nil {
		t.Fatal(err)
	}
	_ = bOff.Close()

	old, err := a.Send(ctx, sendTo(bob, "ed-old", text(t, "too late to change")))
	if err != nil {
		t.Fatal(err)
	}
	oldAt := time.Now()
	ack, err := a.Send(ctx, sendTo(bob, "ed-1", text(t, "meet at 5")))
	if err != nil {
		t.Fatal(err)
	}
	cid, mid := ack.ConversationID.Int64(), ack.MsgID.Int64()
	r, err := a.Edit(ctx, cid, mid, text(t, "meet at 6"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != 1 || r.MsgID.Int64() != mid || r.EditedAt == 0 {
		t.Fatalf("edit answered %+v", r)
	}
	for _, who := range []struct {
		name string
		conn *client.Conn
	}{{"the recipient", b}, {"the sender's other device", a2}} {
		f := nextPushOf(t, who.conn, protocol.CmdEditMessage, 10*time.Second)
		env, err := f.Envelope()
		if err != nil {
			t.Fatal(err)
		}
		var p protocol.EditPush
		if err := json.Unmarshal(env.Data, &p); err != nil || p.MsgID.Int64() != mid || p.Version != 1 ||
			!strings.Contains(string(p.Content), "meet at 6") || p.SenderID.Int64() != alice {
			t.Fatalf("%s got edit push %s (%v)", who.name, env.Data, err)
		}
	}
	// A repeat (the retry of a lost answer) is the same version, pushed
	// to nobody.
	if r2, err := a.Edit(ctx, cid, mid, text(t, "meet at 6")); err != nil || r2.Version != 1 {
		t.Fatalf("repeated edit: %+v, %v", r2, err)
	}

	// A reply, then its edit: the server's snapshot stays.
	reply := sendTo(bob, "ed-reply", text(t, "the usual place?"))
	reply.ReplyTo = ack.MsgID
	rack, err := a.Send(ctx, reply)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Edit(ctx, cid, rack.MsgID.Int64(), text(t, "the old place?")); err != nil {
		t.Fatal(err)
	}

	// Refusals change nothing.
	for _, tc := range []struct {
		name    string
		conn    *client.Conn
		msg     int64
		content json.RawMessage
		code    errcode.Code
	}{
		{"another user's message", b, mid, text(t, "hijack"), errcode.Forbidden},
		{"an unknown message", a, mid + 999, text(t, "x"), errcode.NotFound},
		{"a negative id", a, -mid, text(t, "x"), errcode.InvalidArgument},
		{"content of another type", a, mid, json.RawMessage(`{"t":2,"key":"img/0123456789012345678901"}`), errcode.InvalidArgument},
		{"content that is not an object", a, mid, json.RawMessage(`"hi"`), errcode.InvalidArgument},
		{"a client-written snapshot", a, mid, json.RawMessage(`{"t":1,"text":"x","reply_to":{"msg_id":"1","text":"forged"}}`), errcode.InvalidArgument},
	} {
		if _, err := tc.conn.Edit(ctx, cid, tc.msg, tc.content); !hasCode(err, tc.code) {
			t.Errorf("edit of %s: %v, want %s", tc.name, err, tc.code)
		}
	}

	// The offline device catches up: an EDIT event, the message by id.
	bBack := c.Login(t, 0, bob, "b-off")
	if err := rep.Sync(ctx, bBack); err != nil {
		t.Fatal(err)
	}
	got := rep.Msgs[cid][mid]
	if got.Version != 1 || !strings.Contains(string(got.Content), "meet at 6") {
		t.Fatalf("the device that was offline holds %+v", got)
	}
	if rg := rep.Msgs[cid][rack.MsgID.Int64()]; !strings.Contains(string(rg.Content), `"reply_to"`) || !strings.Contains(string(rg.Content), "the old place?") {
		t.Fatalf("the edited reply lost its snapshot or its edit: %s", rg.Content)
	}
	// History from scratch and by id agree; the list preview is the reply.
	hist, _, err := bBack.SyncMessages(ctx, cid, 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range hist {
		if m.MsgID.Int64() == mid && (m.Version != 1 || m.EditedAt != r.EditedAt || !strings.Contains(string(m.Content), "meet at 6")) {
			t.Fatalf("history shows %+v", m)
		}
	}
	byID, err := bBack.MessagesByID(ctx, cid, []int64{mid, old.MsgID.Int64(), mid + 999})
	if err != nil || len(byID) != 2 {
		t.Fatalf("messages by id: %d, %v; want the two that exist", len(byID), err)
	}
	inbox, err := bBack.SyncInbox(ctx, "0", "0", 50)
	if err != nil {
		t.Fatal(err)
	}
	for _, cv := range inbox.Conversations {
		if cv.ConversationID.Int64() == cid && (cv.Preview == nil || cv.Preview.Text != "the old place?") {
			t.Fatalf("list preview %+v, want the edited reply's text", cv.Preview)
		}
	}

	// Past the window; recalled.
	time.Sleep(time.Until(oldAt.Add(11 * time.Second)))
	if _, err := a.Edit(ctx, cid, old.MsgID.Int64(), text(t, "changed")); !hasCode(err, errcode.Forbidden) {
		t.Errorf("edit past logic.edit_window: %v, want 40301", err)
	}
	fresh, err := a.Send(ctx, sendTo(bob, "ed-2", text(t, "oops")))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Recall(ctx, cid, fresh.MsgID.Int64()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Edit(ctx, cid, fresh.MsgID.Int64(), text(t, "un-oops")); !hasCode(err, errcode.Forbidden) {
		t.Errorf("edit of a recalled message: %v, want 40301", err)
	}

	// A group: the members get it from deliver; the API edits too.
	api, actx := apiClient(t, c, ctx)
	for _, u := range []int64{alice, bob, carol} {
		if _, err := api.UpsertUser(actx, &logicv1.UpsertUserRequest{UserId: u}); err != nil {
			t.Fatal(err)
		}
	}
	g, err := api.CreateGroup(actx, &logicv1.CreateGroupRequest{OwnerId: alice, MemberIds: []int64{bob, carol}, Name: "edits"})
	if err != nil {
		t.Fatal(err)
	}
	carolConn := c.Login(t, 1, carol, "c")
	gack, err := a.Send(ctx, sendToGroup(g.Group.GroupId, "ed-g", text(t, "agenda: one")))
	if err != nil {
		t.Fatal(err)
	}
	gr, err := api.EditMessage(actx, &logicv1.EditMessageRequest{SenderId: alice, MsgId: gack.MsgID.Int64(), Content: `{"t":1,"text":"agenda: two"}`})
	if err != nil || gr.Version != 1 {
		t.Fatalf("API edit: %+v, %v", gr, err)
	}
	f := nextPushOf(t, carolConn, protocol.CmdEditMessage, 15*time.Second)
	env, _ := f.Envelope()
	if !strings.Contains(string(env.Data), "agenda: two") {
		t.Fatalf("group member got %s", env.Data)
	}
	if _, err := api.EditMessage(actx, &logicv1.EditMessageRequest{SenderId: bob, MsgId: gack.MsgID.Int64(), Content: `{"t":1,"text":"x"}`}); err == nil {
		t.Fatal("the API edited a message for a user who did not send it")
	}
	if n := c.CountRows("SELECT COUNT(*) FROM t_messages WHERE id = ? AND version = 1", gack.MsgID.Int64()); n != 1 {
		t.Fatalf("group message version in MySQL: %d rows at version 1", n)
	}
	t.Logf("edits checked in conversation %d and group %s", cid, fmt.Sprint(g.Group.GroupId))
}
