package message_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/pkg/errcode"
)

// Every rule of a reaction change, in order, on one P2P message: the
// emoji check, membership, duplicates, the per-user and per-message caps,
// removes (of one held and of one not held) and a recalled message.
func TestReactionRulesAndCaps(t *testing.T) {
	e := newEnv(t)
	svc, _ := e.service(t, 31, message.Config{ReactionKinds: 3, ReactionsPerUser: 2})
	u := e.users(t, 4)
	a, b, c, stranger := u[0], u[1], u[2], u[3]
	ctx := context.Background()
	send := func(from, to int64, id string) *message.Ack {
		ack, err := svc.Send(ctx, message.Sender{UserID: from, DeviceID: "d"}, sendReq(body("to_user_id", fmt.Sprint(to), "client_msg_id", id, "message_type", 1, "content", text("hi"))))
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	ack := send(a, b, "r1")
	gone := send(a, b, "r2")
	if _, err := svc.Recall(ctx, message.Sender{UserID: a, DeviceID: "d"}, message.MessageRef{MsgID: gone.MsgID}); err != nil {
		t.Fatal(err)
	}
	_ = send(a, c, "r3")
	react := func(who int64, emoji string, add bool) (*message.Reaction, error) {
		return svc.React(ctx, message.Sender{UserID: who, DeviceID: "d"}, message.ReactionRequest{MsgID: ack.MsgID, Emoji: emoji, Add: add})
	}
	tests := []struct {
		name      string
		who       int64
		msgID     int64
		emoji     string
		add       bool
		want      errcode.Code
		wantCount int
		changed   bool
	}{
		{"text is not an emoji", a, ack.MsgID, "ok", true, errcode.InvalidArgument, 0, false},
		{"two emojis are not one", a, ack.MsgID, "👍👍", true, errcode.InvalidArgument, 0, false},
		{"no message id", a, 0, "👍", true, errcode.InvalidArgument, 0, false},
		{"forged message id", a, 123456789, "👍", true, errcode.NotFound, 0, false},
		{"not a member", stranger, ack.MsgID, "👍", true, errcode.Forbidden, 0, false},
		{"member of another conversation of the sender", c, ack.MsgID, "👍", true, errcode.Forbidden, 0, false},
		{"recalled message", b, gone.MsgID, "👍", true, errcode.Forbidden, 0, false},
		{"first reaction", b, ack.MsgID, "👍", true, errcode.OK, 1, true},
		{"the same emoji again", b, ack.MsgID, "👍", true, errcode.Duplicate, 0, false},
		{"another user, same emoji", a, ack.MsgID, "👍", true, errcode.OK, 2, true},
		{"a second emoji", b, ack.MsgID, "❤️", true, errcode.OK, 1, true},
		{"past reactions_per_user", b, ack.MsgID, "🎉", true, errcode.LimitReached, 0, false},
		{"a third kind", a, ack.MsgID, "😂", true, errcode.OK, 1, true},
		{"past reaction_kinds", a, ack.MsgID, "🔥", true, errcode.LimitReached, 0, false},
		{"remove one held", b, ack.MsgID, "👍", false, errcode.OK, 1, true},
		{"remove it again changes nothing", b, ack.MsgID, "👍", false, errcode.OK, 1, false},
		{"remove an emoji nobody used", b, ack.MsgID, "🔥", false, errcode.OK, 0, false},
		{"room for another of b's now", b, ack.MsgID, "👍", true, errcode.OK, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := svc.React(ctx, message.Sender{UserID: tt.who, DeviceID: "d"}, message.ReactionRequest{MsgID: tt.msgID, Emoji: tt.emoji, Add: tt.add})
			if got := code(err); got != tt.want {
				t.Fatalf("code %s (%v), want %s", got, err, tt.want)
			}
			if err == nil && (r.Count != tt.wantCount || r.Changed != tt.changed) {
				t.Fatalf("count %d changed %v, want %d %v", r.Count, r.Changed, tt.wantCount, tt.changed)
			}
		})
	}
	page, err := svc.Reactions(ctx, a, ack.ConversationID, []int64{ack.MsgID, gone.MsgID, 999}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 1 || page.Messages[0].MsgID != ack.MsgID {
		t.Fatalf("get answered %+v", page.Messages)
	}
	var got []string
	for _, c := range page.Messages[0].Counts {
		got = append(got, fmt.Sprintf("%s%d%v", c.Emoji, c.Count, c.Me))
	}
	// In first-use order; 👍 was removed and added again but never went to 0.
	if want := "[👍2true ❤️1false 😂1true]"; fmt.Sprint(got) != want {
		t.Fatalf("a's counts %v, want %s", got, want)
	}
	if _, err := svc.Reactions(ctx, stranger, ack.ConversationID, []int64{ack.MsgID}, 0); code(err) != errcode.Forbidden {
		t.Fatalf("a stranger's get: %v", err)
	}
	users, err := svc.Reactors(ctx, c, message.MessageRef{MsgID: ack.MsgID}, "👍", 0, 1)
	if code(err) != errcode.Forbidden {
		t.Fatalf("a non-member's users: %v %+v", err, users)
	}
	users, err = svc.Reactors(ctx, b, message.MessageRef{MsgID: ack.MsgID}, "👍", 0, 1)
	if err != nil || users.Count != 2 || len(users.Users) != 1 || !users.More || users.Users[0].UserID != min(a, b) {
		t.Fatalf("first page of one: %+v %v", users, err)
	}
	users, err = svc.Reactors(ctx, b, message.MessageRef{MsgID: ack.MsgID}, "👍", users.Next, 1)
	if err != nil || len(users.Users) != 1 || users.More || users.Users[0].UserID != max(a, b) {
		t.Fatalf("second page: %+v %v", users, err)
	}
	if _, err := react(a, "👍", true); code(err) != errcode.Duplicate {
		t.Fatalf("a's second 👍: %v", err)
	}
}

// Concurrent adds of new emojis to one message by many members cannot
// pass logic.reaction_kinds together: the message row is the lock.
func TestConcurrentReactionsKeepTheKindsCap(t *testing.T) {
	e := newEnv(t)
	svc, _ := e.service(t, 32, message.Config{ReactionKinds: 3, ReactionsPerUser: 3})
	u := e.users(t, 2)
	a, b := u[0], u[1]
	ctx := context.Background()
	ack, err := svc.Send(ctx, message.Sender{UserID: a, DeviceID: "d"}, sendReq(body("to_user_id", fmt.Sprint(b), "client_msg_id", "c1", "message_type", 1, "content", text("hi"))))
	if err != nil {
		t.Fatal(err)
	}
	emojis := []string{"👍", "❤️", "😂", "🎉", "🔥", "👀"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[errcode.Code]int{}
	for i, em := range emojis {
		wg.Add(1)
		go func(who int64, em string) {
			defer wg.Done()
			_, err := svc.React(ctx, message.Sender{UserID: who, DeviceID: "d"}, message.ReactionRequest{MsgID: ack.MsgID, Emoji: em, Add: true})
			mu.Lock()
			codes[code(err)]++
			mu.Unlock()
		}(u[i%2], em)
	}
	wg.Wait()
	if codes[errcode.OK] != 3 || codes[errcode.LimitReached] != 3 {
		t.Fatalf("outcomes %v, want 3 added and 3 refused 40303", codes)
	}
	page, err := svc.Reactions(ctx, b, ack.ConversationID, []int64{ack.MsgID}, 0)
	if err != nil || len(page.Messages) != 1 || len(page.Messages[0].Counts) != 3 {
		t.Fatalf("counts after the race: %+v %v", page, err)
	}
}
