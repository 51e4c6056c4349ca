package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/tests/framework"
)

// controlPayload is what the CONTROL_EVENT pushes of this test carry: a
// friend event's kind and peer, or a membership event's action and group.
type controlPayload struct {
	Kind    string    `json:"kind"`
	UserID  jsonid.ID `json:"user_id"`
	Action  string    `json:"action"`
	GroupID jsonid.ID `json:"group_id"`
}

// awaitControl waits for a CONTROL_EVENT push on conn for which match is
// true, skipping every other push (and other control events).
func awaitControl(t *testing.T, conn *client.Conn, what string, match func(client.ControlEvent, controlPayload) bool) client.ControlEvent {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case f, ok := <-conn.Pushes():
			if !ok {
				t.Fatalf("%s: connection closed: %v", what, conn.Err())
			}
			if f.Command != protocol.CmdControlEvent || !f.IsPush() {
				continue
			}
			ev, err := f.ControlEvent()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			var p controlPayload
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				t.Fatalf("%s: payload %s: %v", what, ev.Payload, err)
			}
			if match(ev, p) {
				return ev
			}
		case <-deadline:
			t.Fatalf("%s: no CONTROL_EVENT within 15 s", what)
		}
	}
}

// Users manage friends and a group entirely over the client protocol
// (RELATION 19, GROUP 20), no business API involved: a friend request and
// its acceptance reach the other side as CONTROL_EVENT pushes; a group
// created by A carries C's message to A and B; a member A removes gets a
// CONTROL_EVENT and no further messages, and can no longer send.
func TestClientProtocolFriendsAndGroups(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2})
	ctx := ctxT(t, 2*time.Minute)
	const a, b, cu = int64(43001), int64(43002), int64(43003)
	connA := c.Login(t, 0, a, "d")
	connB := c.Login(t, 1, b, "d")
	connC := c.Login(t, 0, cu, "d")

	// Friends: A asks, B is told and accepts, A is told.
	if changed, err := connA.RequestFriend(ctx, b, "hi, it's A"); err != nil || !changed {
		t.Fatalf("request: changed %v, %v", changed, err)
	}
	awaitControl(t, connB, "B told of A's request", func(ev client.ControlEvent, p controlPayload) bool {
		return ev.EventType == protocol.EventFriend && p.Kind == "request" && p.UserID.Int64() == a
	})
	reqs, err := connB.FriendRequests(ctx, 0, 0)
	if err != nil || len(reqs.Requests) != 1 || reqs.Requests[0].UserID.Int64() != a || reqs.Requests[0].Note != "hi, it's A" {
		t.Fatalf("B's requests %+v, %v", reqs, err)
	}
	if changed, err := connB.AcceptFriend(ctx, a); err != nil || !changed {
		t.Fatalf("accept: changed %v, %v", changed, err)
	}
	awaitControl(t, connA, "A told B accepted", func(ev client.ControlEvent, p controlPayload) bool {
		return ev.EventType == protocol.EventFriend && p.Kind == "accepted" && p.UserID.Int64() == b
	})
	friends, err := connA.Friends(ctx, 0, 0)
	if err != nil || len(friends.Friends) != 1 || friends.Friends[0].UserID.Int64() != b {
		t.Fatalf("A's friends %+v, %v", friends, err)
	}

	// A group of A, B and C, created by A; C's message reaches A and B.
	g, err := connA.CreateGroup(ctx, client.NewGroup{Name: "trio", MemberIDs: []int64{b, cu}})
	if err != nil {
		t.Fatal(err)
	}
	gid, cid := g.Group.GroupID.Int64(), g.Group.ConversationID.Int64()
	if g.Group.OwnerID.Int64() != a || g.Group.MemberCount != 3 {
		t.Fatalf("created %+v", g)
	}
	members, err := connB.GroupMembers(ctx, gid, 0, 0)
	if err != nil || len(members.Members) != 3 {
		t.Fatalf("members %+v, %v", members, err)
	}
	ack, err := connC.SendGroupText(ctx, gid, "hello from C")
	if err != nil {
		t.Fatal(err)
	}
	if ack.ConversationID.Int64() != cid {
		t.Fatalf("sent into %d, the group's conversation is %d", ack.ConversationID, cid)
	}
	for who, conn := range map[string]*client.Conn{"A": connA, "B": connB} {
		m, err := framework.NextMessage(conn, 10*time.Second)
		if err != nil || m.MsgID != ack.MsgID || m.SenderID.Int64() != cu || m.ConversationType != protocol.ConversationGroup {
			t.Fatalf("%s got %+v, %v; want C's message %d", who, m, err, ack.MsgID)
		}
	}

	// A removes C: C is told, sends no more and receives no more.
	if ch, err := connA.RemoveGroupMembers(ctx, gid, []int64{cu}); err != nil || !ch.Changed || len(ch.Removed) != 1 {
		t.Fatalf("remove: %+v, %v", ch, err)
	}
	awaitControl(t, connC, "C told of the removal", func(ev client.ControlEvent, p controlPayload) bool {
		return ev.EventType == protocol.EventMembership && ev.ConversationID.Int64() == cid &&
			p.Action == "removed" && p.GroupID.Int64() == gid
	})
	if _, err := connC.SendGroupText(ctx, gid, "still here?"); !hasCode(err, errcode.Forbidden) {
		t.Fatalf("a removed member's send: %v", err)
	}
	if _, err := connC.GroupInfo(ctx, gid); !hasCode(err, errcode.Forbidden) {
		t.Fatalf("a removed member reads the group: %v", err)
	}
	drain(connC)
	after, err := connA.SendGroupText(ctx, gid, "just us now")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := framework.NextMessage(connB, 10*time.Second); err != nil || m.MsgID != after.MsgID {
		t.Fatalf("B got %+v, %v; want %d", m, err, after.MsgID)
	}
	if got := pushedIDs(connC, cid, 1, time.Second); len(got) != 0 {
		t.Fatalf("the removed member still got %v", got)
	}
	// Nor does the group come back in C's list.
	page, err := connC.SyncInbox(ctx, "0", "0", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, cv := range page.Conversations {
		if cv.ConversationID.Int64() == cid {
			t.Fatalf("the group is in the removed member's list: %s", fmt.Sprint(cv))
		}
	}
}
