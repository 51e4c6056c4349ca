package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sparkim/spark/logic/internal/api"
	"github.com/sparkim/spark/logic/internal/auth"
	"github.com/sparkim/spark/logic/internal/conversation"
	"github.com/sparkim/spark/logic/internal/gatepush"
	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/logic/internal/inbox"
	"github.com/sparkim/spark/logic/internal/mailbox"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/online"
	"github.com/sparkim/spark/logic/internal/relation"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/logic/internal/user"
	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
	"github.com/sparkim/spark/pkg/token"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

const (
	secret       = "s3cret"
	systemUserID = 9
)

// fakeGate is a gate's Push service that records what it was asked.
type fakeGate struct {
	gatev1.UnimplementedPushServer
	id   string
	addr string

	mu         sync.Mutex
	pushes     []*gatev1.PushRequest
	kicks      []*gatev1.KickRequest
	broadcasts []*gatev1.BroadcastRequest
}

func (g *fakeGate) Push(_ context.Context, r *gatev1.PushRequest) (*gatev1.PushReply, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pushes = append(g.pushes, r)
	return &gatev1.PushReply{Delivered: uint32(len(r.Targets))}, nil
}

func (g *fakeGate) Kick(_ context.Context, r *gatev1.KickRequest) (*gatev1.KickReply, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.kicks = append(g.kicks, r)
	return &gatev1.KickReply{Kicked: uint32(len(r.Targets))}, nil
}

func (g *fakeGate) Broadcast(_ context.Context, r *gatev1.BroadcastRequest) (*gatev1.BroadcastReply, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.broadcasts = append(g.broadcasts, r)
	return &gatev1.BroadcastReply{Delivered: 3}, nil
}

func (g *fakeGate) Stats(context.Context, *gatev1.StatsRequest) (*gatev1.StatsReply, error) {
	return &gatev1.StatsReply{GateId: g.id, Connections: 5, Authenticated: 4}, nil
}

// env is the API over real services on MariaDB and Redis, with one fake
// gate registered.
type env struct {
	api    logicv1.ApiClient
	db     *sqlx.DB
	st     *store.Store
	rdb    *redis.Client
	gate   *fakeGate
	notes  *testenv.Notes
	online *online.Service
	auth   *auth.Service
	key    context.Context // a context carrying a valid API key
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dsn, db := testenv.MySQL(t)
	db.SetMaxOpenConns(16)
	hw, err := store.Open(dsn, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hw.Close() })
	rdb := testenv.Redis(t)
	st := store.New(db)
	ctx := context.Background()
	gen, err := msgid.New(ctx, msgid.Settings{MachineID: 7, Store: store.NewHighWater(hw)})
	if err != nil {
		t.Fatal(err)
	}

	// The fake gate, registered as live.
	fg := &fakeGate{id: testenv.RandomName("gate-")}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fg.addr = gl.Addr().String()
	gsrv := grpc.NewServer()
	gatev1.RegisterPushServer(gsrv, fg)
	go func() { _ = gsrv.Serve(gl) }()
	t.Cleanup(gsrv.Stop)
	reg := gatepush.NewRegistry(rdb, nil)
	detach := reg.Attach(ctx, fg.id, fg.addr, []string{"tcp://203.0.113.1:8100"}, nil)
	t.Cleanup(func() { detach(); rdb.Del(context.Background(), rediskey.Gate(fg.id)) })
	clients := gatepush.NewClients("cluster")
	t.Cleanup(clients.Close)

	relSvc, err := relation.New(st, gen, relation.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defaults := config.Default()
	groupSvc, err := group.New(st, gen, group.Config{MaxMembers: defaults.Logic.GroupMaxMembers})
	if err != nil {
		t.Fatal(err)
	}
	sendCfg := message.ConfigFrom(defaults)
	sendCfg.EnqueueRetries, sendCfg.Partitions = 2, 4
	sendCfg.Conversations = conversation.NewResolver(st, gen.Next, relSvc, groupSvc)
	sendSvc, err := message.New(st, rdb, gen, sendCfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sendSvc.Close)
	inboxSvc := inbox.New(st, rdb, mailbox.New(st, gen), nil)
	onl := online.New(rdb, reg, clients, 3*time.Second, nil)
	notes := &testenv.Notes{}
	srv := api.New(api.Services{
		Store: st, Users: user.New(st, onl), Relations: relSvc, Groups: groupSvc,
		Messages: sendSvc, Inbox: inboxSvc, Online: onl,
	}, api.Config{JWTSecret: []byte(secret), TokenTTL: time.Hour, SystemUserID: systemUserID}, notes, nil)

	lis := bufconn.Listen(1 << 20)
	guard := clusterauth.NewGuard("cluster", clusterauth.HealthPrefix, api.Prefix)
	keys := api.NewKeyGuard([]string{"key-1", "key-2"})
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(guard.Unary, keys.Unary))
	logicv1.RegisterApiServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return &env{
		api: logicv1.NewApiClient(cc), db: db, st: st, rdb: rdb, gate: fg, notes: notes, online: onl,
		auth: auth.New(st, rdb, []byte(secret), nil, nil),
		key:  metadata.AppendToOutgoingContext(ctx, api.MetadataKey, "key-1"),
	}
}

// users registers n random users through the API and returns their ids.
func (e *env) users(t *testing.T, n int) []int64 {
	t.Helper()
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = testenv.RandomUserID()
		if _, err := e.api.UpsertUser(e.key, &logicv1.UpsertUserRequest{UserId: ids[i]}); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// online puts a route for (uid, device) on the fake gate; an odd conn's
// route carries a real IP (198.51.100.conn), an even one's is written the
// way logic wrote it before it recorded the IP.
func (e *env) connect(t *testing.T, uid int64, device string, conn uint64) {
	t.Helper()
	entry := route.Entry{GateID: e.gate.id, ConnID: conn, SinceMs: 1700000000000 + int64(conn)}
	if conn%2 == 1 {
		entry.RealIP = fmt.Sprintf("198.51.100.%d", conn)
	}
	v := entry.String()
	if err := e.rdb.HSet(context.Background(), rediskey.Route(uid), device, v).Err(); err != nil {
		t.Fatal(err)
	}
}

// wantCode checks err's gRPC code and, for INVALID_ARGUMENT, that the
// message names field.
func wantCode(t *testing.T, err error, code codes.Code, field string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("code %v (%v), want %v", status.Code(err), err, code)
	}
	if field != "" && !strings.Contains(status.Convert(err).Message(), field) {
		t.Fatalf("message %q does not name %q", status.Convert(err).Message(), field)
	}
}

