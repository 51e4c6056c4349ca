package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// apiClient returns the business API of the cluster's first logic and a
// context carrying the API key.
func apiClient(t *testing.T, c *framework.Cluster, ctx context.Context) (logicv1.ApiClient, context.Context) {
	t.Helper()
	cc := dialGRPC(t, c.Logics[0].GRPCAddr)
	return logicv1.NewApiClient(cc), metadata.AppendToOutgoingContext(ctx, "x-api-key", framework.APIKey)
}

func sendToGroup(gid int64, clientMsgID string, content []byte) protocol.SendRequest {
	return protocol.SendRequest{GroupID: jsonid.ID(gid), ClientMsgID: clientMsgID, MessageType: 1, Content: content}
}

// pushedIDs drains conn's MESSAGE pushes for conversation cid until want
// distinct msg_ids arrived or d passed, and returns how often each id came.
func pushedIDs(conn *client.Conn, cid int64, want int, d time.Duration) map[int64]int {
	got := map[int64]int{}
	deadline := time.After(d)
	for len(got) < want {
		select {
		case f, ok := <-conn.Pushes():
			if !ok {
				return got
			}
			if f.Command != protocol.CmdMessage {
				continue
			}
			if m, err := f.Message(); err == nil && m.ConversationID.Int64() == cid {
				got[m.MsgID.Int64()]++
			}
		case <-deadline:
			return got
		}
	}
	// A little longer, to catch a duplicate right behind.
	quiet := time.After(200 * time.Millisecond)
	for {
		select {
		case f, ok := <-conn.Pushes():
			if !ok {
				return got
			}
			if m, err := f.Message(); err == nil && f.Command == protocol.CmdMessage && m.ConversationID.Int64() == cid {
				got[m.MsgID.Int64()]++
			}
		case <-quiet:
			return got
		}
	}
}

