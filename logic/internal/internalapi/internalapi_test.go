package internalapi_test

import (
	"context"
	"fmt"
	"net"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/logic/internal/internalapi"
	"github.com/sparkim/spark/logic/internal/mailbox"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/msgid"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

const secret = "internal-test-secret"

// serve starts the Internal server on an in-memory listener and returns a
// client of it.
func serve(t *testing.T, srv *internalapi.Server) logicv1.InternalClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(clusterauth.NewGuard(secret, clusterauth.HealthPrefix).ServerOptions()...)
	logicv1.RegisterInternalServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return logicv1.NewInternalClient(cc)
}

func TestAppendMailboxRPC(t *testing.T) {
	_, db := testenv.MySQL(t)
	st := store.New(db)
	gen, err := msgid.New(context.Background(), msgid.Settings{MachineID: 42})
	if err != nil {
		t.Fatal(err)
	}
	svc := mailbox.New(st, gen)
	client := serve(t, internalapi.New(svc, nil, nil))
	ctx := context.Background()
	authed := metadata.AppendToOutgoingContext(ctx, clusterauth.MetadataKey, secret)
	a, b := testenv.RandomUserID(), testenv.RandomUserID()
	ev := func(uid int64, typ int32) *logicv1.MailboxEvent {
		return &logicv1.MailboxEvent{UserId: uid, DeviceId: "d1", EventType: typ, ConversationId: 5, MsgId: 6, Payload: []byte(`{"conversation_id":"5","msg_id":"6"}`)}
	}
	tests := []struct {
		name string
		ctx  context.Context
		req  []*logicv1.MailboxEvent
		want codes.Code
		seqs string
	}{
		{"no secret", ctx, []*logicv1.MailboxEvent{ev(a, 5)}, codes.Unauthenticated, ""},
		{"two users", authed, []*logicv1.MailboxEvent{ev(a, 5), ev(b, 5), ev(a, 5)}, codes.OK, "[1 1 2]"},
		{"continues", authed, []*logicv1.MailboxEvent{ev(b, 3), ev(a, 4)}, codes.OK, "[2 3]"},
		{"unknown type: nothing written", authed, []*logicv1.MailboxEvent{ev(a, 5), ev(a, 77)}, codes.InvalidArgument, ""},
		{"payload not an object", authed, []*logicv1.MailboxEvent{{UserId: a, EventType: 5, Payload: []byte(`"x"`)}}, codes.InvalidArgument, ""},
		{"after a refusal", authed, []*logicv1.MailboxEvent{ev(a, 5)}, codes.OK, "[4]"},
		{"empty", authed, nil, codes.OK, "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := client.AppendMailbox(tt.ctx, &logicv1.AppendMailboxRequest{Events: tt.req})
			if status.Code(err) != tt.want {
				t.Fatalf("code %v (%v)", status.Code(err), err)
			}
			if err == nil && fmtSeqs(r.Seqs) != tt.seqs {
				t.Fatalf("seqs %v, want %s", r.Seqs, tt.seqs)
			}
		})
	}
	evs, _, err := svc.Since(ctx, a, "d1", 0, 10)
	if err != nil || len(evs) != 4 || string(evs[0].Payload) != `{"conversation_id":"5","msg_id":"6"}` || evs[0].MsgID != 6 {
		t.Fatalf("stored events %+v %v", evs, err)
	}
	if evs, _, _ := svc.Since(ctx, a, "d2", 0, 10); len(evs) != 0 {
		t.Fatalf("another device sees %d events", len(evs))
	}
}

func fmtSeqs(s []int64) string { return fmt.Sprint(s) }

func TestGroupMembersRPC(t *testing.T) {
	_, db := testenv.MySQL(t)
	st := store.New(db)
	ctx := context.Background()
	gen, err := msgid.New(ctx, msgid.Settings{MachineID: 43})
	if err != nil {
		t.Fatal(err)
	}
	groups, err := group.New(st, gen, group.Config{MaxMembers: config.Default().Logic.GroupMaxMembers})
	if err != nil {
		t.Fatal(err)
	}
	members := make([]int64, 7)
	for i := range members {
		members[i] = testenv.RandomUserID()
		if err := st.EnsureUser(ctx, members[i], time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := groups.Create(ctx, group.CreateRequest{OwnerID: members[0], MemberIDs: members[1:], Name: "g"})
	if err != nil {
		t.Fatal(err)
	}
	client := serve(t, internalapi.New(mailbox.New(st, gen), groups, nil))
	authed := metadata.AppendToOutgoingContext(ctx, clusterauth.MetadataKey, secret)
	cid := ch.Group.ConversationID

	// Paging by 3 returns every member once, in user id order, with the
	// group's member_version.
	var got []int64
	var after int64
	for pages := 0; ; pages++ {
		r, err := client.GroupMembers(authed, &logicv1.GroupMembersRequest{ConversationId: cid, AfterUserId: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if r.MemberVersion != ch.Group.MemberVersion {
			t.Fatalf("member_version %d, want %d", r.MemberVersion, ch.Group.MemberVersion)
		}
		got = append(got, r.UserIds...)
		if !r.More {
			break
		}
		after = r.UserIds[len(r.UserIds)-1]
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	want := append([]int64(nil), members...)
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("members %v, want %v", got, want)
	}

	tests := []struct {
		name string
		ctx  context.Context
		req  *logicv1.GroupMembersRequest
		want codes.Code
	}{
		{"no secret", ctx, &logicv1.GroupMembersRequest{ConversationId: cid}, codes.Unauthenticated},
		{"no conversation id", authed, &logicv1.GroupMembersRequest{}, codes.InvalidArgument},
		{"negative cursor", authed, &logicv1.GroupMembersRequest{ConversationId: cid, AfterUserId: -1}, codes.InvalidArgument},
		{"not a group", authed, &logicv1.GroupMembersRequest{ConversationId: 12345}, codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := client.GroupMembers(tt.ctx, tt.req); status.Code(err) != tt.want {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tt.want)
			}
		})
	}
}