func TestErrorCodes(t *testing.T) {
	for _, tt := range []struct {
		in   errcode.Code
		want codes.Code
	}{
		{errcode.InvalidArgument, codes.InvalidArgument},
		{errcode.BadToken, codes.Unauthenticated},
		{errcode.NotAuthed, codes.Unauthenticated},
		{errcode.Forbidden, codes.PermissionDenied},
		{errcode.NotFound, codes.NotFound},
		{errcode.Conflict, codes.FailedPrecondition},
		{errcode.TooLarge, codes.InvalidArgument},
		{errcode.RateLimited, codes.ResourceExhausted},
		{errcode.Busy, codes.Unavailable},
		{errcode.Internal, codes.Internal},
		{errcode.Code("99999"), codes.Internal},
	} {
		if got := api.Code(tt.in); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestIssueToken(t *testing.T) {
	e := newEnv(t)
	uid := testenv.RandomUserID()
	tests := []struct {
		name  string
		key   string
		req   *logicv1.IssueTokenRequest
		want  codes.Code
		field string
		ttl   time.Duration
	}{
		{"no key", "", &logicv1.IssueTokenRequest{UserId: uid}, codes.Unauthenticated, "", 0},
		{"wrong key", "nope", &logicv1.IssueTokenRequest{UserId: uid}, codes.Unauthenticated, "", 0},
		{"zero user", "key-1", &logicv1.IssueTokenRequest{}, codes.InvalidArgument, "user_id", 0},
		{"bad device", "key-1", &logicv1.IssueTokenRequest{UserId: uid, DeviceId: "a b"}, codes.InvalidArgument, "device_id", 0},
		{"negative ttl", "key-1", &logicv1.IssueTokenRequest{UserId: uid, TtlSeconds: -1}, codes.InvalidArgument, "ttl_seconds", 0},
		{"default ttl", "key-1", &logicv1.IssueTokenRequest{UserId: uid}, codes.OK, "", time.Hour},
		{"device and ttl", "key-2", &logicv1.IssueTokenRequest{UserId: uid, DeviceId: "dev-9", TtlSeconds: 60}, codes.OK, "", time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.key != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, api.MetadataKey, tt.key)
			}
			rep, err := e.api.IssueToken(ctx, tt.req)
			wantCode(t, err, tt.want, tt.field)
			if err != nil {
				return
			}
			cl, err := token.Verify([]byte(secret), rep.Token, time.Now())
			if err != nil || cl.UserID != tt.req.UserId || cl.DeviceID != tt.req.DeviceId {
				t.Fatalf("claims %+v (%v)", cl, err)
			}
			if d := time.Until(time.UnixMilli(rep.ExpiresAtMs)); d > tt.ttl || d < tt.ttl-5*time.Second {
				t.Fatalf("expires in %v, want about %v", d, tt.ttl)
			}
		})
	}
	var n int
	if err := e.db.Get(&n, "SELECT COUNT(*) FROM t_users WHERE id = ?", uid); err != nil || n != 1 {
		t.Fatalf("user row: %d (%v)", n, err)
	}
}

// Every RPC refuses a call without a valid key, before looking at it.
func TestAPIKeyOnEveryCall(t *testing.T) {
	e := newEnv(t)
	for _, key := range []string{"", "wrong"} {
		ctx := context.Background()
		if key != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, api.MetadataKey, key)
		}
		calls := map[string]func() error{
			"GetUser":     func() error { _, err := e.api.GetUser(ctx, &logicv1.GetUserRequest{UserId: 1}); return err },
			"SendMessage": func() error { _, err := e.api.SendMessage(ctx, &logicv1.SendMessageRequest{}); return err },
			"Broadcast":   func() error { _, err := e.api.Broadcast(ctx, &logicv1.BroadcastRequest{Payload: "{}"}); return err },
			"ListGates":   func() error { _, err := e.api.ListGates(ctx, &logicv1.ListGatesRequest{}); return err },
			"KickUser":    func() error { _, err := e.api.KickUser(ctx, &logicv1.KickUserRequest{UserId: 1}); return err },
			"RevokeTokens": func() error {
				_, err := e.api.RevokeTokens(ctx, &logicv1.RevokeTokensRequest{UserId: 1})
				return err
			},
		}
		for name, call := range calls {
			if err := call(); status.Code(err) != codes.Unauthenticated {
				t.Errorf("key %q %s: %v, want Unauthenticated", key, name, err)
			}
		}
	}
}

