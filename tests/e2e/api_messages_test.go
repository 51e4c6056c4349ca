package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// nextControl waits for the next CONTROL_EVENT push on conn and returns
// its event type and payload.
func nextControl(t *testing.T, conn *client.Conn, timeout time.Duration) (int, json.RawMessage) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		f, err := framework.NextPush(conn, time.Until(deadline))
		if err != nil {
			t.Fatalf("no CONTROL_EVENT: %v", err)
		}
		if f.Command != protocol.CmdControlEvent {
			continue
		}
		env, err := f.Envelope()
		if err != nil {
			t.Fatal(err)
		}
		var ev struct {
			EventType int             `json:"event_type"`
			Payload   json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(env.Data, &ev); err != nil {
			t.Fatalf("control event %s: %v", env.Data, err)
		}
		return ev.EventType, ev.Payload
	}
}

// Changes made through the business API reach online devices as
// CONTROL_EVENT pushes (friends and groups), and the system account's
// messages reach a group's members as MESSAGE pushes from
// logic.system_user_id and show in GetHistory.
func TestBusinessAPIChangesAndSystemMessages(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2})
	ctx := metadata.AppendToOutgoingContext(ctxT(t, 2*time.Minute), "x-api-key", framework.APIKey)
	api := logicv1.NewApiClient(dialGRPC(t, c.Logics[0].GRPCAddr))
	const ann, ben = 33001, 33002
	annConn := c.Login(t, 0, ann, "phone")
	benConn := c.Login(t, 1, ben, "phone")

	if rep, err := api.AddFriend(ctx, &logicv1.FriendPair{UserId: ann, FriendId: ben}); err != nil || !rep.Changed {
		t.Fatalf("AddFriend %+v %v", rep, err)
	}
	for name, conn := range map[string]*client.Conn{"ann": annConn, "ben": benConn} {
		if typ, p := nextControl(t, conn, 10*time.Second); typ != protocol.EventFriend {
			t.Fatalf("%s: control event %d %s, want a friend event", name, typ, p)
		}
	}

	g, err := api.CreateGroup(ctx, &logicv1.CreateGroupRequest{OwnerId: ann, MemberIds: []int64{ben}, Name: "api"})
	if err != nil {
		t.Fatal(err)
	}
	if typ, p := nextControl(t, benConn, 10*time.Second); typ != protocol.EventMembership {
		t.Fatalf("ben: control event %d %s, want a membership event", typ, p)
	}
	sent, err := api.SendMessage(ctx, &logicv1.SendMessageRequest{System: true, GroupId: g.Group.GroupId, ClientMsgId: "sys-1",
		MessageType: 9, Content: `{"t":9,"text":"welcome"}`, NoOfflinePush: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, conn := range map[string]*client.Conn{"ann": annConn, "ben": benConn} {
		m, err := framework.NextMessage(conn, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m.MsgID.Int64() != sent.MsgId || m.SenderID.Int64() != 1 || m.ConversationID.Int64() != g.Group.ConversationId {
			t.Fatalf("%s: message %+v, want %d from the system account (1)", name, m, sent.MsgId)
		}
	}
	h, err := api.GetHistory(ctx, &logicv1.GetHistoryRequest{UserId: ben, ConversationId: g.Group.ConversationId})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Messages) != 1 || h.Messages[0].MsgId != sent.MsgId || h.Messages[0].SenderId != 1 || h.More {
		t.Fatalf("history %+v", h)
	}
}
