package conversation_test

import (
	"context"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/conversation"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/protocol"
)

func code(err error) errcode.Code {
	c, _ := errcode.Of(err)
	return c
}

// refuseAll is a P2P policy that refuses every pair.
type refuseAll struct{}

func (refuseAll) CheckP2P(context.Context, int64, int64) error {
	return errcode.New(errcode.Forbidden, "refused")
}

func TestResolveAndOpen(t *testing.T) {
	_, db := testenv.MySQL(t)
	st := store.New(db)
	ctx := context.Background()
	gen, err := msgid.New(ctx, msgid.Settings{MachineID: 61})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	a, b, c, ghost := testenv.RandomUserID(), testenv.RandomUserID(), testenv.RandomUserID(), testenv.RandomUserID()
	for _, u := range []int64{a, b, c} {
		if err := st.EnsureUser(ctx, u, now); err != nil {
			t.Fatal(err)
		}
	}
	r := conversation.NewResolver(st, gen.Next, nil, nil)
	ab, err := st.GetOrCreateP2P(ctx, a, b, gen.Next)
	if err != nil {
		t.Fatal(err)
	}

	resolveTests := []struct {
		name    string
		from    int64
		target  conversation.Target
		want    errcode.Code
		wantID  int64
		wantErr string
	}{
		{"no target", a, conversation.Target{}, errcode.InvalidArgument, 0, ""},
		{"two targets", a, conversation.Target{UserID: b, ConversationID: ab}, errcode.InvalidArgument, 0, ""},
		{"group without a group directory", a, conversation.Target{GroupID: 5}, errcode.NotFound, 0, ""},
		{"to self", a, conversation.Target{UserID: a}, errcode.InvalidArgument, 0, ""},
		{"negative user", a, conversation.Target{UserID: -1}, errcode.InvalidArgument, 0, ""},
		{"negative conversation", a, conversation.Target{ConversationID: -1}, errcode.InvalidArgument, 0, ""},
		{"unknown conversation", a, conversation.Target{ConversationID: 12345}, errcode.NotFound, 0, ""},
		{"pair that talked", a, conversation.Target{UserID: b}, errcode.OK, ab, ""},
		{"the same pair from the other side", b, conversation.Target{UserID: a}, errcode.OK, ab, ""},
		{"pair that never talked resolves without an id", a, conversation.Target{UserID: c}, errcode.OK, 0, ""},
		{"by conversation id", c, conversation.Target{ConversationID: ab}, errcode.OK, ab, ""},
	}
	for _, tt := range resolveTests {
		t.Run("resolve "+tt.name, func(t *testing.T) {
			got, err := r.Resolve(ctx, tt.from, tt.target)
			if code(err) != tt.want {
				t.Fatalf("code %s (%v), want %s", code(err), err, tt.want)
			}
			if err == nil && (got.ID != tt.wantID || got.Type != protocol.ConversationP2P) {
				t.Fatalf("resolved %+v, want id %d", got, tt.wantID)
			}
		})
	}

	// Open: membership, the policy, and creation on a pair's first message.
	byID, _ := r.Resolve(ctx, c, conversation.Target{ConversationID: ab})
	if _, err := r.Open(ctx, conversation.Sender{UserID: c}, byID, now); code(err) != errcode.Forbidden {
		t.Fatalf("a stranger opened the pair's conversation: %v", err)
	}
	toGhost, _ := r.Resolve(ctx, a, conversation.Target{UserID: ghost})
	if _, err := r.Open(ctx, conversation.Sender{UserID: a}, toGhost, now); code(err) != errcode.Forbidden {
		t.Fatalf("opened a conversation with an unknown user: %v", err)
	}
	fresh, _ := r.Resolve(ctx, a, conversation.Target{UserID: c})
	opened, err := r.Open(ctx, conversation.Sender{UserID: a}, fresh, now)
	if err != nil || opened.ID == 0 {
		t.Fatalf("first message of a pair: %+v %v", opened, err)
	}
	if again, _ := r.Resolve(ctx, c, conversation.Target{UserID: a}); again.ID != opened.ID {
		t.Fatalf("the pair resolves to %d after creating %d", again.ID, opened.ID)
	}
	if got := opened.Recipients(); len(got) != 2 || !opened.Has(a) || !opened.Has(c) || opened.Peer(a) != c {
		t.Fatalf("recipients %v of %+v", got, opened)
	}
	strict := conversation.NewResolver(st, gen.Next, refuseAll{}, nil)
	pair, _ := strict.Resolve(ctx, a, conversation.Target{UserID: b})
	if _, err := strict.Open(ctx, conversation.Sender{UserID: a}, pair, now); code(err) != errcode.Forbidden {
		t.Fatalf("the policy's refusal was not returned: %v", err)
	}
}