// Argument-shape errors are INVALID_ARGUMENT naming the request field.
func TestInvalidArguments(t *testing.T) {
	e := newEnv(t)
	ctx := e.key
	tests := []struct {
		field string
		call  func() error
	}{
		{"user_id", func() error { _, err := e.api.UpsertUser(ctx, &logicv1.UpsertUserRequest{}); return err }},
		{"nickname", func() error {
			n := strings.Repeat("x", 65)
			_, err := e.api.UpsertUser(ctx, &logicv1.UpsertUserRequest{UserId: 5, Nickname: &n})
			return err
		}},
		{"extra", func() error {
			x := `[1,2]`
			_, err := e.api.UpsertUser(ctx, &logicv1.UpsertUserRequest{UserId: 5, Extra: &x})
			return err
		}},
		{"user_id", func() error { _, err := e.api.GetUser(ctx, &logicv1.GetUserRequest{UserId: -1}); return err }},
		{"user_id", func() error { _, err := e.api.DisableUser(ctx, &logicv1.DisableUserRequest{}); return err }},
		{"user_id", func() error { _, err := e.api.RevokeTokens(ctx, &logicv1.RevokeTokensRequest{}); return err }},
		{"friend_id", func() error { _, err := e.api.AddFriend(ctx, &logicv1.FriendPair{UserId: 1}); return err }},
		{"friend_id", func() error { _, err := e.api.AddFriend(ctx, &logicv1.FriendPair{UserId: 1, FriendId: 1}); return err }},
		{"note", func() error {
			_, err := e.api.RequestFriend(ctx, &logicv1.FriendRequestRequest{UserId: 1, FriendId: 2, Note: strings.Repeat("n", 200)})
			return err
		}},
		{"target_id", func() error { _, err := e.api.Block(ctx, &logicv1.BlockRequest{UserId: 1}); return err }},
		{"limit", func() error {
			_, err := e.api.ListFriends(ctx, &logicv1.ListRequest{UserId: 1, Limit: 501})
			return err
		}},
		{"after_user_id", func() error {
			_, err := e.api.ListBlocks(ctx, &logicv1.ListRequest{UserId: 1, AfterUserId: -1})
			return err
		}},
		{"owner_id", func() error { _, err := e.api.CreateGroup(ctx, &logicv1.CreateGroupRequest{Name: "g"}); return err }},
		{"name", func() error { _, err := e.api.CreateGroup(ctx, &logicv1.CreateGroupRequest{OwnerId: 1}); return err }},
		{"group_id", func() error {
			_, err := e.api.AddGroupMembers(ctx, &logicv1.ChangeGroupMembersRequest{UserIds: []int64{1}})
			return err
		}},
		{"operator_id", func() error {
			_, err := e.api.DissolveGroup(ctx, &logicv1.GroupRef{OperatorId: -1, GroupId: 1})
			return err
		}},
		{"user_ids", func() error {
			_, err := e.api.AddGroupMembers(ctx, &logicv1.ChangeGroupMembersRequest{GroupId: 1})
			return err
		}},
		{"role", func() error {
			_, err := e.api.SetGroupRole(ctx, &logicv1.SetGroupRoleRequest{GroupId: 1, UserId: 2, Role: 7})
			return err
		}},
		{"until_ms", func() error {
			_, err := e.api.MuteGroupMember(ctx, &logicv1.MuteGroupMemberRequest{GroupId: 1, UserId: 2, UntilMs: -5})
			return err
		}},
		{"new_owner_id", func() error {
			_, err := e.api.TransferGroup(ctx, &logicv1.TransferGroupRequest{GroupId: 1})
			return err
		}},
		{"sender_id", func() error {
			_, err := e.api.SendMessage(ctx, &logicv1.SendMessageRequest{ToUserId: 2, ClientMsgId: "c", MessageType: 1, Content: `{"t":1,"text":"x"}`})
			return err
		}},
		{"sender_id", func() error {
			_, err := e.api.SendMessage(ctx, &logicv1.SendMessageRequest{SenderId: 3, System: true, ToUserId: 2, ClientMsgId: "c", MessageType: 1, Content: `{"t":1,"text":"x"}`})
			return err
		}},
		{"to_user_id", func() error {
			_, err := e.api.SendMessage(ctx, &logicv1.SendMessageRequest{SenderId: 3, ClientMsgId: "c", MessageType: 1, Content: `{"t":1,"text":"x"}`})
			return err
		}},
		{"client_msg_id", func() error {
			_, err := e.api.SendMessage(ctx, &logicv1.SendMessageRequest{SenderId: 3, ToUserId: 2, MessageType: 1, Content: `{"t":1,"text":"x"}`})
			return err
		}},
		{"content", func() error {
			_, err := e.api.SendMessage(ctx, &logicv1.SendMessageRequest{SenderId: 3, ToUserId: 2, ClientMsgId: "c", MessageType: 1})
			return err
		}},
		{"conversation_id", func() error { _, err := e.api.GetHistory(ctx, &logicv1.GetHistoryRequest{UserId: 1}); return err }},
		{"after_msg_id", func() error {
			_, err := e.api.GetHistory(ctx, &logicv1.GetHistoryRequest{UserId: 1, ConversationId: 2, AfterMsgId: -1})
			return err
		}},
		{"user_ids", func() error { _, err := e.api.PushToUsers(ctx, &logicv1.PushToUsersRequest{Payload: "{}"}); return err }},
		{"payload", func() error {
			_, err := e.api.PushToUsers(ctx, &logicv1.PushToUsersRequest{UserIds: []int64{1}, Payload: "[]"})
			return err
		}},
		{"payload", func() error { _, err := e.api.Broadcast(ctx, &logicv1.BroadcastRequest{Payload: "nope"}); return err }},
		{"user_ids", func() error {
			_, err := e.api.GetPresence(ctx, &logicv1.GetPresenceRequest{UserIds: []int64{0}})
			return err
		}},
	}
	for i, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.field) {
				t.Fatalf("case %d: %v, want INVALID_ARGUMENT naming %s", i, err, tt.field)
			}
		})
	}
}

