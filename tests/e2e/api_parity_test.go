package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// parityState is what a parity sequence has created so far, on one side.
type parityState struct {
	group, conv, msg, endpoint int64
	// mediaKey is the key of the uploaded picture, mediaMsg the message
	// carrying it.
	mediaKey string
	mediaMsg int64
}

// parityStep is one call of the parity sequence: its request, built from
// what earlier steps created, and what to keep of its answer.
type parityStep struct {
	method string
	req    func(s *parityState) proto.Message
	keep   func(s *parityState, resp proto.Message)
	// code is the error code the step must get; 0: it must succeed.
	code int
}

// parityAnswer is one call's outcome: the answer, or the error's code.
type parityAnswer struct {
	resp proto.Message
	code int
}

// apiCaller makes one Api call the way one front door does.
type apiCaller func(ctx context.Context, md protoreflect.MethodDescriptor, req proto.Message) parityAnswer

// grpcCaller calls the Api over gRPC; an error's code is its ErrorInfo
// reason.
func grpcCaller(t *testing.T, cc *grpc.ClientConn) apiCaller {
	return func(ctx context.Context, md protoreflect.MethodDescriptor, req proto.Message) parityAnswer {
		resp := newMessage(t, md.Output())
		err := cc.Invoke(metadata.AppendToOutgoingContext(ctx, "x-api-key", framework.APIKey),
			"/"+string(md.Parent().FullName())+"/"+string(md.Name()), req, resp)
		if err == nil {
			return parityAnswer{resp: resp}
		}
		for _, d := range status.Convert(err).Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				if n, err := strconv.Atoi(info.Reason); err == nil {
					return parityAnswer{code: n}
				}
			}
		}
		t.Fatalf("%s over gRPC: %v carries no error code", md.Name(), err)
		return parityAnswer{}
	}
}

var pathField = regexp.MustCompile(`\{([a-z_]+)\}`)

// httpCaller calls the Api over HTTP/JSON at the route the method's
// google.api.http rule names: path fields from the request, the rest as
// the JSON body, or as query parameters for a rule without a body.
func httpCaller(t *testing.T, addr string) apiCaller {
	return func(ctx context.Context, md protoreflect.MethodDescriptor, req proto.Message) parityAnswer {
		rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
		var method, tmpl string
		switch {
		case rule.GetGet() != "":
			method, tmpl = http.MethodGet, rule.GetGet()
		case rule.GetPost() != "":
			method, tmpl = http.MethodPost, rule.GetPost()
		case rule.GetPut() != "":
			method, tmpl = http.MethodPut, rule.GetPut()
		case rule.GetPatch() != "":
			method, tmpl = http.MethodPatch, rule.GetPatch()
		case rule.GetDelete() != "":
			method, tmpl = http.MethodDelete, rule.GetDelete()
		default:
			t.Fatalf("%s has no HTTP rule", md.Name())
		}
		rest := proto.Clone(req).ProtoReflect()
		path := pathField.ReplaceAllStringFunc(tmpl, func(m string) string {
			fd := rest.Descriptor().Fields().ByName(protoreflect.Name(m[1 : len(m)-1]))
			if fd == nil {
				t.Fatalf("%s: path field %s not in %s", md.Name(), m, rest.Descriptor().FullName())
			}
			v := rest.Get(fd)
			rest.Clear(fd)
			return url.PathEscape(fmt.Sprint(v.Interface()))
		})
		fields, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(rest.Interface())
		if err != nil {
			t.Fatal(err)
		}
		body := ""
		if rule.GetBody() != "" {
			body = string(fields)
		} else {
			var m map[string]any
			if err := json.Unmarshal(fields, &m); err != nil {
				t.Fatal(err)
			}
			q := url.Values{}
			for k, v := range m {
				if list, ok := v.([]any); ok {
					for _, x := range list {
						q.Add(k, fmt.Sprint(x))
					}
				} else {
					q.Set(k, fmt.Sprint(v))
				}
			}
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
		}
		code, b := httpCall(t, addr, framework.APIKey, method, path, body)
		if code != http.StatusOK {
			var e struct {
				Code int `json:"code"`
			}
			if err := json.Unmarshal(b, &e); err != nil || e.Code == 0 {
				t.Fatalf("%s %s: %d %s is not the error shape", method, path, code, b)
			}
			return parityAnswer{code: e.Code}
		}
		resp := newMessage(t, md.Output())
		if err := protojson.Unmarshal(b, resp); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
		return parityAnswer{resp: resp}
	}
}

