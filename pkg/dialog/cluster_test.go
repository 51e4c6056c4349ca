package dialog

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/testredis"
)

// On a 3-master Redis Cluster each list script runs with its three KEYS
// (state, list, version; or list, version, built) in the user's slot, for
// users whose keys live on every master.
func TestListScriptsOnEveryClusterMaster(t *testing.T) {
	rdb := testredis.OpenCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const cid = int64(253608578634481665)
	users := make([]int64, 12)
	lists := make([]string, len(users))
	for i := range users {
		users[i] = 920001 + int64(i)
		lists[i] = ListKey(users[i])
	}
	if n, err := testredis.Masters(ctx, rdb, lists...); err != nil || n != testredis.ClusterMasters {
		t.Fatalf("the users' lists are on %d masters (%v), want all %d", n, err, testredis.ClusterMasters)
	}
	p := Preview{MsgID: "253608578697396226", MessageType: 1, Text: "hi", SenderID: "2"}
	for _, uid := range users {
		steps := []struct {
			name string
			run  func() (bool, error)
			want bool
		}{
			{"EnsureMembers builds the list", func() (bool, error) {
				e, err := EnsureMembers(ctx, rdb, uid, "epoch-1", []int64{cid, 7})
				return e == "epoch-1", err
			}, true},
			{"WriteCold at the observed version", func() (bool, error) {
				ch, err := Changes(ctx, rdb, uid, 0, 10)
				if err != nil || len(ch) != 2 {
					return false, err
				}
				v := ch[0].Version
				if ch[1].ConversationID == cid {
					v = ch[1].Version
				}
				return WriteCold(ctx, rdb, uid, cid, strconv.FormatInt(v, 10), State{Type: 1, PeerID: 2, LastMsgID: 253608578697396225, Base: 253608578697396225})
			}, true},
			{"ApplyMessage counts a new message", func() (bool, error) {
				return ApplyMessage(ctx, rdb, uid, cid, 253608578697396226, 5, true, p)
			}, true},
			{"ApplyMessage of the same message again counts nothing", func() (bool, error) {
				return ApplyMessage(ctx, rdb, uid, cid, 253608578697396226, 5, true, p)
			}, false},
			{"the state holds one unread", func() (bool, error) {
				s, ok, err := Load(ctx, rdb, uid, cid)
				return ok && s.Unread == 1 && s.LastMsgID == 253608578697396226, err
			}, true},
			{"Invalidate drops the state", func() (bool, error) {
				if err := Invalidate(ctx, rdb, uid, cid); err != nil {
					return false, err
				}
				_, ok, err := Load(ctx, rdb, uid, cid)
				return !ok, err
			}, true},
		}
		for _, st := range steps {
			if got, err := st.run(); err != nil || got != st.want {
				t.Fatalf("user %d, %s: %v (%v), want %v", uid, st.name, got, err, st.want)
			}
		}
	}
}