// A 1,000-member group online across two gates: each send is one row in
// t_messages and no per-member row, and reaches every other member exactly
// once and the sender's other device, never the sending device.
func TestGroupOf1000AcrossTwoGates(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4})
	ctx := ctxT(t, 4*time.Minute)
	const n, owner = 1000, int64(40000)
	conns := make([]*client.Conn, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					errs <- fmt.Errorf("login %d: %v", i, p)
				}
			}()
			conns[i] = c.Login(t, i%2, owner+int64(i), "phone")
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ownerTablet := c.Login(t, 1, owner, "tablet")
	api, actx := apiClient(t, c, ctx)
	members := make([]int64, 0, n-1)
	for i := 1; i < n; i++ {
		members = append(members, owner+int64(i))
	}
	// At most 500 users a call (decision 31): create with the first ones,
	// add the rest.
	g, err := api.CreateGroup(actx, &logicv1.CreateGroupRequest{OwnerId: owner, MemberIds: members[:499], Name: "thousand"})
	if err != nil {
		t.Fatal(err)
	}
	gid, cid := g.Group.GroupId, g.Group.ConversationId
	if g, err = api.AddGroupMembers(actx, &logicv1.ChangeGroupMembersRequest{OperatorId: owner, GroupId: gid, UserIds: members[499:]}); err != nil {
		t.Fatal(err)
	}
	if g.Group.MemberCount != n {
		t.Fatalf("%d members, want %d", g.Group.MemberCount, n)
	}
	eventsBefore := c.CountRows("SELECT COUNT(*) FROM t_mailbox_events")

	const sends = 3
	acks := map[int64]bool{}
	for k := 0; k < sends; k++ {
		ack, err := conns[0].Send(ctx, sendToGroup(gid, fmt.Sprint("g-", k), text(t, fmt.Sprint("to all ", k))))
		if err != nil {
			t.Fatal(err)
		}
		if ack.ConversationID.Int64() != cid {
			t.Fatalf("sent into %d, the group's conversation is %d", ack.ConversationID, cid)
		}
		acks[ack.MsgID.Int64()] = true
	}
	if rows := c.CountRows("SELECT COUNT(*) FROM t_messages WHERE conversation_id = ?", cid); rows != sends {
		t.Fatalf("%d message rows for %d sends", rows, sends)
	}
	if ev := c.CountRows("SELECT COUNT(*) FROM t_mailbox_events"); ev != eventsBefore {
		t.Fatalf("%d mailbox rows written by the sends", ev-eventsBefore)
	}

	type result struct {
		who string
		got map[int64]int
	}
	results := make(chan result, n+1)
	for i := 1; i < n; i++ {
		go func() {
			results <- result{fmt.Sprint("member ", owner+int64(i)), pushedIDs(conns[i], cid, sends, 60*time.Second)}
		}()
	}
	go func() { results <- result{"the sender's tablet", pushedIDs(ownerTablet, cid, sends, 60*time.Second)} }()
	bad := 0
	for i := 0; i < n; i++ {
		r := <-results
		ok := len(r.got) == sends
		for id, times := range r.got {
			ok = ok && acks[id] && times == 1
		}
		if !ok {
			bad++
			if bad <= 5 {
				t.Errorf("%s got %v, want each of %v once", r.who, r.got, acks)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d devices did not get every message exactly once", bad, n)
	}
	if got := pushedIDs(conns[0], cid, 1, 300*time.Millisecond); len(got) != 0 {
		t.Fatalf("the sending device got its own messages: %v", got)
	}
}

// Group permissions and membership through the API: mute-all and a member
// mute refuse with 40301; strangers can neither send nor sync; a removed
// member stops receiving at once and learns of it by a MEMBERSHIP event;
// an added member finds the group in the next SYNC_INBOX; after a Redis
// flush every member's list and unread are what they were.
func TestGroupPermissionsMembershipAndFlush(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4})
	ctx := ctxT(t, 2*time.Minute)
	const owner, admin, m1, m2, stranger, late = int64(41001), int64(41002), int64(41003), int64(41004), int64(41005), int64(41006)
	conn := map[int64]*client.Conn{}
	for i, u := range []int64{owner, admin, m1, m2, stranger, late} {
		conn[u] = c.Login(t, i%2, u, "d")
	}
	api, actx := apiClient(t, c, ctx)
	g, err := api.CreateGroup(actx, &logicv1.CreateGroupRequest{OwnerId: owner, MemberIds: []int64{admin, m1, m2}, Name: "perm"})
	if err != nil {
		t.Fatal(err)
	}
	gid, cid := g.Group.GroupId, g.Group.ConversationId
	if _, err := api.SetGroupRole(actx, &logicv1.SetGroupRoleRequest{OperatorId: owner, GroupId: gid, UserId: admin, Role: logicv1.GroupRole_GROUP_ROLE_ADMIN}); err != nil {
		t.Fatal(err)
	}
	send := func(u int64, key string) error {
		_, err := conn[u].Send(ctx, sendToGroup(gid, key, text(t, key)))
		return err
	}
	refused := func(err error) bool { return hasCode(err, errcode.Forbidden) }
	if err := send(m1, "hello"); err != nil {
		t.Fatal(err)
	}

	// Mute-all: members refused, admins and the owner not.
	if _, err := api.MuteGroup(actx, &logicv1.MuteGroupRequest{OperatorId: admin, GroupId: gid, Mute: true}); err != nil {
		t.Fatal(err)
	}
	if err := send(m1, "muted-all"); !refused(err) {
		t.Fatalf("a member's send under mute-all: %v", err)
	}
	if err := send(admin, "admin-under-mute"); err != nil {
		t.Fatalf("an admin's send under mute-all: %v", err)
	}
	if _, err := api.MuteGroup(actx, &logicv1.MuteGroupRequest{OperatorId: owner, GroupId: gid, Mute: false}); err != nil {
		t.Fatal(err)
	}
	// A member mute.
	if _, err := api.MuteGroupMember(actx, &logicv1.MuteGroupMemberRequest{OperatorId: admin, GroupId: gid, UserId: m2, UntilMs: time.Now().Add(time.Hour).UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	if err := send(m2, "muted"); !refused(err) {
		t.Fatalf("a muted member's send: %v", err)
	}
	if err := send(m1, "not-muted"); err != nil {
		t.Fatal(err)
	}
	// Strangers.
	if err := send(stranger, "stranger"); !refused(err) {
		t.Fatalf("a stranger's send: %v", err)
	}
	if _, err := conn[stranger].SyncMessagesPage(ctx, cid, 0, 50); !refused(err) {
		t.Fatalf("a stranger's sync: %v", err)
	}

	// Removal: m1 stops receiving at once and gets a MEMBERSHIP event.
	waitNoPending(t, c, 4, 15*time.Second)
	drain(conn[m1])
	if _, err := api.RemoveGroupMembers(actx, &logicv1.ChangeGroupMembersRequest{OperatorId: owner, GroupId: gid, UserIds: []int64{m1}}); err != nil {
		t.Fatal(err)
	}
	if err := send(owner, "after-removal"); err != nil {
		t.Fatal(err)
	}
	waitNoPending(t, c, 4, 15*time.Second)
	if got := pushedIDs(conn[m1], cid, 1, 500*time.Millisecond); len(got) != 0 {
		t.Fatalf("a removed member still got %v", got)
	}
	page, err := conn[m1].SyncInbox(ctx, "0", "0", 100)
	if err != nil {
		t.Fatal(err)
	}
	removedEvent := false
	for _, ev := range page.Events {
		removedEvent = removedEvent || (ev.EventType == protocol.EventMembership && ev.ConversationID.Int64() == cid)
	}
	for _, cv := range page.Conversations {
		if cv.ConversationID.Int64() == cid {
			t.Fatalf("the group is still in a removed member's list: %+v", cv)
		}
	}
	if !removedEvent {
		t.Fatalf("no MEMBERSHIP event for the removed member: %+v", page.Events)
	}
	if err := send(m1, "removed-send"); !refused(err) {
		t.Fatalf("a removed member's send: %v", err)
	}

	// An added member finds the group in the next SYNC_INBOX.
	if _, err := api.AddGroupMembers(actx, &logicv1.ChangeGroupMembersRequest{OperatorId: admin, GroupId: gid, UserIds: []int64{late}}); err != nil {
		t.Fatal(err)
	}
	found := false
	page, err = conn[late].SyncInbox(ctx, "0", "0", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, cv := range page.Conversations {
		found = found || (cv.ConversationID.Int64() == cid && cv.GroupID.Int64() == gid && cv.ConversationType == protocol.ConversationGroup)
	}
	if !found {
		t.Fatalf("the added member's list lacks the group: %+v", page.Conversations)
	}

	// A Redis flush: every member's list and unread rebuild to the same.
	waitNoPending(t, c, 4, 15*time.Second)
	before := map[int64]string{}
	for _, u := range []int64{owner, admin, m2, late} {
		r := framework.NewReplica()
		if err := r.Sync(ctx, conn[u]); err != nil {
			t.Fatal(err)
		}
		before[u] = r.Snapshot()
	}
	if err := c.Redis.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	for u, want := range before {
		r := framework.NewReplica()
		if err := r.Sync(ctx, conn[u]); err != nil {
			t.Fatal(err)
		}
		if got := r.Snapshot(); got != want {
			t.Fatalf("user %d's list after the flush differs:\n%s", u, firstDiff(got, want))
		}
	}
}

// drain discards the pushes already queued on conn.
func drain(conn *client.Conn) {
	for {
		select {
		case <-conn.Pushes():
		case <-time.After(100 * time.Millisecond):
			return
		}
	}
}
