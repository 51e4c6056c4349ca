package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// replySnap is the reply_to snapshot of a message's content.
type replySnap struct {
	Reply *struct {
		MsgID       string `json:"msg_id"`
		SenderID    string `json:"sender_id"`
		MessageType int    `json:"message_type"`
		Text        string `json:"text"`
		Recalled    bool   `json:"recalled"`
	} `json:"reply_to"`
}

// TestReplyCarriesTheOriginalsSnapshotLiveAndBySyncAndShowsItRecalled: a
// reply is pushed and synced with the server's snapshot of the original;
// forged, foreign and client-written references are refused; once the
// original is recalled, a device catching up sees the reply's snapshot as
// recalled, without the quoted text.
func TestReplyCarriesTheOriginalsSnapshotLiveAndBySyncAndShowsItRecalled(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4, LogicEnv: []string{"IM_LOGIC_RECALL_WINDOW=1m"}})
	ctx := ctxT(t, 2*time.Minute)
	a := c.Login(t, 0, 24101, "a")
	b := c.Login(t, 1, 24102, "b")
	_ = c.Login(t, 1, 24103, "c")
	bOff := c.Login(t, 0, 24102, "b-off")
	rep := framework.NewReplica()
	if err := rep.Sync(ctx, bOff); err != nil {
		t.Fatal(err)
	}
	_ = bOff.Close()
	orig, err := a.Send(ctx, sendTo(24102, "rp-orig", text(t, "lunch at noon?")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nextMessage(b, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	conv, oid := orig.ConversationID.Int64(), orig.MsgID.Int64()
	other, err := a.Send(ctx, sendTo(24103, "rp-other", text(t, "elsewhere")))
	if err != nil {
		t.Fatal(err)
	}

	reply := func(cmid string, to int64, content json.RawMessage) protocol.SendRequest {
		r := sendTo(24101, cmid, content)
		r.ReplyTo = jsonid.ID(to)
		return r
	}
	for _, tc := range []struct {
		name string
		req  protocol.SendRequest
		code errcode.Code
	}{
		{"a forged id", reply("rp-bad-1", oid+12345, text(t, "x")), errcode.NotFound},
		{"a message of another conversation", reply("rp-bad-2", other.MsgID.Int64(), text(t, "x")), errcode.NotFound},
		{"a negative id", reply("rp-bad-3", -1, text(t, "x")), errcode.InvalidArgument},
		{"a client-written snapshot", reply("rp-bad-4", oid, json.RawMessage(`{"t":1,"text":"x","reply_to":{"msg_id":"1","text":"forged"}}`)), errcode.InvalidArgument},
	} {
		if _, err := b.Send(ctx, tc.req); !hasCode(err, tc.code) {
			t.Fatalf("reply to %s: %v, want %s", tc.name, err, tc.code)
		}
	}

	ack, err := b.Send(ctx, reply("rp-1", oid, text(t, "yes")))
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.Send(ctx, reply("rp-1", oid, text(t, "yes")))
	if err != nil || again.MsgID != ack.MsgID {
		t.Fatalf("retry of a reply: %+v, %v; want the original ack %s", again, err, ack.MsgID)
	}
	pushed, err := nextMessage(a, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var s replySnap
	if err := json.Unmarshal(pushed.Content, &s); err != nil || s.Reply == nil {
		t.Fatalf("pushed reply content %s: %v", pushed.Content, err)
	}
	if s.Reply.MsgID != orig.MsgID.String() || s.Reply.SenderID != "24101" || s.Reply.Text != "lunch at noon?" || s.Reply.MessageType != 1 {
		t.Fatalf("pushed snapshot %+v", *s.Reply)
	}

	if err := a.Recall(ctx, conv, oid); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Send(ctx, reply("rp-2", oid, text(t, "late"))); !hasCode(err, errcode.NotFound) {
		t.Fatalf("reply to a recalled message: %v, want 40401", err)
	}
	if again, err := b.Send(ctx, reply("rp-1", oid, text(t, "yes"))); err != nil || again.MsgID != ack.MsgID {
		t.Fatalf("retry of a reply after its original's recall: %+v, %v; want the original ack %s", again, err, ack.MsgID)
	}
	bOff = c.Login(t, 0, 24102, "b-off")
	if err := rep.Sync(ctx, bOff); err != nil {
		t.Fatal(err)
	}
	msgs, _, err := bOff.SyncMessages(ctx, conv, 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	var got *protocol.Message
	for i := range msgs {
		if msgs[i].MsgID == ack.MsgID {
			got = &msgs[i]
		}
	}
	if got == nil {
		t.Fatalf("the device that was away did not sync the reply: %+v", msgs)
	}
	s = replySnap{}
	if err := json.Unmarshal(got.Content, &s); err != nil || s.Reply == nil || !s.Reply.Recalled || s.Reply.Text != "" || s.Reply.MsgID != orig.MsgID.String() {
		t.Fatalf("synced reply after the recall: %s", got.Content)
	}
}

// TestIMCliReplyQuotesTheOriginalInHistory: imcli's /reply sends a reply
// and /history shows it with its quote.
func TestIMCliReplyQuotesTheOriginalInHistory(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 1, Partitions: 2})
	ctx := ctxT(t, 2*time.Minute)
	a := c.Login(t, 0, 24201, "a")
	_ = c.Login(t, 0, 24202, "b-probe")
	orig, err := a.Send(ctx, sendTo(24202, "cli-orig", text(t, "see you at ten")))
	if err != nil {
		t.Fatal(err)
	}
	out := runIMCli(t, ctx, c, 24202, filepath.Join(t.TempDir(), "state.json"),
		fmt.Sprintf("/reply %d %d fine by me\n/history %d\n", orig.ConversationID, orig.MsgID, orig.ConversationID))
	inOrder(t, out, fmt.Sprintf("[re #%d 24201: see you at ten] fine by me", orig.MsgID))
}

// TestIMCliReactsAndHistoryShowsTheCounts: imcli's /react adds a
// reaction, a reaction made while away shows as an event of the sync,
// /history shows each message's counts with the user's own marked, and
// /reactors lists who reacted.
func TestIMCliReactsAndHistoryShowsTheCounts(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 1, Partitions: 2})
	ctx := ctxT(t, 2*time.Minute)
	a := c.Login(t, 0, 24211, "a")
	_ = c.Login(t, 0, 24212, "b-probe")
	orig, err := a.Send(ctx, sendTo(24212, "cli-react", text(t, "ship it?")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.React(ctx, orig.ConversationID.Int64(), orig.MsgID.Int64(), "❤️"); err != nil {
		t.Fatal(err)
	}
	out := runIMCli(t, ctx, c, 24212, filepath.Join(t.TempDir(), "state.json"),
		fmt.Sprintf("/react %d 👍\n/history %d\n/reactors %d ❤️\n", orig.MsgID, orig.ConversationID, orig.MsgID))
	inOrder(t, out, fmt.Sprintf("#%d 24211 reacted ❤️ (1)", orig.MsgID), fmt.Sprintf("#%d 👍 1", orig.MsgID), "ship it?  [❤️ 1 👍 1*]",
		fmt.Sprintf("#%d ❤️ 1: 24211", orig.MsgID))
}

// TestAPIReplyInAGroupShowsTheSnapshotThenRecalledInHistory: the business
// API's SendMessage takes reply_to in a group, GetHistory carries the
// snapshot, a reference outside the group is NOT_FOUND, and once the
// original is deleted for everyone the history's snapshot is recalled.
func TestAPIReplyInAGroupShowsTheSnapshotThenRecalledInHistory(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 1, Partitions: 2})
	ctx := ctxT(t, 2*time.Minute)
	api, actx := apiClient(t, c, ctx)
	const owner, member = int64(24301), int64(24302)
	for _, u := range []int64{owner, member} {
		if _, err := api.UpsertUser(actx, &logicv1.UpsertUserRequest{UserId: u}); err != nil {
			t.Fatal(err)
		}
	}
	g, err := api.CreateGroup(actx, &logicv1.CreateGroupRequest{OwnerId: owner, MemberIds: []int64{member}, Name: "replies"})
	if err != nil {
		t.Fatal(err)
	}
	send := func(from int64, cmid, text string, replyTo int64) (*logicv1.SendMessageReply, error) {
		return api.SendMessage(actx, &logicv1.SendMessageRequest{SenderId: from, GroupId: g.Group.GroupId, ClientMsgId: cmid,
			MessageType: 1, Content: `{"t":1,"text":"` + text + `"}`, ReplyTo: replyTo})
	}
	orig, err := send(owner, "api-orig", "agenda attached", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := send(member, "api-bad", "x", orig.MsgId+999); status.Code(err) != codes.NotFound {
		t.Fatalf("API reply to a forged id: %v, want NOT_FOUND", err)
	}
	rep, err := send(member, "api-reply", "thanks", orig.MsgId)
	if err != nil {
		t.Fatal(err)
	}
	snapOf := func() replySnap {
		t.Helper()
		h, err := api.GetHistory(actx, &logicv1.GetHistoryRequest{UserId: owner, ConversationId: orig.ConversationId, Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range h.Messages {
			if m.MsgId == rep.MsgId {
				var s replySnap
				if err := json.Unmarshal([]byte(m.Content), &s); err != nil || s.Reply == nil {
					t.Fatalf("history content of the reply %s: %v", m.Content, err)
				}
				return s
			}
		}
		t.Fatalf("history lacks the reply #%d", rep.MsgId)
		return replySnap{}
	}
	if s := snapOf(); s.Reply.Text != "agenda attached" || s.Reply.SenderID != "24301" || s.Reply.Recalled {
		t.Fatalf("history snapshot %+v", *s.Reply)
	}
	if _, err := api.DeleteMessageForEveryone(actx, &logicv1.DeleteMessageForEveryoneRequest{MsgId: orig.MsgId}); err != nil {
		t.Fatal(err)
	}
	if s := snapOf(); !s.Reply.Recalled || s.Reply.Text != "" {
		t.Fatalf("history snapshot after the original's deletion %+v", *s.Reply)
	}
}