func newMessage(t *testing.T, d protoreflect.MessageDescriptor) proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		t.Fatal(err)
	}
	return mt.New().Interface()
}

// canon rewrites an answer so that two clusters' answers to the same
// sequence compare equal when they mean the same: ids (fields named id or
// *_id, *_ids) become their order of first appearance in the sequence,
// times become 1, and values that belong to one cluster (tokens,
// secrets, addresses, gate ids and versions, connection ids) become "x".
type canon struct{ ids map[int64]int64 }

func (c *canon) id(v int64) int64 {
	if v == 0 {
		return 0
	}
	n, ok := c.ids[v]
	if !ok {
		n = int64(len(c.ids) + 1)
		c.ids[v] = n
	}
	return n
}

var clusterOwn = map[string]bool{"key": true, "url": true, "token": true, "secret": true, "previous_secret": true, "push_addr": true, "client_addrs": true,
	"gate_id": true, "version": true, "real_ip": true, "webhook_id": true, "conn_id": true, "failed_gates": true}

func (c *canon) message(m protoreflect.Message) {
	fields := m.Descriptor().Fields()
	// Descriptor order, so both sides number ids alike.
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		name := string(fd.Name())
		isID := name == "id" || strings.HasSuffix(name, "_id") || strings.HasSuffix(name, "_ids")
		isTime := strings.HasSuffix(name, "_ms")
		switch {
		case clusterOwn[name]:
			switch {
			case fd.IsList():
				m.Set(fd, protoreflect.ValueOfList(m.NewField(fd).List()))
			case fd.Kind() == protoreflect.StringKind:
				m.Set(fd, protoreflect.ValueOfString("x"))
			case fd.Kind() == protoreflect.Uint64Kind:
				m.Set(fd, protoreflect.ValueOfUint64(1))
			}
		case fd.Kind() == protoreflect.MessageKind && fd.IsList():
			l := m.Get(fd).List()
			for j := range l.Len() {
				c.message(l.Get(j).Message())
			}
		case fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			c.message(m.Mutable(fd).Message())
		case fd.Kind() == protoreflect.Int64Kind && isID && fd.IsList():
			l := m.Mutable(fd).List()
			for j := range l.Len() {
				l.Set(j, protoreflect.ValueOfInt64(c.id(l.Get(j).Int())))
			}
		case fd.Kind() == protoreflect.Int64Kind && isID:
			m.Set(fd, protoreflect.ValueOfInt64(c.id(m.Get(fd).Int())))
		case fd.Kind() == protoreflect.Int64Kind && isTime:
			m.Set(fd, protoreflect.ValueOfInt64(1))
		}
	}
}

