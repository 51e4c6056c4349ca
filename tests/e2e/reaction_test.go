package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
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

// reactionPush waits for the next REACTION push about msgID on conn,
// skipping those about other messages.
func reactionPush(t *testing.T, conn *client.Conn, msgID int64) protocol.ReactionPush {
	t.Helper()
	for {
		f := nextPushOf(t, conn, protocol.CmdReaction, 15*time.Second)
		env, err := f.Envelope()
		if err != nil {
			t.Fatal(err)
		}
		var p protocol.ReactionPush
		if err := json.Unmarshal(env.Data, &p); err != nil {
			t.Fatalf("reaction push %s: %v", env.Data, err)
		}
		if p.MsgID.Int64() == msgID {
			return p
		}
	}
}

// countsText renders a get answer's counts of one message as
// "emoji count[*]" in the server's order, * marking the caller's own.
func countsText(ms []protocol.MessageReactions, msgID int64) string {
	for _, m := range ms {
		if m.MsgID.Int64() == msgID {
			parts := make([]string, 0, len(m.Reactions))
			for _, r := range m.Reactions {
				p := fmt.Sprintf("%s %d", r.Emoji, r.Count)
				if r.Me {
					p += "*"
				}
				parts = append(parts, p)
			}
			return strings.Join(parts, ", ")
		}
	}
	return ""
}