func TestUsers(t *testing.T) {
	e := newEnv(t)
	ctx := e.key
	uid := testenv.RandomUserID()
	str := func(s string) *string { return &s }

	if _, err := e.api.GetUser(ctx, &logicv1.GetUserRequest{UserId: uid}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown user: %v, want NotFound", err)
	}
	u, err := e.api.UpsertUser(ctx, &logicv1.UpsertUserRequest{UserId: uid, Nickname: str("Ann"), Extra: str(`{ "level": 3 }`)})
	if err != nil {
		t.Fatal(err)
	}
	if u.Nickname != "Ann" || u.Avatar != "" || u.Extra != `{"level":3}` || u.Status != 1 {
		t.Fatalf("created %+v", u)
	}
	// Only the fields present change.
	u, err = e.api.UpsertUser(ctx, &logicv1.UpsertUserRequest{UserId: uid, Avatar: str("avatars/ann.png")})
	if err != nil {
		t.Fatal(err)
	}
	if u.Nickname != "Ann" || u.Avatar != "avatars/ann.png" || u.Extra != `{"level":3}` {
		t.Fatalf("updated %+v", u)
	}
	got, err := e.api.GetUser(ctx, &logicv1.GetUserRequest{UserId: uid})
	if err != nil || got.Nickname != "Ann" || got.CreatedAtMs == 0 {
		t.Fatalf("get %+v %v", got, err)
	}
	// A user created by a token has "{}" as extra.
	other := testenv.RandomUserID()
	if _, err := e.api.IssueToken(ctx, &logicv1.IssueTokenRequest{UserId: other}); err != nil {
		t.Fatal(err)
	}
	if got, err := e.api.GetUser(ctx, &logicv1.GetUserRequest{UserId: other}); err != nil || got.Extra != "{}" {
		t.Fatalf("token-created user %+v %v", got, err)
	}

	// Disable: status 2, tokens refused, connections kicked.
	tok, _, _ := token.Mint([]byte(secret), uid, "", time.Hour, time.Now())
	e.connect(t, uid, "phone", 41)
	d, err := e.api.DisableUser(ctx, &logicv1.DisableUserRequest{UserId: uid})
	if err != nil || d.Kicked != 1 {
		t.Fatalf("disable %+v %v", d, err)
	}
	if got, _ := e.api.GetUser(ctx, &logicv1.GetUserRequest{UserId: uid}); got.Status != 2 || got.TokensValidAfterMs == 0 {
		t.Fatalf("disabled user %+v", got)
	}
	e.gate.mu.Lock()
	k := e.gate.kicks[len(e.gate.kicks)-1]
	e.gate.mu.Unlock()
	if k.Reason != user.ReasonDisabled || len(k.Targets) != 1 || k.Targets[0].ConnId != 41 || k.Targets[0].UserId != uid {
		t.Fatalf("kick %+v", k)
	}
	_, _, err = e.auth.Auth(context.Background(), auth.Conn{GateID: "g", ConnID: 1}, auth.Credentials{Token: tok, DeviceID: "phone"})
	if c, _ := errcode.Of(err); c != errcode.BadToken {
		t.Fatalf("AUTH of a disabled user: %v, want 40101", err)
	}

	// Enable: active again; the old token stays revoked, a new one works.
	en, err := e.api.EnableUser(ctx, &logicv1.EnableUserRequest{UserId: uid})
	if err != nil || en.Status != 1 {
		t.Fatalf("enable %+v %v", en, err)
	}
	_, _, err = e.auth.Auth(context.Background(), auth.Conn{GateID: "g", ConnID: 2}, auth.Credentials{Token: tok, DeviceID: "phone"})
	if c, _ := errcode.Of(err); c != errcode.BadToken {
		t.Fatalf("AUTH with the token revoked by the disable: %v, want 40101", err)
	}
	time.Sleep(1100 * time.Millisecond) // tokens carry whole seconds (decision 46)
	fresh, _, _ := token.Mint([]byte(secret), uid, "", time.Hour, time.Now())
	if _, _, err := e.auth.Auth(context.Background(), auth.Conn{GateID: "g", ConnID: 3}, auth.Credentials{Token: fresh, DeviceID: "phone"}); err != nil {
		t.Fatalf("AUTH with a new token after enabling: %v", err)
	}
	if _, err := e.api.EnableUser(ctx, &logicv1.EnableUserRequest{UserId: testenv.RandomUserID()}); status.Code(err) != codes.NotFound {
		t.Fatalf("enabling an unknown user: %v, want NOT_FOUND", err)
	}
	if _, err := e.api.EnableUser(ctx, &logicv1.EnableUserRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("enabling user 0: %v, want INVALID_ARGUMENT", err)
	}
}

func TestRevokeTokens(t *testing.T) {
	e := newEnv(t)
	ctx := e.key
	uid := testenv.RandomUserID()
	old, _, _ := token.Mint([]byte(secret), uid, "", time.Hour, time.Now().Add(-2*time.Second))
	e.connect(t, uid, "phone", 11)
	e.connect(t, uid, "pad", 12)
	e.connect(t, testenv.RandomUserID(), "phone", 13) // someone else: untouched

	rep, err := e.api.RevokeTokens(ctx, &logicv1.RevokeTokensRequest{UserId: uid})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Kicked != 2 || rep.ValidAfterMs < time.Now().Add(-time.Minute).UnixMilli() {
		t.Fatalf("revoke %+v", rep)
	}
	e.gate.mu.Lock()
	kicks := e.gate.kicks
	e.gate.mu.Unlock()
	if len(kicks) != 1 || kicks[0].Reason != user.ReasonRevoked || len(kicks[0].Targets) != 2 {
		t.Fatalf("one Kick call with both devices, got %+v", kicks)
	}
	for _, tg := range kicks[0].Targets {
		if tg.UserId != uid || (tg.ConnId != 11 && tg.ConnId != 12) {
			t.Fatalf("kick target %+v", tg)
		}
	}
	_, _, err = e.auth.Auth(context.Background(), auth.Conn{GateID: "g", ConnID: 1}, auth.Credentials{Token: old, DeviceID: "phone"})
	if c, _ := errcode.Of(err); c != errcode.BadToken {
		t.Fatalf("AUTH with a revoked token: %v, want 40101", err)
	}
	// A token minted after the revocation's second works.
	time.Sleep(time.Until(time.UnixMilli(rep.ValidAfterMs).Truncate(time.Second).Add(time.Second)))
	fresh, err := e.api.IssueToken(ctx, &logicv1.IssueTokenRequest{UserId: uid})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.auth.Auth(context.Background(), auth.Conn{GateID: "g", ConnID: 2}, auth.Credentials{Token: fresh.Token, DeviceID: "phone"}); err != nil {
		t.Fatalf("AUTH with a new token: %v", err)
	}
	// A user the server never saw is revoked too (self-minted tokens).
	never := testenv.RandomUserID()
	if rep, err := e.api.RevokeTokens(ctx, &logicv1.RevokeTokensRequest{UserId: never}); err != nil || rep.Kicked != 0 {
		t.Fatalf("revoke unknown %+v %v", rep, err)
	}
}