// paritySteps is a sequence that calls every Api method at least once,
// with a few refusals: the same on both sides.
func paritySteps(receiver string) []parityStep {
	const a, b, c, d, nobody = 7_610_001, 7_610_002, 7_610_003, 7_610_004, 7_619_999
	in := func(m proto.Message) func(*parityState) proto.Message {
		return func(*parityState) proto.Message { return m }
	}
	text := `{"t":1,"text":"parity"}`
	return []parityStep{
		{method: "UpsertUser", req: in(&logicv1.UpsertUserRequest{UserId: a, Nickname: proto.String("ann"), Extra: proto.String(`{"vip":true}`)})},
		{method: "UpsertUser", req: in(&logicv1.UpsertUserRequest{UserId: b, Nickname: proto.String("ben")})},
		{method: "UpsertUser", req: in(&logicv1.UpsertUserRequest{UserId: c})},
		{method: "UpsertUser", req: in(&logicv1.UpsertUserRequest{UserId: d})},
		{method: "GetUser", req: in(&logicv1.GetUserRequest{UserId: a})},
		{method: "GetUser", req: in(&logicv1.GetUserRequest{UserId: nobody}), code: 40401},
		{method: "IssueToken", req: in(&logicv1.IssueTokenRequest{UserId: a, DeviceId: "phone", TtlSeconds: 3600})},
		{method: "IssueToken", req: in(&logicv1.IssueTokenRequest{UserId: a, DeviceId: "bad device!"}), code: 40001},
		{method: "AddFriend", req: in(&logicv1.FriendPair{UserId: a, FriendId: b})},
		{method: "AddFriend", req: in(&logicv1.FriendPair{UserId: a, FriendId: b})},
		{method: "RequestFriend", req: in(&logicv1.FriendRequestRequest{UserId: a, FriendId: c, Note: "hi"})},
		{method: "AcceptFriend", req: in(&logicv1.FriendPair{UserId: c, FriendId: a})},
		{method: "ListFriends", req: in(&logicv1.ListRequest{UserId: a, Limit: 10})},
		{method: "Block", req: in(&logicv1.BlockRequest{UserId: a, TargetId: d})},
		{method: "ListBlocks", req: in(&logicv1.ListRequest{UserId: a})},
		{method: "Unblock", req: in(&logicv1.BlockRequest{UserId: a, TargetId: d})},
		{method: "RemoveFriend", req: in(&logicv1.FriendPair{UserId: a, FriendId: b})},
		{method: "CreateGroup", req: in(&logicv1.CreateGroupRequest{OwnerId: a, MemberIds: []int64{b, c}, Name: "parity", Announcement: "hello"}),
			keep: func(s *parityState, r proto.Message) {
				s.group = r.(*logicv1.GroupReply).GetGroup().GetGroupId()
				s.conv = r.(*logicv1.GroupReply).GetGroup().GetConversationId()
			}},
		{method: "AddGroupMembers", req: func(s *parityState) proto.Message {
			return &logicv1.ChangeGroupMembersRequest{OperatorId: a, GroupId: s.group, UserIds: []int64{d}}
		}},
		{method: "SetGroupRole", req: func(s *parityState) proto.Message {
			return &logicv1.SetGroupRoleRequest{OperatorId: a, GroupId: s.group, UserId: b, Role: logicv1.GroupRole_GROUP_ROLE_ADMIN}
		}},
		{method: "SetGroupRole", req: func(s *parityState) proto.Message {
			return &logicv1.SetGroupRoleRequest{OperatorId: c, GroupId: s.group, UserId: d, Role: logicv1.GroupRole_GROUP_ROLE_ADMIN}
		}, code: 40301},
		{method: "MuteGroupMember", req: func(s *parityState) proto.Message {
			return &logicv1.MuteGroupMemberRequest{OperatorId: a, GroupId: s.group, UserId: c, UntilMs: time.Now().Add(time.Hour).UnixMilli()}
		}},
		{method: "MuteGroup", req: func(s *parityState) proto.Message {
			return &logicv1.MuteGroupRequest{OperatorId: a, GroupId: s.group, Mute: true}
		}},
		{method: "MuteGroup", req: func(s *parityState) proto.Message {
			return &logicv1.MuteGroupRequest{OperatorId: a, GroupId: s.group, Mute: false}
		}},
		{method: "UpdateGroup", req: func(s *parityState) proto.Message {
			return &logicv1.UpdateGroupRequest{OperatorId: a, GroupId: s.group, Name: proto.String("parity 2")}
		}},
		{method: "GetGroup", req: func(s *parityState) proto.Message { return &logicv1.GroupRef{OperatorId: a, GroupId: s.group} }},
		{method: "ListGroupMembers", req: func(s *parityState) proto.Message {
			return &logicv1.ListGroupMembersRequest{OperatorId: a, GroupId: s.group, Limit: 10}
		}},
		{method: "RemoveGroupMembers", req: func(s *parityState) proto.Message {
			return &logicv1.ChangeGroupMembersRequest{OperatorId: a, GroupId: s.group, UserIds: []int64{d}}
		}},
		{method: "LeaveGroup", req: func(s *parityState) proto.Message { return &logicv1.LeaveGroupRequest{GroupId: s.group, UserId: c} }},
		{method: "SendMessage", req: func(s *parityState) proto.Message {
			return &logicv1.SendMessageRequest{SenderId: a, GroupId: s.group, ClientMsgId: "parity-g", MessageType: 1, Content: text}
		}},
		{method: "SendMessage", req: in(&logicv1.SendMessageRequest{SenderId: a, ToUserId: b, ClientMsgId: "parity-1", MessageType: 1, Content: text}),
			keep: func(s *parityState, r proto.Message) {
				s.msg = r.(*logicv1.SendMessageReply).GetMsgId()
				s.conv = r.(*logicv1.SendMessageReply).GetConversationId()
			}},
		{method: "SendMessage", req: in(&logicv1.SendMessageRequest{SenderId: a, ToUserId: b, ClientMsgId: "parity-1", MessageType: 1, Content: text})},
		{method: "SendMessage", req: in(&logicv1.SendMessageRequest{SenderId: a, ToUserId: b, MessageType: 1, Content: text}), code: 40001},
		{method: "EditMessage", req: func(s *parityState) proto.Message {
			return &logicv1.EditMessageRequest{SenderId: a, MsgId: s.msg, Content: `{"t":1,"text":"parity, edited"}`}
		}},
		{method: "EditMessage", req: func(s *parityState) proto.Message {
			return &logicv1.EditMessageRequest{SenderId: b, MsgId: s.msg, Content: `{"t":1,"text":"not mine"}`}
		}, code: 40301},
		{method: "AddReaction", req: func(s *parityState) proto.Message {
			return &logicv1.ReactionRequest{UserId: b, MsgId: s.msg, Emoji: "👍"}
		}},
		{method: "AddReaction", req: func(s *parityState) proto.Message {
			return &logicv1.ReactionRequest{UserId: b, MsgId: s.msg, Emoji: "👍"}
		}, code: 40902},
		{method: "AddReaction", req: func(s *parityState) proto.Message {
			return &logicv1.ReactionRequest{UserId: b, MsgId: s.msg, Emoji: "+1"}
		}, code: 40001},
		{method: "AddReaction", req: func(s *parityState) proto.Message {
			return &logicv1.ReactionRequest{UserId: c, MsgId: s.msg, Emoji: "👍"}
		}, code: 40301},
		{method: "AddReaction", req: in(&logicv1.ReactionRequest{UserId: b, MsgId: 1, Emoji: "👍"}), code: 40401},
		{method: "AddReaction", req: func(s *parityState) proto.Message {
			return &logicv1.ReactionRequest{UserId: a, MsgId: s.msg, Emoji: "❤️"}
		}},
		{method: "RemoveReaction", req: func(s *parityState) proto.Message {
			return &logicv1.ReactionRequest{UserId: a, MsgId: s.msg, Emoji: "❤️"}
		}},
		{method: "RemoveReaction", req: func(s *parityState) proto.Message {
			return &logicv1.ReactionRequest{UserId: a, MsgId: s.msg, Emoji: "❤️"}
		}},
		{method: "ListReactions", req: func(s *parityState) proto.Message {
			return &logicv1.ListReactionsRequest{UserId: a, ConversationId: s.conv, MsgIds: []int64{s.msg}}
		}},
		{method: "ListReactions", req: func(s *parityState) proto.Message {
			return &logicv1.ListReactionsRequest{UserId: a, ConversationId: s.conv}
		}, code: 40001},
		{method: "ListReactors", req: func(s *parityState) proto.Message {
			return &logicv1.ListReactorsRequest{UserId: a, MsgId: s.msg, Emoji: "👍", Limit: 10}
		}},
		{method: "ListReactors", req: func(s *parityState) proto.Message {
			return &logicv1.ListReactorsRequest{UserId: a, MsgId: s.msg, Emoji: "👍", Limit: 101}
		}, code: 40001},
		{method: "DeleteMessageForEveryone", req: in(&logicv1.DeleteMessageForEveryoneRequest{MsgId: 1}), code: 40401},
		{method: "SendSignal", req: func(s *parityState) proto.Message {
			return &logicv1.SendSignalRequest{SenderId: a, ConversationId: s.conv, Kind: "typing"}
		}},
		{method: "SendSignal", req: func(s *parityState) proto.Message {
			return &logicv1.SendSignalRequest{SenderId: a, ConversationId: s.conv, Kind: "Not A Kind"}
		}, code: 40001},
		{method: "SendSignal", req: func(s *parityState) proto.Message {
			return &logicv1.SendSignalRequest{SenderId: c, ConversationId: s.conv, Kind: "typing"}
		}, code: 40301},
		{method: "DeleteMessageForEveryone", req: in(&logicv1.DeleteMessageForEveryoneRequest{MsgId: 0}), code: 40001},
		{method: "DeleteMessageForEveryone", req: in(&logicv1.DeleteMessageForEveryoneRequest{MsgId: 1, ConversationId: -1}), code: 40001},
		{method: "EditMessage", req: in(&logicv1.EditMessageRequest{SenderId: a, MsgId: -1, Content: `{"t":1,"text":"x"}`}), code: 40001},
		{method: "GetHistory", req: func(s *parityState) proto.Message {
			return &logicv1.GetHistoryRequest{UserId: b, ConversationId: s.conv, Limit: 10}
		}},
		{method: "DeleteMessageForEveryone", req: func(s *parityState) proto.Message {
			return &logicv1.DeleteMessageForEveryoneRequest{MsgId: s.msg}
		}},
		{method: "GetHistory", req: func(s *parityState) proto.Message {
			return &logicv1.GetHistoryRequest{UserId: a, ConversationId: s.conv, Limit: 10}
		}},
		{method: "CreateUpload", req: in(&logicv1.CreateUploadRequest{UserId: a, Kind: "image", Size: int64(len(tinyPNG)), ContentType: "image/png"}),
			keep: func(s *parityState, r proto.Message) {
				up := r.(*logicv1.CreateUploadReply)
				s.mediaKey = up.GetKey()
				// The bytes go to the store; a failed PUT shows as the
				// complete step's 40401.
				req, err := http.NewRequest(up.GetMethod(), up.GetUrl(), strings.NewReader(string(tinyPNG)))
				if err != nil {
					return
				}
				for k, v := range up.GetHeaders() {
					req.Header.Set(k, v)
				}
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}},
		{method: "CreateUpload", req: in(&logicv1.CreateUploadRequest{UserId: a, Kind: "sticker", Size: 10, ContentType: "image/png"}), code: 40001},
		{method: "CompleteUpload", req: func(s *parityState) proto.Message {
			return &logicv1.CompleteUploadRequest{UserId: b, Key: s.mediaKey}
		}, code: 40401},
		{method: "CompleteUpload", req: func(s *parityState) proto.Message {
			return &logicv1.CompleteUploadRequest{UserId: a, Key: s.mediaKey}
		}},
		{method: "SendMessage", req: func(s *parityState) proto.Message {
			return &logicv1.SendMessageRequest{SenderId: a, ToUserId: b, ClientMsgId: "parity-img", MessageType: 2,
				Content: `{"t":2,"key":"` + s.mediaKey + `","width":1,"height":1}`}
		}, keep: func(s *parityState, r proto.Message) { s.mediaMsg = r.(*logicv1.SendMessageReply).GetMsgId() }},
		{method: "GetDownloadUrl", req: func(s *parityState) proto.Message {
			return &logicv1.GetDownloadUrlRequest{UserId: b, MsgId: s.mediaMsg}
		}},
		{method: "GetDownloadUrl", req: func(s *parityState) proto.Message {
			return &logicv1.GetDownloadUrlRequest{UserId: d, MsgId: s.mediaMsg}
		}, code: 40301},
		{method: "TransferGroup", req: func(s *parityState) proto.Message {
			return &logicv1.TransferGroupRequest{OperatorId: a, GroupId: s.group, NewOwnerId: b}
		}},
		{method: "DissolveGroup", req: func(s *parityState) proto.Message { return &logicv1.GroupRef{OperatorId: b, GroupId: s.group} }},
		{method: "PushToUsers", req: in(&logicv1.PushToUsersRequest{UserIds: []int64{a, b}, Payload: `{"kind":"parity"}`})},
		{method: "Broadcast", req: in(&logicv1.BroadcastRequest{Payload: `{"kind":"parity"}`})},
		{method: "GetPresence", req: in(&logicv1.GetPresenceRequest{UserIds: []int64{a, b}})},
		{method: "KickUser", req: in(&logicv1.KickUserRequest{UserId: a, DeviceId: "phone", Reason: "parity"})},
		{method: "ListGates", req: in(&logicv1.ListGatesRequest{})},
		{method: "RegisterPushToken", req: in(&logicv1.RegisterPushTokenRequest{UserId: a, DeviceId: "phone", Platform: "fcm", Token: "parity-token"})},
		{method: "SetPushSettings", req: in(&logicv1.PushSettings{UserId: a, Preview: "sender"})},
		{method: "GetPushSettings", req: in(&logicv1.GetPushSettingsRequest{UserId: a})},
		{method: "UnregisterPushToken", req: in(&logicv1.UnregisterPushTokenRequest{UserId: a, DeviceId: "phone"})},
		{method: "CreateWebhookEndpoint", req: in(&logicv1.CreateWebhookEndpointRequest{Url: receiver, Events: []string{"user.online"}}),
			keep: func(s *parityState, r proto.Message) { s.endpoint = r.(*logicv1.WebhookEndpoint).GetEndpointId() }},
		{method: "CreateWebhookEndpoint", req: in(&logicv1.CreateWebhookEndpointRequest{Url: "ftp://example.com/"}), code: 40001},
		{method: "ListWebhookEndpoints", req: in(&logicv1.ListWebhookEndpointsRequest{})},
		{method: "RotateWebhookSecret", req: func(s *parityState) proto.Message {
			return &logicv1.RotateWebhookSecretRequest{EndpointId: s.endpoint, GraceSeconds: 60}
		}},
		{method: "TestWebhookEndpoint", req: func(s *parityState) proto.Message { return &logicv1.WebhookEndpointRef{EndpointId: s.endpoint} }},
		{method: "ReplayWebhookEndpoint", req: func(s *parityState) proto.Message {
			return &logicv1.ReplayWebhookEndpointRequest{EndpointId: s.endpoint}
		}},
		{method: "DisableWebhookEndpoint", req: func(s *parityState) proto.Message { return &logicv1.WebhookEndpointRef{EndpointId: s.endpoint} }},
		{method: "PullUpstream", req: in(&logicv1.PullUpstreamRequest{Service: "orders", MaxItems: 10})},
		{method: "PullUpstream", req: in(&logicv1.PullUpstreamRequest{Service: "unknown"}), code: 40401},
		{method: "AckUpstream", req: in(&logicv1.AckUpstreamRequest{Service: "orders"}), code: 40001},
		{method: "RevokeTokens", req: in(&logicv1.RevokeTokensRequest{UserId: a})},
		{method: "DisableUser", req: in(&logicv1.DisableUserRequest{UserId: d})},
		{method: "EnableUser", req: in(&logicv1.EnableUserRequest{UserId: d})},
		{method: "EnableUser", req: in(&logicv1.EnableUserRequest{UserId: nobody}), code: 40401},
	}
}

