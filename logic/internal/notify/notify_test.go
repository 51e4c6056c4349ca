package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/logic/internal/notify"
	"github.com/sparkim/spark/logic/internal/relation"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/testredis"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

const partitions = 4

// jobs reads every job queued on the partitions.
func jobs(t *testing.T, rdb *redis.Client) []*queuev1.DeliverJob {
	t.Helper()
	var out []*queuev1.DeliverJob
	for p := 0; p < partitions; p++ {
		msgs, err := rdb.XRange(context.Background(), rediskey.Deliver(p), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			j, err := queue.Decode(m)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, j)
		}
	}
	return out
}

func version(t *testing.T, rdb *redis.Client, uid, cid int64) float64 {
	t.Helper()
	v, err := rdb.ZScore(context.Background(), dialog.ListKey(uid), strconv.FormatInt(cid, 10)).Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return v
}

func TestGroupChangedQueuesPushesAndRefreshesLists(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name        string
		change      group.Change
		wantUsers   []string // recipients of per-user jobs, sorted
		wantGroup   bool     // one job for the whole group
		wantTouched []int64  // users whose list entry changed
	}{
		{
			name: "members added: one job per distinct event, the group is told, their lists change",
			change: group.Change{
				Group: group.Info{GroupID: 7, ConversationID: 70, MemberVersion: 5}, Action: group.ActionAdded, Changed: true,
				Added: []int64{101, 102, 103}, Affected: []int64{101, 102, 103},
				Events: []group.Event{
					{UserID: 101, Payload: json.RawMessage(`{"action":"added","role":0}`)},
					{UserID: 102, Payload: json.RawMessage(`{"action":"added","role":1}`)},
					{UserID: 103, Payload: json.RawMessage(`{"action":"added","role":0}`)},
				},
				NotifyMembers: true,
			},
			wantUsers: []string{"[101 103]", "[102]"}, wantGroup: true, wantTouched: []int64{101, 102, 103},
		},
		{
			name: "a member removed: only their list and their event",
			change: group.Change{
				Group: group.Info{GroupID: 8, ConversationID: 80, MemberVersion: 9}, Action: group.ActionRemoved, Changed: true,
				Removed: []int64{201}, Affected: []int64{201},
				Events: []group.Event{{UserID: 201, Payload: json.RawMessage(`{"action":"removed"}`)}},
			},
			wantUsers: []string{"[201]"}, wantTouched: []int64{201},
		},
		{
			name:   "an idempotent repeat does nothing",
			change: group.Change{Group: group.Info{GroupID: 9, ConversationID: 90}, Changed: false, Added: []int64{301}, NotifyMembers: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb := testredis.Open(t)
			if err := rdb.FlushDB(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			cid := tt.change.Group.ConversationID
			before := map[int64]float64{}
			for _, u := range append(tt.change.Added, tt.change.Removed...) {
				before[u] = version(t, rdb, u, cid)
			}
			if err := mustNew(t, rdb).GroupChanged(ctx, tt.change); err != nil {
				t.Fatal(err)
			}
			var users []string
			groupJobs := 0
			for _, j := range jobs(t, rdb) {
				if j.Kind != queuev1.JobKind_JOB_KIND_SIGNAL || j.Command != uint32(protocol.CmdControlEvent) || j.ConversationId != cid ||
					j.ConversationType != protocol.ConversationGroup {
					t.Fatalf("job %+v", j)
				}
				var ev notify.ControlEvent
				if err := json.Unmarshal(j.PushData, &ev); err != nil || ev.EventType != protocol.EventMembership || ev.ConversationID.Int64() != cid {
					t.Fatalf("push data %s (%v)", j.PushData, err)
				}
				if len(j.Recipients) == 0 {
					groupJobs++
					if j.MemberVersion != tt.change.Group.MemberVersion {
						t.Fatalf("group job at member_version %d, want %d", j.MemberVersion, tt.change.Group.MemberVersion)
					}
					continue
				}
				users = append(users, fmt.Sprint(j.Recipients))
			}
			sort.Strings(users)
			if fmt.Sprint(users) != fmt.Sprint(tt.wantUsers) || (groupJobs == 1) != tt.wantGroup || groupJobs > 1 {
				t.Fatalf("per-user jobs %v, group jobs %d; want %v and group %v", users, groupJobs, tt.wantUsers, tt.wantGroup)
			}
			for _, u := range tt.wantTouched {
				if v := version(t, rdb, u, cid); v <= before[u] {
					t.Fatalf("list of %d not refreshed (version %v → %v)", u, before[u], v)
				}
			}
			if len(tt.wantTouched) == 0 {
				for u, b := range before {
					if v := version(t, rdb, u, cid); v != b {
						t.Fatalf("list of %d changed by a repeat", u)
					}
				}
			}
		})
	}
}

func TestRelationChangedPushesEachEventToItsUser(t *testing.T) {
	ctx := context.Background()
	rdb := testredis.Open(t)
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	n := mustNew(t, rdb)
	if err := n.RelationChanged(ctx, relation.Change{Changed: false, Events: []relation.Event{{UserID: 1}}}); err != nil {
		t.Fatal(err)
	}
	if got := jobs(t, rdb); len(got) != 0 {
		t.Fatalf("a repeat queued %d jobs", len(got))
	}
	ch := relation.Change{Changed: true, Events: []relation.Event{
		{UserID: 11, Kind: "accepted", PeerID: 12, Payload: json.RawMessage(`{"kind":"accepted","user_id":"12"}`)},
		{UserID: 12, Kind: "accepted", PeerID: 11, Payload: json.RawMessage(`{"kind":"accepted","user_id":"11"}`)},
	}}
	if err := n.RelationChanged(ctx, ch); err != nil {
		t.Fatal(err)
	}
	got := jobs(t, rdb)
	if len(got) != 2 {
		t.Fatalf("%d jobs, want 2", len(got))
	}
	for i, j := range got {
		var ev notify.ControlEvent
		if err := json.Unmarshal(j.PushData, &ev); err != nil || ev.EventType != protocol.EventFriend ||
			string(ev.Payload) != string(ch.Events[i].Payload) || fmt.Sprint(j.Recipients) != fmt.Sprint([]int64{ch.Events[i].UserID}) ||
			j.Command != uint32(protocol.CmdControlEvent) {
			t.Fatalf("job %d: %+v data %s", i, j, j.PushData)
		}
	}
}

// mustNew is the notifier over the test's partitions.
func mustNew(t *testing.T, rdb redis.Cmdable) *notify.Service {
	t.Helper()
	n, err := notify.New(rdb, partitions)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A notifier without partitions is refused, not given one.
func TestNewRefusesNoPartitions(t *testing.T) {
	if _, err := notify.New(nil, 0); err == nil {
		t.Fatal("queue.partitions 0 accepted")
	}
}