func TestRelations(t *testing.T) {
	e := newEnv(t)
	ctx := e.key
	u := e.users(t, 3)
	a, b, c := u[0], u[1], u[2]
	steps := []struct {
		name    string
		call    func() (*logicv1.ChangeReply, error)
		code    codes.Code
		changed bool
	}{
		{"add", func() (*logicv1.ChangeReply, error) {
			return e.api.AddFriend(ctx, &logicv1.FriendPair{UserId: a, FriendId: b})
		}, codes.OK, true},
		{"add again", func() (*logicv1.ChangeReply, error) {
			return e.api.AddFriend(ctx, &logicv1.FriendPair{UserId: b, FriendId: a})
		}, codes.OK, false},
		{"add unknown", func() (*logicv1.ChangeReply, error) {
			return e.api.AddFriend(ctx, &logicv1.FriendPair{UserId: a, FriendId: testenv.RandomUserID()})
		}, codes.NotFound, false},
		{"request", func() (*logicv1.ChangeReply, error) {
			return e.api.RequestFriend(ctx, &logicv1.FriendRequestRequest{UserId: c, FriendId: a, Note: "hi"})
		}, codes.OK, true},
		{"accept", func() (*logicv1.ChangeReply, error) {
			return e.api.AcceptFriend(ctx, &logicv1.FriendPair{UserId: a, FriendId: c})
		}, codes.OK, true},
		{"accept without request", func() (*logicv1.ChangeReply, error) {
			return e.api.AcceptFriend(ctx, &logicv1.FriendPair{UserId: b, FriendId: c})
		}, codes.NotFound, false},
		{"block", func() (*logicv1.ChangeReply, error) {
			return e.api.Block(ctx, &logicv1.BlockRequest{UserId: a, TargetId: c})
		}, codes.OK, true},
		{"request while blocked", func() (*logicv1.ChangeReply, error) {
			return e.api.RequestFriend(ctx, &logicv1.FriendRequestRequest{UserId: c, FriendId: b})
		}, codes.OK, true},
		{"remove", func() (*logicv1.ChangeReply, error) {
			return e.api.RemoveFriend(ctx, &logicv1.FriendPair{UserId: a, FriendId: c})
		}, codes.OK, true},
		{"remove again", func() (*logicv1.ChangeReply, error) {
			return e.api.RemoveFriend(ctx, &logicv1.FriendPair{UserId: c, FriendId: a})
		}, codes.OK, false},
	}
	wantNotes := 0
	for _, s := range steps {
		rep, err := s.call()
		wantCode(t, err, s.code, "")
		if err == nil && rep.Changed != s.changed {
			t.Fatalf("%s: changed %v, want %v", s.name, rep.Changed, s.changed)
		}
		if s.changed {
			wantNotes++
		}
		if _, n := e.notes.Counts(); n != wantNotes {
			t.Fatalf("%s: %d relation notifications, want %d (only changes notify)", s.name, n, wantNotes)
		}
	}
	fr, err := e.api.ListFriends(ctx, &logicv1.ListRequest{UserId: a})
	if err != nil || len(fr.Friends) != 1 || fr.Friends[0].UserId != b || fr.More {
		t.Fatalf("friends of a: %+v %v", fr, err)
	}
	bl, err := e.api.ListBlocks(ctx, &logicv1.ListRequest{UserId: a})
	if err != nil || len(bl.Blocked) != 1 || bl.Blocked[0].UserId != c {
		t.Fatalf("blocks of a: %+v %v", bl, err)
	}
	if rep, err := e.api.Unblock(ctx, &logicv1.BlockRequest{UserId: a, TargetId: c}); err != nil || !rep.Changed {
		t.Fatalf("unblock %+v %v", rep, err)
	}
	if bl, err := e.api.ListBlocks(ctx, &logicv1.ListRequest{UserId: a}); err != nil || len(bl.Blocked) != 0 {
		t.Fatalf("blocks after unblock: %+v %v", bl, err)
	}
}