// TestReactionsLiveBySyncInGroupsAndTheCaps: a member's reaction reaches
// the other member's and the actor's other devices live; an offline
// device catches up by sync (REACTION events, then get); duplicates are
// 40902 and the per-user and per-message caps 40303, refusals and forged
// or foreign ids change nothing; removes are safe to repeat; the paged
// list of who reacted; a recalled message shows none and takes none; in a
// group deliver carries the change to every member's mailbox, and the API adds, lists and pages reactions and GetHistory
// carries them.
func TestReactionsLiveBySyncInGroupsAndTheCaps(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2,
		LogicEnv: []string{"IM_LOGIC_REACTION_KINDS=3", "IM_LOGIC_REACTIONS_PER_USER=2"}})
	ctx := ctxT(t, 2*time.Minute)
	const alice, bob, carol = int64(25101), int64(25102), int64(25103)
	a := c.Login(t, 0, alice, "a")
	a2 := c.Login(t, 1, alice, "a2")
	b := c.Login(t, 1, bob, "b")
	bOff := c.Login(t, 0, bob, "b-off")
	rep := framework.NewReplica()
	if err := rep.Sync(ctx, bOff); err != nil {
		t.Fatal(err)
	}
	_ = bOff.Close()

	ack, err := a.Send(ctx, sendTo(bob, "re-1", text(t, "lunch?")))
	if err != nil {
		t.Fatal(err)
	}
	cid, mid := ack.ConversationID.Int64(), ack.MsgID.Int64()
	r, err := b.React(ctx, 0, mid, "👍")
	if err != nil || r.Count != 1 || !r.Changed || r.ConversationID.Int64() != cid {
		t.Fatalf("bob's 👍: %+v, %v", r, err)
	}
	for _, who := range []struct {
		name string
		conn *client.Conn
	}{{"the sender", a}, {"the sender's other device", a2}} {
		if p := reactionPush(t, who.conn, mid); p.MsgID.Int64() != mid || p.UserID.Int64() != bob || p.Emoji != "👍" || !p.Added || p.Count != 1 {
			t.Fatalf("%s got %+v", who.name, p)
		}
	}
	if _, err := a.React(ctx, cid, mid, "👍"); err != nil {
		t.Fatal(err)
	}
	if p := reactionPush(t, b, mid); p.UserID.Int64() != alice || p.Count != 2 {
		t.Fatalf("bob got %+v, want alice's 👍 making 2", p)
	}
	if _, err := a.React(ctx, cid, mid, "❤️"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.React(ctx, cid, mid, "😂"); err != nil {
		t.Fatal(err)
	}

	// Refusals change nothing.
	stranger := c.Login(t, 1, carol, "c")
	for _, tc := range []struct {
		name  string
		conn  *client.Conn
		msg   int64
		emoji string
		code  errcode.Code
	}{
		{"the same emoji again", b, mid, "👍", errcode.Duplicate},
		{"past reactions_per_user (bob has two)", b, mid, "🎉", errcode.LimitReached},
		{"past reaction_kinds (three on the message)", a, mid, "🔥", errcode.LimitReached},
		{"text for an emoji", a, mid, "lol", errcode.InvalidArgument},
		{"two emojis", a, mid, "👍👍", errcode.InvalidArgument},
		{"an emoji over 32 bytes", a, mid, strings.Repeat("👨\u200d", 8) + "👨", errcode.InvalidArgument},
		{"a forged message id", a, mid + 999, "👍", errcode.NotFound},
		{"a negative id", a, -mid, "👍", errcode.InvalidArgument},
		{"a user outside the conversation", stranger, mid, "👍", errcode.Forbidden},
	} {
		if _, err := tc.conn.React(ctx, cid, tc.msg, tc.emoji); !hasCode(err, tc.code) {
			t.Errorf("reaction with %s: %v, want %s", tc.name, err, tc.code)
		}
	}
	if _, err := stranger.Reactions(ctx, cid, []int64{mid}); !hasCode(err, errcode.Forbidden) {
		t.Errorf("a stranger's get: %v, want 40301", err)
	}
	if n := c.CountRows("SELECT COUNT(*) FROM t_reactions WHERE msg_id = ?", mid); n != 4 {
		t.Fatalf("%d reaction rows after the refusals, want 4", n)
	}

	// Remove, twice: the second changes nothing.
	if r, err := b.Unreact(ctx, cid, mid, "😂"); err != nil || !r.Changed || r.Count != 0 {
		t.Fatalf("unreact: %+v, %v", r, err)
	}
	if r, err := b.Unreact(ctx, cid, mid, "😂"); err != nil || r.Changed || r.Count != 0 {
		t.Fatalf("unreact again: %+v, %v", r, err)
	}

	// The offline device catches up; get marks bob's own.
	bBack := c.Login(t, 0, bob, "b-off")
	if err := rep.Sync(ctx, bBack); err != nil {
		t.Fatal(err)
	}
	if got := rep.ReactionsOf(mid); got != "❤️ 1, 👍 2" {
		t.Fatalf("the device that was offline shows %q", got)
	}
	got, err := bBack.Reactions(ctx, cid, []int64{mid, mid + 999})
	if err != nil || countsText(got, mid) != "👍 2*, ❤️ 1" || len(got) != 1 {
		t.Fatalf("bob's get: %+v, %v", got, err)
	}
	page, err := a.Reactors(ctx, cid, mid, "👍", 0, 1)
	if err != nil || page.Count != 2 || len(page.Users) != 1 || !page.More || page.Users[0].UserID.Int64() != alice {
		t.Fatalf("first page of who reacted 👍: %+v, %v", page, err)
	}
	page, err = a.Reactors(ctx, cid, mid, "👍", page.Next.Int64(), 1)
	if err != nil || len(page.Users) != 1 || page.More || page.Users[0].UserID.Int64() != bob {
		t.Fatalf("second page: %+v, %v", page, err)
	}

	// A recalled message shows no reactions and takes none.
	if err := a.Recall(ctx, cid, mid); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Reactions(ctx, cid, []int64{mid}); err != nil || len(got) != 0 {
		t.Fatalf("get of a recalled message: %+v, %v", got, err)
	}
	if _, err := b.React(ctx, cid, mid, "😮"); !hasCode(err, errcode.Forbidden) {
		t.Errorf("reaction to a recalled message: %v, want 40301", err)
	}

	// A group: deliver carries the change; the lists stay; the API.
	api, actx := apiClient(t, c, ctx)
	for _, u := range []int64{alice, bob, carol} {
		if _, err := api.UpsertUser(actx, &logicv1.UpsertUserRequest{UserId: u}); err != nil {
			t.Fatal(err)
		}
	}
	g, err := api.CreateGroup(actx, &logicv1.CreateGroupRequest{OwnerId: alice, MemberIds: []int64{bob, carol}, Name: "reactions"})
	if err != nil {
		t.Fatal(err)
	}
	gack, err := a.Send(ctx, sendToGroup(g.Group.GroupId, "re-g", text(t, "vote: pizza?")))
	if err != nil {
		t.Fatal(err)
	}
	gcid, gmid := gack.ConversationID.Int64(), gack.MsgID.Int64()
	if err := rep.Sync(ctx, bBack); err != nil {
		t.Fatal(err)
	}
	_ = bBack.Close()
	if _, err := stranger.React(ctx, gcid, gmid, "🍕"); err != nil {
		t.Fatal(err)
	}
	if p := reactionPush(t, a, gmid); p.MsgID.Int64() != gmid || p.UserID.Int64() != carol || p.Emoji != "🍕" {
		t.Fatalf("the group's sender got %+v", p)
	}
	ar, err := api.AddReaction(actx, &logicv1.ReactionRequest{UserId: bob, MsgId: gmid, Emoji: "🍕"})
	if err != nil || ar.Count != 2 || !ar.Changed || ar.ConversationId != gcid {
		t.Fatalf("API AddReaction: %+v, %v", ar, err)
	}
	if _, err := api.AddReaction(actx, &logicv1.ReactionRequest{UserId: bob, MsgId: gmid, Emoji: "🍕"}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("API duplicate: %v, want ALREADY_EXISTS", err)
	}
	if _, err := api.AddReaction(actx, &logicv1.ReactionRequest{UserId: bob, MsgId: gmid, Emoji: "pizza"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("API text emoji: %v, want INVALID_ARGUMENT", err)
	}
	lr, err := api.ListReactions(actx, &logicv1.ListReactionsRequest{UserId: bob, ConversationId: gcid, MsgIds: []int64{gmid}})
	if err != nil || len(lr.Messages) != 1 || len(lr.Messages[0].Reactions) != 1 || lr.Messages[0].Reactions[0].Count != 2 || !lr.Messages[0].Reactions[0].Me {
		t.Fatalf("API ListReactions: %+v, %v", lr, err)
	}
	h, err := api.GetHistory(actx, &logicv1.GetHistoryRequest{UserId: alice, ConversationId: gcid})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range h.Messages {
		if m.MsgId == gmid && (len(m.Reactions) != 1 || m.Reactions[0].Emoji != "🍕" || m.Reactions[0].Count != 2 || m.Reactions[0].Me) {
			t.Fatalf("GetHistory reactions for alice: %+v", m.Reactions)
		}
	}
	who, err := api.ListReactors(actx, &logicv1.ListReactorsRequest{UserId: alice, MsgId: gmid, Emoji: "🍕"})
	if err != nil || who.Count != 2 || len(who.Users) != 2 || who.Users[0].UserId != bob || who.Users[1].UserId != carol {
		t.Fatalf("API ListReactors: %+v, %v", who, err)
	}
	// Bob's device that was away learns of both group reactions by sync.
	bLast := c.Login(t, 0, bob, "b-off")
	deadline := time.Now().Add(15 * time.Second)
	for rep.ReactionsOf(gmid) != "🍕 2" && time.Now().Before(deadline) {
		if err := rep.Sync(ctx, bLast); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := rep.ReactionsOf(gmid); got != "🍕 2" {
		t.Fatalf("the group message on bob's device that was away: %q", got)
	}
	if n := c.CountRows("SELECT COUNT(*) FROM t_mailbox_events WHERE msg_id = ? AND event_type = 8", gmid); n != 6 {
		t.Fatalf("%d REACTION mailbox events for the group message, want 2 changes × 3 members", n)
	}
}
