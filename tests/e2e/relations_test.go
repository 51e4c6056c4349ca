package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/errcode"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// Blocks refuse P2P sends in both directions with 40301, the same answer
// as an unknown recipient; unblocking lets them through again; with
// logic.p2p_policy friends_only only friends may send, in both directions,
// and a friend added by the API may at once.
func TestBlocksAndFriendsOnlyBothWays(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy string
	}{
		{"open policy", "open"},
		{"friends_only policy", "friends_only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := framework.NewCluster(t, framework.Options{Gates: 2, LogicEnv: []string{"IM_LOGIC_P2P_POLICY=" + tt.policy}})
			ctx := ctxT(t, 2*time.Minute)
			const a, b, ghost = int64(42001), int64(42002), int64(42999)
			ca, cb := c.Login(t, 0, a, "d"), c.Login(t, 1, b, "d")
			api, actx := apiClient(t, c, ctx)
			n := 0
			send := func(from, to int64) error {
				conn := ca
				if from == b {
					conn = cb
				}
				n++
				_, err := conn.Send(ctx, sendTo(to, fmt.Sprint("r-", n), text(t, "hi")))
				return err
			}
			both := func(wantOK bool, when string) {
				t.Helper()
				for _, d := range [][2]int64{{a, b}, {b, a}} {
					err := send(d[0], d[1])
					if wantOK && err != nil {
						t.Fatalf("%s: %d → %d refused: %v", when, d[0], d[1], err)
					}
					if !wantOK && !hasCode(err, errcode.Forbidden) {
						t.Fatalf("%s: %d → %d: %v, want 40301", when, d[0], d[1], err)
					}
				}
			}
			if err := send(a, ghost); !hasCode(err, errcode.Forbidden) {
				t.Fatalf("to an unknown user: %v, want the same 40301 as a block", err)
			}
			friendsOnly := tt.policy == "friends_only"
			both(!friendsOnly, "strangers")
			if _, err := api.AddFriend(actx, &logicv1.FriendPair{UserId: a, FriendId: b}); err != nil {
				t.Fatal(err)
			}
			both(true, "friends")
			if _, err := api.Block(actx, &logicv1.BlockRequest{UserId: b, TargetId: a}); err != nil {
				t.Fatal(err)
			}
			both(false, "b blocked a")
			if _, err := api.Unblock(actx, &logicv1.BlockRequest{UserId: b, TargetId: a}); err != nil {
				t.Fatal(err)
			}
			both(true, "unblocked")
			if _, err := api.RemoveFriend(actx, &logicv1.FriendPair{UserId: a, FriendId: b}); err != nil {
				t.Fatal(err)
			}
			both(!friendsOnly, "no longer friends")
		})
	}
}
