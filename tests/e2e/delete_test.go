package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// awaitDeletedForEveryone waits for a DELETE_MESSAGE push of msgID with
// for_everyone on conn.
func awaitDeletedForEveryone(t *testing.T, name string, conn *client.Conn, msgID int64) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case f := <-conn.Pushes():
			if f.Command != protocol.CmdDeleteMessage {
				continue
			}
			env, err := f.Envelope()
			if err != nil {
				t.Fatal(err)
			}
			var d protocol.DeleteRequest
			if err := json.Unmarshal(env.Data, &d); err != nil {
				t.Fatal(err)
			}
			if d.MsgID.Int64() == msgID {
				if !d.ForEveryone {
					t.Fatalf("%s: DELETE_MESSAGE push %s without for_everyone", name, env.Data)
				}
				return
			}
		case <-deadline:
			t.Fatalf("%s got no DELETE_MESSAGE for_everyone push of #%d", name, msgID)
		}
	}
}

// TestDeleteForEveryone: a group admin deletes a member's message for
// everyone (DELETE_MESSAGE for_everyone): online members get the push, an
// offline device finds the DELETE event and a status-3 tombstone on sync,
// the API's history says 3 without content; a plain member and a P2P
// participant are refused 40301, an unknown id 40401; the business API
// deletes a P2P message; repeats change nothing; the webhook receiver gets
// one message.deleted per deletion (decision 98).
func TestDeleteForEveryone(t *testing.T) {
	t.Parallel()
	rcv := newHookReceiver(t, hookSecret)
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4, LogicEnv: []string{
		"IM_LOGIC_WEBHOOK_ENABLED=true",
		"IM_LOGIC_WEBHOOK_URLS=" + rcv.url(),
		"IM_LOGIC_WEBHOOK_SECRET=" + hookSecret,
		"IM_LOGIC_WEBHOOK_EVENTS=message.deleted",
		"IM_LOGIC_WEBHOOK_ALLOW_PRIVATE_URLS=true",
		"IM_LOGIC_REQUEST_TIMEOUT=2s", "IM_LOGIC_WEBHOOK_SETTLE=2500ms",
		"IM_LOGIC_WEBHOOK_POLL_INTERVAL=100ms",
	}})
	ctx := ctxT(t, 2*time.Minute)
	api, actx := apiClient(t, c, ctx)
	const owner, admin, member, away = int64(23101), int64(23102), int64(23103), int64(23104)
	for _, u := range []int64{owner, admin, member, away} {
		if _, err := api.UpsertUser(actx, &logicv1.UpsertUserRequest{UserId: u}); err != nil {
			t.Fatal(err)
		}
	}
	g, err := api.CreateGroup(actx, &logicv1.CreateGroupRequest{OwnerId: owner, MemberIds: []int64{admin, member, away}, Name: "moderated"})
	if err != nil {
		t.Fatal(err)
	}
	gid := g.Group.GroupId
	if _, err := api.SetGroupRole(actx, &logicv1.SetGroupRoleRequest{OperatorId: owner, GroupId: gid, UserId: admin, Role: logicv1.GroupRole_GROUP_ROLE_ADMIN}); err != nil {
		t.Fatal(err)
	}
	ownerConn := c.Login(t, 0, owner, "o")
	adminConn := c.Login(t, 1, admin, "a")
	memberConn := c.Login(t, 0, member, "m")
	awayConn := c.Login(t, 1, away, "w")
	ack, err := memberConn.Send(ctx, sendToGroup(gid, "spam-1", text(t, "buy cheap watches")))
	if err != nil {
		t.Fatal(err)
	}
	waitNoPending(t, c, 4, 15*time.Second)
	rep := framework.NewReplica()
	if err := rep.Sync(ctx, awayConn); err != nil {
		t.Fatal(err)
	}
	_ = awayConn.Close()
	conv, id := ack.ConversationID.Int64(), ack.MsgID.Int64()

	if err := memberConn.DeleteForEveryone(ctx, conv, id); !hasCode(err, errcode.Forbidden) {
		t.Fatalf("delete for everyone by a plain member: %v, want 40301", err)
	}
	if err := adminConn.DeleteForEveryone(ctx, conv, id+1); !hasCode(err, errcode.NotFound) {
		t.Fatalf("delete for everyone of an unknown id: %v, want 40401", err)
	}
	if err := adminConn.DeleteForEveryone(ctx, conv, id); err != nil {
		t.Fatal(err)
	}
	if err := adminConn.DeleteForEveryone(ctx, conv, id); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	awaitDeletedForEveryone(t, "the owner", ownerConn, id)
	awaitDeletedForEveryone(t, "the sender", memberConn, id)

	awayConn = c.Login(t, 1, away, "w")
	page, err := awayConn.SyncInbox(ctx, rep.DialogCursor, rep.MailboxSeq, 50)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, e := range page.Events {
		var d protocol.DeleteRequest
		if e.EventType == protocol.EventDelete && e.MsgID.Int64() == id && json.Unmarshal(e.Payload, &d) == nil && d.ForEveryone {
			found++
		}
	}
	if found != 1 {
		t.Fatalf("the device that was away got %d DELETE for_everyone events of #%d, want 1: %+v", found, id, page.Events)
	}
	msgs, _, err := awayConn.SyncMessages(ctx, conv, 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	var tomb *protocol.Message
	for i := range msgs {
		if msgs[i].MsgID.Int64() == id {
			tomb = &msgs[i]
		}
	}
	if tomb == nil || tomb.Status != protocol.StatusDeleted || len(tomb.Content) != 0 {
		t.Fatalf("sync shows %+v, want a status-3 tombstone without content", tomb)
	}
	hist, err := api.GetHistory(actx, &logicv1.GetHistoryRequest{UserId: owner, ConversationId: conv, Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	var histTomb *logicv1.HistoryMessage
	for _, m := range hist.Messages {
		if m.MsgId == id {
			histTomb = m
		}
	}
	if histTomb == nil || histTomb.Status != protocol.StatusDeleted || histTomb.Content != "" {
		t.Fatalf("API history shows %v, want status 3 without content", histTomb)
	}

	// P2P: a participant may not; the business may.
	p2p, err := ownerConn.Send(ctx, sendTo(member, "p2p-1", text(t, "between us")))
	if err != nil {
		t.Fatal(err)
	}
	pconv, pid := p2p.ConversationID.Int64(), p2p.MsgID.Int64()
	if err := memberConn.DeleteForEveryone(ctx, pconv, pid); !hasCode(err, errcode.Forbidden) {
		t.Fatalf("delete for everyone in a P2P conversation: %v, want 40301", err)
	}
	if _, err := api.DeleteMessageForEveryone(actx, &logicv1.DeleteMessageForEveryoneRequest{MsgId: pid + 7, ConversationId: pconv}); status.Code(err) != codes.NotFound {
		t.Fatalf("API delete of an unknown id: %v, want NotFound", err)
	}
	r, err := api.DeleteMessageForEveryone(actx, &logicv1.DeleteMessageForEveryoneRequest{MsgId: pid})
	if err != nil || r.MsgId != pid || r.ConversationId != pconv {
		t.Fatalf("API delete: %v %v", r, err)
	}
	awaitDeletedForEveryone(t, "the P2P recipient", memberConn, pid)
	awaitDeletedForEveryone(t, "the P2P sender", ownerConn, pid)

	rcv.waitFor(t, "two message.deleted events", 30*time.Second, func() bool {
		n := 0
		for _, d := range rcv.delivered {
			if d.typ == "message.deleted" {
				n++
			}
		}
		return n >= 2
	})
	time.Sleep(time.Second) // a repeat would have been recorded by now
	rcv.mu.Lock()
	byMsg := map[string]map[string]any{}
	n := 0
	for _, d := range rcv.delivered {
		if d.typ == "message.deleted" {
			n++
			byMsg[d.data["msg_id"].(string)] = d.data
		}
	}
	rcv.mu.Unlock()
	gd, pd := byMsg[ack.MsgID.String()], byMsg[p2p.MsgID.String()]
	if n != 2 || gd == nil || pd == nil || gd["operator_id"] != "23102" || gd["group"] != true || gd["sender_id"] != "23103" ||
		pd["operator_id"] != "0" || pd["group"] != false {
		t.Fatalf("message.deleted events (%d): group %v, P2P %v", n, gd, pd)
	}
	rcv.checkClean(t)
}