func TestGroups(t *testing.T) {
	e := newEnv(t)
	ctx := e.key
	u := e.users(t, 5)
	owner, m1, m2, m3, outsider := u[0], u[1], u[2], u[3], u[4]
	created, err := e.api.CreateGroup(ctx, &logicv1.CreateGroupRequest{OwnerId: owner, MemberIds: []int64{m1, m2}, Name: "team"})
	if err != nil {
		t.Fatal(err)
	}
	g := created.Group
	if g.GroupId == 0 || g.ConversationId == 0 || g.MemberCount != 3 || g.OwnerId != owner || len(created.Added) != 3 {
		t.Fatalf("created %+v", created)
	}
	gid := g.GroupId
	future := time.Now().Add(time.Hour).UnixMilli()
	name := "renamed"
	steps := []struct {
		name  string
		call  func() (*logicv1.GroupReply, error)
		code  codes.Code
		check func(*logicv1.GroupReply) bool
	}{
		{"add by owner", func() (*logicv1.GroupReply, error) {
			return e.api.AddGroupMembers(ctx, &logicv1.ChangeGroupMembersRequest{OperatorId: owner, GroupId: gid, UserIds: []int64{m3}})
		}, codes.OK, func(r *logicv1.GroupReply) bool { return r.Group.MemberCount == 4 && len(r.Added) == 1 }},
		{"add by outsider", func() (*logicv1.GroupReply, error) {
			return e.api.AddGroupMembers(ctx, &logicv1.ChangeGroupMembersRequest{OperatorId: outsider, GroupId: gid, UserIds: []int64{outsider}})
		}, codes.PermissionDenied, nil},
		{"add to unknown group", func() (*logicv1.GroupReply, error) {
			return e.api.AddGroupMembers(ctx, &logicv1.ChangeGroupMembersRequest{GroupId: 12345, UserIds: []int64{m3}})
		}, codes.NotFound, nil},
		{"admin by system", func() (*logicv1.GroupReply, error) {
			return e.api.SetGroupRole(ctx, &logicv1.SetGroupRoleRequest{GroupId: gid, UserId: m1, Role: logicv1.GroupRole_GROUP_ROLE_ADMIN})
		}, codes.OK, func(r *logicv1.GroupReply) bool { return r.Changed }},
		{"mute all", func() (*logicv1.GroupReply, error) {
			return e.api.MuteGroup(ctx, &logicv1.MuteGroupRequest{OperatorId: m1, GroupId: gid, Mute: true})
		}, codes.OK, func(r *logicv1.GroupReply) bool { return r.Group.MuteAll }},
		{"mute member", func() (*logicv1.GroupReply, error) {
			return e.api.MuteGroupMember(ctx, &logicv1.MuteGroupMemberRequest{OperatorId: m1, GroupId: gid, UserId: m2, UntilMs: future})
		}, codes.OK, func(r *logicv1.GroupReply) bool { return r.Changed }},
		{"admin mutes admin", func() (*logicv1.GroupReply, error) {
			return e.api.MuteGroupMember(ctx, &logicv1.MuteGroupMemberRequest{OperatorId: m1, GroupId: gid, UserId: owner, UntilMs: future})
		}, codes.PermissionDenied, nil},
		{"update", func() (*logicv1.GroupReply, error) {
			return e.api.UpdateGroup(ctx, &logicv1.UpdateGroupRequest{OperatorId: owner, GroupId: gid, Name: &name})
		}, codes.OK, func(r *logicv1.GroupReply) bool { return r.Group.Name == "renamed" && r.Group.Announcement == "" }},
		{"remove", func() (*logicv1.GroupReply, error) {
			return e.api.RemoveGroupMembers(ctx, &logicv1.ChangeGroupMembersRequest{OperatorId: owner, GroupId: gid, UserIds: []int64{m3}})
		}, codes.OK, func(r *logicv1.GroupReply) bool { return len(r.Removed) == 1 && r.Group.MemberCount == 3 }},
		{"owner leaves", func() (*logicv1.GroupReply, error) {
			return e.api.LeaveGroup(ctx, &logicv1.LeaveGroupRequest{GroupId: gid, UserId: owner})
		}, codes.PermissionDenied, nil},
		{"transfer", func() (*logicv1.GroupReply, error) {
			return e.api.TransferGroup(ctx, &logicv1.TransferGroupRequest{OperatorId: owner, GroupId: gid, NewOwnerId: m1})
		}, codes.OK, func(r *logicv1.GroupReply) bool { return r.Group.OwnerId == m1 }},
		{"old owner leaves", func() (*logicv1.GroupReply, error) {
			return e.api.LeaveGroup(ctx, &logicv1.LeaveGroupRequest{GroupId: gid, UserId: owner})
		}, codes.OK, func(r *logicv1.GroupReply) bool { return len(r.Removed) == 1 && r.Removed[0] == owner }},
		{"leave again", func() (*logicv1.GroupReply, error) {
			return e.api.LeaveGroup(ctx, &logicv1.LeaveGroupRequest{GroupId: gid, UserId: owner})
		}, codes.OK, func(r *logicv1.GroupReply) bool { return !r.Changed }},
		{"dissolve", func() (*logicv1.GroupReply, error) {
			return e.api.DissolveGroup(ctx, &logicv1.GroupRef{OperatorId: m1, GroupId: gid})
		}, codes.OK, func(r *logicv1.GroupReply) bool { return r.Group.Status == 2 }},
		{"add after dissolve", func() (*logicv1.GroupReply, error) {
			return e.api.AddGroupMembers(ctx, &logicv1.ChangeGroupMembersRequest{GroupId: gid, UserIds: []int64{m3}})
		}, codes.FailedPrecondition, nil},
	}
	wantNotes := 1 // the create
	for _, s := range steps {
		r, err := s.call()
		wantCode(t, err, s.code, "")
		if err != nil {
			if n, _ := e.notes.Counts(); n != wantNotes {
				t.Fatalf("%s: %d group notifications, want %d", s.name, n, wantNotes)
			}
			continue
		}
		if s.check != nil && !s.check(r) {
			t.Fatalf("%s: %+v", s.name, r)
		}
		if r.Changed {
			wantNotes++
		}
		if n, _ := e.notes.Counts(); n != wantNotes {
			t.Fatalf("%s: %d group notifications, want %d (only changes notify)", s.name, n, wantNotes)
		}
	}
	info, err := e.api.GetGroup(ctx, &logicv1.GroupRef{GroupId: gid})
	if err != nil || info.Name != "renamed" || info.OwnerId != m1 || info.Status != 2 {
		t.Fatalf("get %+v %v", info, err)
	}
	if _, err := e.api.GetGroup(ctx, &logicv1.GroupRef{OperatorId: outsider, GroupId: gid}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("outsider reads: %v", err)
	}
	page, err := e.api.ListGroupMembers(ctx, &logicv1.ListGroupMembersRequest{OperatorId: m2, GroupId: gid, Limit: 1})
	if err != nil || len(page.Members) != 1 || page.NextUserId == 0 {
		t.Fatalf("first page %+v %v", page, err)
	}
	all, err := e.api.ListGroupMembers(ctx, &logicv1.ListGroupMembersRequest{GroupId: gid})
	if err != nil || len(all.Members) != 2 {
		t.Fatalf("members %+v %v", all, err)
	}
	for _, m := range all.Members {
		switch m.UserId {
		case m1:
			if m.Role != logicv1.GroupRole_GROUP_ROLE_OWNER {
				t.Fatalf("new owner %+v", m)
			}
		case m2:
			if m.MuteUntilMs != future {
				t.Fatalf("muted member %+v, want mute until %d", m, future)
			}
		default:
			t.Fatalf("unexpected member %+v", m)
		}
	}
}