// TestEveryAPIMethodAnswersTheSameOverHTTPAsOverGRPC runs one sequence
// that calls every logic.v1.Api method (and a few refusals) over gRPC on
// one cluster and over HTTP/JSON on an identical one, and compares each
// answer, or error code, after ids are numbered by first appearance and
// times and cluster-own values (tokens, secrets, addresses) masked. A
// method of the service the sequence does not call fails the test.
func TestEveryAPIMethodAnswersTheSameOverHTTPAsOverGRPC(t *testing.T) {
	t.Parallel()
	rcv := newHookReceiver(t, hookSecret)
	opts := framework.Options{Gates: 1, LogicEnv: []string{
		"IM_LOGIC_UPSTREAM_SERVICES=orders",
		"IM_LOGIC_WEBHOOK_ENABLED=true",
		"IM_LOGIC_WEBHOOK_ALLOW_PRIVATE_URLS=true",
		"IM_LOGIC_REQUEST_TIMEOUT=2s", "IM_LOGIC_WEBHOOK_SETTLE=2500ms",
	}}
	overGRPC := framework.NewCluster(t, opts)
	overHTTP := framework.NewCluster(t, opts)
	svc := logicv1.File_logic_v1_api_proto.Services().ByName("Api")
	steps := paritySteps(rcv.url())
	called := map[string]bool{}
	for _, st := range steps {
		if svc.Methods().ByName(protoreflect.Name(st.method)) == nil {
			t.Fatalf("the sequence calls %s, which the Api does not have", st.method)
		}
		called[st.method] = true
	}
	for i := range svc.Methods().Len() {
		if m := svc.Methods().Get(i); !called[string(m.Name())] {
			t.Errorf("the sequence never calls %s: add it", m.Name())
		}
	}
	if t.Failed() {
		return
	}

	ctx := ctxT(t, 2*time.Minute)
	sides := []struct {
		name  string
		call  apiCaller
		state parityState
		canon canon
	}{
		{name: "gRPC", call: grpcCaller(t, dialGRPC(t, overGRPC.Logics[0].GRPCAddr)), canon: canon{ids: map[int64]int64{}}},
		{name: "HTTP", call: httpCaller(t, overHTTP.Logics[0].HTTPAddr), canon: canon{ids: map[int64]int64{}}},
	}
	for i, st := range steps {
		md := svc.Methods().ByName(protoreflect.Name(st.method))
		var answers [2]parityAnswer
		for k := range sides {
			s := &sides[k]
			ans := s.call(ctx, md, st.req(&s.state))
			if ans.resp != nil {
				if st.keep != nil {
					st.keep(&s.state, ans.resp)
				}
				s.canon.message(ans.resp.ProtoReflect())
			}
			answers[k] = ans
		}
		g, h := answers[0], answers[1]
		switch {
		case g.code != st.code:
			t.Errorf("step %d %s: gRPC answered code %d, want %d", i, st.method, g.code, st.code)
		case g.code != h.code:
			t.Errorf("step %d %s: gRPC answered code %d, HTTP %d", i, st.method, g.code, h.code)
		case g.resp != nil && !proto.Equal(g.resp, h.resp):
			t.Errorf("step %d %s: answers differ\ngRPC: %s\nHTTP: %s", i, st.method,
				prototext.Format(g.resp), prototext.Format(h.resp))
		}
	}
}