func TestSendMessageAndHistory(t *testing.T) {
	e := newEnv(t)
	ctx := e.key
	u := e.users(t, 2)
	a, b := u[0], u[1]
	txt := func(s string) string { return `{"t":1,"text":"` + s + `"}` }
	sent, err := e.api.SendMessage(ctx, &logicv1.SendMessageRequest{SenderId: a, ToUserId: b, ClientMsgId: "m1", MessageType: 1, Content: txt("hello")})
	if err != nil {
		t.Fatal(err)
	}
	if sent.MsgId == 0 || sent.ConversationId == 0 || sent.ServerTimeMs == 0 || sent.ClientMsgId != "m1" {
		t.Fatalf("sent %+v", sent)
	}
	again, err := e.api.SendMessage(ctx, &logicv1.SendMessageRequest{SenderId: a, ToUserId: b, ClientMsgId: "m1", MessageType: 1, Content: txt("hello")})
	if err != nil || again.MsgId != sent.MsgId {
		t.Fatalf("idempotent retry %+v %v", again, err)
	}
	_, err = e.api.SendMessage(ctx, &logicv1.SendMessageRequest{SenderId: a, ToUserId: b, ClientMsgId: "m1", MessageType: 1, Content: txt("changed")})
	wantCode(t, err, codes.FailedPrecondition, "")
	_, err = e.api.SendMessage(ctx, &logicv1.SendMessageRequest{SenderId: a, ToUserId: b, ClientMsgId: "m2", MessageType: 2, Content: txt("x")})
	wantCode(t, err, codes.InvalidArgument, "")

	// The system account sends into a group it is no member of, with flags.
	grp, err := e.api.CreateGroup(ctx, &logicv1.CreateGroupRequest{OwnerId: a, MemberIds: []int64{b}, Name: "g"})
	if err != nil {
		t.Fatal(err)
	}
	sys, err := e.api.SendMessage(ctx, &logicv1.SendMessageRequest{System: true, GroupId: grp.Group.GroupId, ClientMsgId: "s1",
		MessageType: 9, Content: `{"t":9,"text":"welcome"}`, NoUnread: true, NoOfflinePush: true})
	if err != nil {
		t.Fatal(err)
	}
	if sys.ConversationId != grp.Group.ConversationId {
		t.Fatalf("system send went to %d, want %d", sys.ConversationId, grp.Group.ConversationId)
	}
	var sender int64
	if err := e.db.Get(&sender, "SELECT sender_id FROM t_messages WHERE id = ?", sys.MsgId); err != nil || sender != systemUserID {
		t.Fatalf("system message sender %d (%v), want %d", sender, err, systemUserID)
	}
	// Sending as a user who is not a member is refused.
	_, err = e.api.SendMessage(ctx, &logicv1.SendMessageRequest{SenderId: testenv.RandomUserID(), GroupId: grp.Group.GroupId, ClientMsgId: "x", MessageType: 1, Content: txt("x")})
	wantCode(t, err, codes.PermissionDenied, "")
	// The system account skips the P2P policy but not the recipient's
	// existence: no conversation with nobody.
	_, err = e.api.SendMessage(ctx, &logicv1.SendMessageRequest{System: true, ToUserId: testenv.RandomUserID(), ClientMsgId: "s2", MessageType: 9, Content: `{"t":9,"text":"hi"}`})
	wantCode(t, err, codes.NotFound, "")
	if _, err := e.api.SendMessage(ctx, &logicv1.SendMessageRequest{System: true, ToUserId: b, ClientMsgId: "s3", MessageType: 9, Content: `{"t":9,"text":"hi"}`}); err != nil {
		t.Fatalf("system message to an existing user: %v", err)
	}

	// History pages like SYNC_MESSAGES.
	for i := 2; i <= 4; i++ {
		if _, err := e.api.SendMessage(ctx, &logicv1.SendMessageRequest{SenderId: b, ToUserId: a, ClientMsgId: "r" + string(rune('0'+i)), MessageType: 1, Content: txt("r")}); err != nil {
			t.Fatal(err)
		}
	}
	h, err := e.api.GetHistory(ctx, &logicv1.GetHistoryRequest{UserId: a, ConversationId: sent.ConversationId, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Messages) != 2 || !h.More || h.Messages[0].MsgId != sent.MsgId || h.Messages[0].Content != txt("hello") || h.NextMsgId != h.Messages[1].MsgId {
		t.Fatalf("page 1 %+v", h)
	}
	h2, err := e.api.GetHistory(ctx, &logicv1.GetHistoryRequest{UserId: b, ConversationId: sent.ConversationId, AfterMsgId: h.NextMsgId})
	if err != nil || len(h2.Messages) != 2 || h2.More || h2.Messages[0].MsgId <= h.NextMsgId {
		t.Fatalf("page 2 %+v %v", h2, err)
	}
	_, err = e.api.GetHistory(ctx, &logicv1.GetHistoryRequest{UserId: testenv.RandomUserID(), ConversationId: sent.ConversationId})
	wantCode(t, err, codes.PermissionDenied, "")
}

func TestOnline(t *testing.T) {
	e := newEnv(t)
	ctx := e.key
	a, b, offline := testenv.RandomUserID(), testenv.RandomUserID(), testenv.RandomUserID()
	e.connect(t, a, "phone", 1)
	e.connect(t, a, "web", 2)
	e.connect(t, b, "phone", 3)

	pr, err := e.api.GetPresence(ctx, &logicv1.GetPresenceRequest{UserIds: []int64{a, offline, b, a}})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Users) != 3 || pr.Users[0].UserId != a || len(pr.Users[0].Devices) != 2 || len(pr.Users[1].Devices) != 0 || len(pr.Users[2].Devices) != 1 {
		t.Fatalf("presence %+v", pr)
	}
	if d := pr.Users[0].Devices[0]; d.DeviceId != "phone" || d.GateId != e.gate.id || d.ConnId != 1 || d.SinceMs != 1700000000001 || d.RealIp != "198.51.100.1" {
		t.Fatalf("device %+v", d)
	}
	if d := pr.Users[0].Devices[1]; d.DeviceId != "web" || d.ConnId != 2 || d.RealIp != "" {
		t.Fatalf("device with a route entry written without its real IP: %+v", d)
	}

	rep, err := e.api.PushToUsers(ctx, &logicv1.PushToUsersRequest{UserIds: []int64{a, offline}, Payload: `{"kind":"typing"}`})
	if err != nil || rep.Delivered != 2 || len(rep.FailedGates) != 0 {
		t.Fatalf("push %+v %v", rep, err)
	}
	e.gate.mu.Lock()
	push := e.gate.pushes[len(e.gate.pushes)-1]
	e.gate.mu.Unlock()
	var env envelope.Response
	if err := json.Unmarshal(push.Body, &env); err != nil || push.Command != uint32(protocol.CmdTransient) || env.Code != errcode.OK ||
		string(env.Data) != `{"payload":{"kind":"typing"}}` || len(push.Targets) != 2 {
		t.Fatalf("push %+v (%s) %v", push, push.Body, err)
	}

	br, err := e.api.Broadcast(ctx, &logicv1.BroadcastRequest{Payload: `{"notice":"maintenance"}`})
	if err != nil || br.Delivered < 3 {
		t.Fatalf("broadcast %+v %v", br, err)
	}
	e.gate.mu.Lock()
	nb := len(e.gate.broadcasts)
	e.gate.mu.Unlock()
	if nb != 1 {
		t.Fatalf("%d broadcasts reached the gate", nb)
	}

	gates, err := e.api.ListGates(ctx, &logicv1.ListGatesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var mine *logicv1.GateInfo
	for _, g := range gates.Gates {
		if g.GateId == e.gate.id {
			mine = g
		}
	}
	if mine == nil || mine.PushAddr != e.gate.addr || len(mine.ClientAddrs) != 1 || mine.ClientAddrs[0] != "tcp://203.0.113.1:8100" ||
		mine.Connections != 5 || mine.Authenticated != 4 || mine.Error != "" || mine.StartedAtMs == 0 {
		t.Fatalf("gates %+v", gates)
	}

	// The same list on the admin HTTP handler.
	w := httptest.NewRecorder()
	api.GatesHandler(e.online).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/gates", nil))
	var js struct {
		Gates []api.GateJSON `json:"gates"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &js); err != nil || w.Code != http.StatusOK {
		t.Fatalf("/gates %d %s %v", w.Code, w.Body, err)
	}
	found := false
	for _, g := range js.Gates {
		found = found || (g.GateID == e.gate.id && g.Connections == 5 && g.ClientAddrs[0] == "tcp://203.0.113.1:8100")
	}
	if !found {
		t.Fatalf("/gates %s", w.Body)
	}
}

// GetHistory's pages are bounded by the gRPC message, not by the clients'
// frame: three messages that SYNC_MESSAGES, within the default
// max_frame_size, can answer only one page at a time come in one page.
func TestGetHistoryPageIsNotBoundByTheClientFrame(t *testing.T) {
	e := newEnv(t)
	ctx := e.key
	u := e.users(t, 2)
	a, b := u[0], u[1]
	content := `{"t":1,"text":"` + strings.Repeat("x", 40<<10) + `"}`
	const n = 3
	var cid int64
	for i := range n {
		sent, err := e.api.SendMessage(ctx, &logicv1.SendMessageRequest{SenderId: a, ToUserId: b, ClientMsgId: fmt.Sprintf("big-%d", i), MessageType: 1, Content: content})
		if err != nil {
			t.Fatal(err)
		}
		cid = sent.ConversationId
	}
	if clientPage := protocol.PageBudget(frame.DefaultMaxFrameSize) / protocol.MessageBound(len(content), len("big-0")); clientPage >= n {
		t.Fatalf("the client frame would take %d such messages a page; the test needs fewer than %d", clientPage, n)
	}
	h, err := e.api.GetHistory(ctx, &logicv1.GetHistoryRequest{UserId: b, ConversationId: cid})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Messages) != n || h.More || h.NextMsgId != h.Messages[n-1].MsgId {
		t.Fatalf("got %d messages (more %v), want all %d in one page", len(h.Messages), h.More, n)
	}
	for _, m := range h.Messages {
		if m.Content != content || m.Status != protocol.StatusNormal {
			t.Fatalf("message %d: status %d, content of %d bytes", m.MsgId, m.Status, len(m.Content))
		}
	}
}

// KickUser kicks every device of the user or only the one named, with
// the reason given ("kicked" when none), and refuses bad fields before
// kicking anyone.
func TestKickUser(t *testing.T) {
	e := newEnv(t)
	ctx := e.key
	for _, tc := range []struct {
		name       string
		device     string
		reason     string
		wantReason string
		wantConns  []uint64
	}{
		{"every device, default reason", "", "", "kicked", []uint64{21, 22}},
		{"one device, own reason", "pad", "account under review", "account under review", []uint64{22}},
		{"a device that is not online", "watch", "", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uid := testenv.RandomUserID()
			e.connect(t, uid, "phone", 21)
			e.connect(t, uid, "pad", 22)
			e.gate.mu.Lock()
			before := len(e.gate.kicks)
			e.gate.mu.Unlock()
			rep, err := e.api.KickUser(ctx, &logicv1.KickUserRequest{UserId: uid, DeviceId: tc.device, Reason: tc.reason})
			if err != nil || rep.Kicked != uint32(len(tc.wantConns)) {
				t.Fatalf("KickUser: %+v (%v), want %d kicked", rep, err, len(tc.wantConns))
			}
			e.gate.mu.Lock()
			kicks := e.gate.kicks[before:]
			e.gate.mu.Unlock()
			if len(tc.wantConns) == 0 {
				if len(kicks) != 0 {
					t.Fatalf("kicks %+v, want none", kicks)
				}
				return
			}
			if len(kicks) != 1 || kicks[0].Reason != tc.wantReason || len(kicks[0].Targets) != len(tc.wantConns) {
				t.Fatalf("kicks %+v, want one with reason %q", kicks, tc.wantReason)
			}
			for _, tg := range kicks[0].Targets {
				if tg.UserId != uid || !slices.Contains(tc.wantConns, tg.ConnId) {
					t.Fatalf("kick target %+v, want one of %v", tg, tc.wantConns)
				}
			}
		})
	}
	for _, tc := range []struct {
		name  string
		req   *logicv1.KickUserRequest
		field string
	}{
		{"no user", &logicv1.KickUserRequest{}, "user_id"},
		{"bad device", &logicv1.KickUserRequest{UserId: 1, DeviceId: "a b"}, "device_id"},
		{"long reason", &logicv1.KickUserRequest{UserId: 1, Reason: strings.Repeat("r", 65)}, "reason"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.api.KickUser(ctx, tc.req)
			wantCode(t, err, codes.InvalidArgument, tc.field)
		})
	}
}
