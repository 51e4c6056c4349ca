package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// step is one request of a scenario: the steps of a table run in order,
// because each answer depends on what the ones before changed.
type step struct {
	name string
	user int64
	body string
	want errcode.Code // "" is OK
	// msg, when set, must occur in the envelope's msg (a 40001 names its
	// field).
	msg string
	// notified: the change must be told to the notifier exactly once;
	// otherwise not at all.
	notified bool
	check    func(t *testing.T, data json.RawMessage)
}

// run sends the steps as command cmd and checks each answer and the
// notifier's count (group changes for GROUP, relation changes otherwise).
func run(t *testing.T, e *env, cmd uint16, steps []step) {
	t.Helper()
	ctx := context.Background()
	for _, s := range steps {
		if s.want == "" {
			s.want = errcode.OK
		}
		gBefore, rBefore := e.notes.Counts()
		resp := e.handler.Handle(ctx, "gate-social", &logicv1.Request{ConnId: 1, Command: uint32(cmd),
			Session: &logicv1.Session{UserId: s.user, DeviceId: "d"}, Body: []byte(s.body)})
		r := decode(t, resp.Body)
		if r.Code != s.want || resp.Command != uint32(cmd) {
			t.Fatalf("%s: command %d code %s (%s), want %d %s", s.name, resp.Command, r.Code, r.Msg, cmd, s.want)
		}
		if s.msg != "" && !strings.Contains(r.Msg, s.msg) {
			t.Fatalf("%s: msg %q, want it to contain %q", s.name, r.Msg, s.msg)
		}
		if s.want != errcode.OK && string(r.Data) != "{}" {
			t.Fatalf("%s: a refusal with data %s", s.name, r.Data)
		}
		gAfter, rAfter := e.notes.Counts()
		notified := rAfter - rBefore
		if cmd == protocol.CmdGroup {
			notified = gAfter - gBefore
		}
		if want := map[bool]int{true: 1, false: 0}[s.notified]; notified != want || gAfter-gBefore+rAfter-rBefore != want {
			t.Fatalf("%s: notified %d group / %d relation changes, want %d", s.name, gAfter-gBefore, rAfter-rBefore, want)
		}
		if s.check != nil {
			s.check(t, r.Data)
		}
	}
}

// unmarshal decodes data into a T; it fails the test on a mistake.
func unmarshal[T any](t *testing.T, data json.RawMessage) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("data %s: %v", data, err)
	}
	return v
}

// changed checks a {"changed"} answer.
func changed(want bool) func(t *testing.T, data json.RawMessage) {
	return func(t *testing.T, data json.RawMessage) {
		t.Helper()
		if got := unmarshal[protocol.ChangeReply](t, data); got.Changed != want || !json.Valid(data) {
			t.Fatalf("data %s, want changed %v", data, want)
		}
	}
}

// idsAreStrings fails when an id field of data is written as a number.
func idsAreStrings(t *testing.T, data json.RawMessage, fields ...string) {
	t.Helper()
	for _, f := range fields {
		d := string(data)
		if strings.Contains(d, `"`+f+`":`) && !strings.Contains(d, `"`+f+`":"`) &&
			!strings.Contains(d, `"`+f+`":["`) && !strings.Contains(d, `"`+f+`":[]`) {
			t.Fatalf("%s is not a string in %s", f, data)
		}
	}
}

func ensureUsers(t *testing.T, e *env, users ...int64) {
	t.Helper()
	for _, u := range users {
		if err := e.st.EnsureUser(context.Background(), u, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
}

// RELATION (19) over the relation service: bad input is 40001 naming the
// field, the domain's refusals keep their codes, every change that Changed
// is notified once and repeats are not, lists write ids as strings.
func TestRelationCommand(t *testing.T) {
	e := newEnv(t, 34)
	a, b, c := testenv.RandomUserID(), testenv.RandomUserID(), testenv.RandomUserID()
	unknown := testenv.RandomUserID()
	ensureUsers(t, e, a, b, c)
	rel := func(op string, uid int64, extra string) string {
		return fmt.Sprintf(`{"op":%q,"user_id":"%d"%s}`, op, uid, extra)
	}
	run(t, e, protocol.CmdRelation, []step{
		// Bad input.
		{name: "invalid JSON", user: a, body: `{"op":`, want: errcode.InvalidArgument, msg: "invalid JSON body"},
		{name: "empty body", user: a, body: ``, want: errcode.InvalidArgument},
		{name: "not an object", user: a, body: `[1]`, want: errcode.InvalidArgument},
		{name: "no op", user: a, body: `{}`, want: errcode.InvalidArgument, msg: "op: required"},
		{name: "unknown op", user: a, body: `{"op":"befriend"}`, want: errcode.InvalidArgument, msg: `op: unknown op "befriend"`},
		{name: "op not a string", user: a, body: `{"op":7}`, want: errcode.InvalidArgument, msg: "invalid argument: op:"},
		{name: "request without user_id", user: a, body: `{"op":"request"}`, want: errcode.InvalidArgument, msg: "user_id: required"},
		{name: "user_id not an integer", user: a, body: `{"op":"block","user_id":"abc"}`, want: errcode.InvalidArgument, msg: "invalid argument: user_id:"},
		{name: "user_id a fraction", user: a, body: `{"op":"block","user_id":1.5}`, want: errcode.InvalidArgument, msg: "invalid argument: user_id:"},
		{name: "user_id negative", user: a, body: `{"op":"block","user_id":-3}`, want: errcode.InvalidArgument, msg: "user_id"},
		{name: "remark without remark", user: a, body: rel("remark", b, ""), want: errcode.InvalidArgument, msg: "remark: required"},
		{name: "remark not a string", user: a, body: rel("remark", b, `,"remark":5`), want: errcode.InvalidArgument, msg: "invalid argument: remark:"},
		{name: "limit too large", user: a, body: `{"op":"friends","limit":501}`, want: errcode.InvalidArgument, msg: "limit"},
		{name: "after negative", user: a, body: `{"op":"friends","after":"-1"}`, want: errcode.InvalidArgument, msg: "after"},
		{name: "after not an integer", user: a, body: `{"op":"blocks","after":"x"}`, want: errcode.InvalidArgument, msg: "invalid argument: after:"},
		{name: "befriend yourself", user: a, body: rel("request", a, ""), want: errcode.InvalidArgument},
		{name: "note too long", user: a, body: rel("request", b, `,"note":"`+strings.Repeat("n", 129)+`"`), want: errcode.InvalidArgument, msg: "note"},
		// Domain refusals keep their codes.
		{name: "request an unknown user", user: a, body: rel("request", unknown, ""), want: errcode.Forbidden},
		{name: "accept without a request", user: b, body: rel("accept", a, ""), want: errcode.NotFound},
		{name: "remark a stranger", user: a, body: rel("remark", b, `,"remark":"bee"`), want: errcode.NotFound},
		// The friendship of a and b, ids as numbers or strings.
		{name: "request", user: a, body: fmt.Sprintf(`{"op":"request","user_id":%d,"note":"hi <3"}`, b), notified: true, check: changed(true)},
		{name: "request again", user: a, body: rel("request", b, `,"note":"hi <3"`), check: changed(false)},
		{name: "b's requests", user: b, body: `{"op":"requests"}`, check: func(t *testing.T, data json.RawMessage) {
			p := unmarshal[protocol.FriendRequestsReply](t, data)
			if len(p.Requests) != 1 || p.Requests[0].UserID.Int64() != a || p.Requests[0].Note != "hi <3" || p.More {
				t.Fatalf("requests %s", data)
			}
			idsAreStrings(t, data, "user_id", "next")
		}},
		{name: "accept", user: b, body: rel("accept", a, ""), notified: true, check: changed(true)},
		{name: "accept again", user: b, body: rel("accept", a, ""), check: changed(false)},
		{name: "remark", user: a, body: rel("remark", b, `,"remark":"bee"`), notified: true, check: changed(true)},
		{name: "same remark", user: a, body: rel("remark", b, `,"remark":"bee"`), check: changed(false)},
		{name: "a's friends", user: a, body: `{"op":"friends","limit":10}`, check: func(t *testing.T, data json.RawMessage) {
			p := unmarshal[protocol.FriendsReply](t, data)
			if len(p.Friends) != 1 || p.Friends[0].UserID.Int64() != b || p.Friends[0].Remark != "bee" || p.Next.Int64() != b || p.More {
				t.Fatalf("friends %s", data)
			}
			idsAreStrings(t, data, "user_id", "next")
		}},
		{name: "b's friends after a", user: b, body: fmt.Sprintf(`{"op":"friends","after":"%d"}`, a), check: func(t *testing.T, data json.RawMessage) {
			if p := unmarshal[protocol.FriendsReply](t, data); len(p.Friends) != 0 || !strings.Contains(string(data), `"friends":[]`) {
				t.Fatalf("friends after the last %s", data)
			}
		}},
		// c asks, b rejects; a blocks c.
		{name: "c requests b", user: c, body: rel("request", b, ""), notified: true, check: changed(true)},
		{name: "b rejects c", user: b, body: rel("reject", c, ""), notified: true, check: changed(true)},
		{name: "b rejects c again", user: b, body: rel("reject", c, ""), check: changed(false)},
		{name: "block", user: a, body: rel("block", c, ""), notified: true, check: changed(true)},
		{name: "block again", user: a, body: rel("block", c, ""), check: changed(false)},
		{name: "blocked asks", user: c, body: rel("request", a, ""), want: errcode.Forbidden},
		{name: "blocks", user: a, body: `{"op":"blocks"}`, check: func(t *testing.T, data json.RawMessage) {
			p := unmarshal[protocol.BlocksReply](t, data)
			if len(p.Blocks) != 1 || p.Blocks[0].UserID.Int64() != c || p.Blocks[0].CreatedAt <= 0 {
				t.Fatalf("blocks %s", data)
			}
			idsAreStrings(t, data, "user_id", "next")
		}},
		{name: "unblock", user: a, body: rel("unblock", c, ""), notified: true, check: changed(true)},
		{name: "remove", user: b, body: rel("remove", a, ""), notified: true, check: changed(true)},
		{name: "remove again", user: b, body: rel("remove", a, ""), check: changed(false)},
	})
}

// GROUP (20) over the group service with the session's user as the actor:
// bad input is 40001 naming the field, permission refusals are 40301, an
// unknown group 40401, a dissolved one 40901; every change that Changed is
// notified once; ids are strings.
func TestGroupCommand(t *testing.T) {
	e := newEnv(t, 35)
	owner, m1, m2, stranger := testenv.RandomUserID(), testenv.RandomUserID(), testenv.RandomUserID(), testenv.RandomUserID()
	unknown := testenv.RandomUserID()
	ensureUsers(t, e, owner, m1, m2, stranger)
	ctx := context.Background()

	// Create first, to learn the group id the other steps name.
	resp := e.handler.Handle(ctx, "gate-social", &logicv1.Request{ConnId: 1, Command: uint32(protocol.CmdGroup),
		Session: &logicv1.Session{UserId: owner, DeviceId: "d"},
		Body:    []byte(fmt.Sprintf(`{"op":"create","name":"team <&>","member_ids":["%d",%d],"announcement":"hello"}`, m1, m2))})
	r := decode(t, resp.Body)
	if r.Code != errcode.OK {
		t.Fatalf("create: %s %s", r.Code, r.Msg)
	}
	created := unmarshal[protocol.GroupChangeReply](t, r.Data)
	g := created.Group
	if !created.Changed || g.OwnerID.Int64() != owner || g.MemberCount != 3 || g.Name != "team <&>" || g.Announcement != "hello" ||
		g.Status != 1 || len(created.Added) != 3 || g.ConversationID <= 0 {
		t.Fatalf("created %s", r.Data)
	}
	idsAreStrings(t, r.Data, "group_id", "conversation_id", "owner_id")
	if !strings.Contains(string(r.Data), "team <&>") {
		t.Fatalf("HTML-escaped answer %s", r.Data)
	}
	if n, _ := e.notes.Counts(); n != 1 {
		t.Fatalf("create notified %d times", n)
	}
	gid := g.GroupID.Int64()
	op := func(op, extra string) string { return fmt.Sprintf(`{"op":%q,"group_id":"%d"%s}`, op, gid, extra) }
	info := func(check func(t *testing.T, g protocol.GroupInfo)) func(t *testing.T, data json.RawMessage) {
		return func(t *testing.T, data json.RawMessage) {
			t.Helper()
			check(t, unmarshal[protocol.GroupChangeReply](t, data).Group)
		}
	}
	future := time.Now().Add(time.Hour).UnixMilli()

	run(t, e, protocol.CmdGroup, []step{
		// Bad input.
		{name: "no op", user: owner, body: `{}`, want: errcode.InvalidArgument, msg: "op: required"},
		{name: "unknown op", user: owner, body: op("rename", ""), want: errcode.InvalidArgument, msg: `op: unknown op "rename"`},
		{name: "invalid JSON", user: owner, body: `{"op":"info",`, want: errcode.InvalidArgument, msg: "invalid JSON body"},
		{name: "create without name", user: owner, body: `{"op":"create","member_ids":[]}`, want: errcode.InvalidArgument, msg: "name: required"},
		{name: "create with empty name", user: owner, body: `{"op":"create","name":"","member_ids":[]}`, want: errcode.InvalidArgument, msg: "name"},
		{name: "create without member_ids", user: owner, body: `{"op":"create","name":"x"}`, want: errcode.InvalidArgument, msg: "member_ids: required"},
		{name: "member id not an integer", user: owner, body: `{"op":"create","name":"x","member_ids":["1","abc"]}`, want: errcode.InvalidArgument, msg: "invalid argument: member_ids:"},
		{name: "member id zero", user: owner, body: `{"op":"create","name":"x","member_ids":[0]}`, want: errcode.InvalidArgument, msg: "member_ids"},
		{name: "create with an unknown member", user: owner, body: fmt.Sprintf(`{"op":"create","name":"x","member_ids":["%d"]}`, unknown), want: errcode.NotFound, msg: "member_ids"},
		{name: "info without group_id", user: owner, body: `{"op":"info"}`, want: errcode.InvalidArgument, msg: "group_id: required"},
		{name: "group_id not an integer", user: owner, body: `{"op":"info","group_id":"g1"}`, want: errcode.InvalidArgument, msg: "invalid argument: group_id:"},
		{name: "add without user_ids", user: owner, body: op("add", ""), want: errcode.InvalidArgument, msg: "user_ids: required"},
		{name: "add: user_ids not a list", user: owner, body: op("add", `,"user_ids":"5"`), want: errcode.InvalidArgument, msg: "invalid argument: user_ids:"},
		{name: "role without user_id", user: owner, body: op("role", `,"role":"admin"`), want: errcode.InvalidArgument, msg: "user_id: required"},
		{name: "role without role", user: owner, body: op("role", fmt.Sprintf(`,"user_id":"%d"`, m1)), want: errcode.InvalidArgument, msg: "role: required"},
		{name: "role owner", user: owner, body: op("role", fmt.Sprintf(`,"user_id":"%d","role":"owner"`, m1)), want: errcode.InvalidArgument, msg: "role"},
		{name: "mute_all without mute", user: owner, body: op("mute_all", ""), want: errcode.InvalidArgument, msg: "mute: required"},
		{name: "mute_all: mute not a boolean", user: owner, body: op("mute_all", `,"mute":"yes"`), want: errcode.InvalidArgument, msg: "invalid argument: mute:"},
		{name: "mute_member without until", user: owner, body: op("mute_member", fmt.Sprintf(`,"user_id":"%d"`, m1)), want: errcode.InvalidArgument, msg: "until: required"},
		{name: "mute_member until negative", user: owner, body: op("mute_member", fmt.Sprintf(`,"user_id":"%d","until":-1`, m1)), want: errcode.InvalidArgument, msg: "until"},
		{name: "mute_member until past", user: owner, body: op("mute_member", fmt.Sprintf(`,"user_id":"%d","until":1000`, m1)), want: errcode.InvalidArgument, msg: "until"},
		{name: "update nothing", user: owner, body: op("update", ""), want: errcode.InvalidArgument},
		{name: "members limit too large", user: owner, body: op("members", `,"limit":1001`), want: errcode.InvalidArgument, msg: "limit"},
		{name: "transfer without user_id", user: owner, body: op("transfer", ""), want: errcode.InvalidArgument, msg: "user_id: required"},
		// Permissions and the domain's codes.
		{name: "unknown group", user: owner, body: `{"op":"info","group_id":"12345"}`, want: errcode.NotFound},
		{name: "a stranger reads", user: stranger, body: op("info", ""), want: errcode.Forbidden},
		{name: "a stranger lists", user: stranger, body: op("members", ""), want: errcode.Forbidden},
		{name: "a member adds", user: m1, body: op("add", fmt.Sprintf(`,"user_ids":["%d"]`, stranger)), want: errcode.Forbidden},
		{name: "a member mutes all", user: m1, body: op("mute_all", `,"mute":true`), want: errcode.Forbidden},
		{name: "a member sets a role", user: m1, body: op("role", fmt.Sprintf(`,"user_id":"%d","role":"admin"`, m2)), want: errcode.Forbidden},
		{name: "a member dissolves", user: m1, body: op("dissolve", ""), want: errcode.Forbidden},
		{name: "the owner leaves", user: owner, body: op("leave", ""), want: errcode.Forbidden},
		{name: "remove the owner", user: owner, body: op("remove", fmt.Sprintf(`,"user_ids":["%d"]`, owner)), want: errcode.Forbidden},
		{name: "add an unknown user", user: owner, body: op("add", fmt.Sprintf(`,"user_ids":["%d"]`, unknown)), want: errcode.NotFound},
		// Changes.
		{name: "member reads info", user: m1, body: op("info", ""), check: func(t *testing.T, data json.RawMessage) {
			if got := unmarshal[protocol.GroupInfoReply](t, data); got.Group.GroupID.Int64() != gid || got.Group.MemberCount != 3 {
				t.Fatalf("info %s", data)
			}
			idsAreStrings(t, data, "group_id", "conversation_id", "owner_id")
		}},
		{name: "add", user: owner, body: op("add", fmt.Sprintf(`,"user_ids":[%d]`, stranger)), notified: true, check: func(t *testing.T, data json.RawMessage) {
			got := unmarshal[protocol.GroupChangeReply](t, data)
			if !got.Changed || len(got.Added) != 1 || got.Added[0].Int64() != stranger || got.Group.MemberCount != 4 {
				t.Fatalf("add %s", data)
			}
			idsAreStrings(t, data, "added")
		}},
		{name: "add again", user: owner, body: op("add", fmt.Sprintf(`,"user_ids":["%d"]`, stranger)), check: func(t *testing.T, data json.RawMessage) {
			if got := unmarshal[protocol.GroupChangeReply](t, data); got.Changed || len(got.Added) != 0 || !strings.Contains(string(data), `"added":[]`) {
				t.Fatalf("add again %s", data)
			}
		}},
		{name: "make m1 admin", user: owner, body: op("role", fmt.Sprintf(`,"user_id":"%d","role":"admin"`, m1)), notified: true},
		{name: "admin mutes all", user: m1, body: op("mute_all", `,"mute":true`), notified: true, check: info(func(t *testing.T, g protocol.GroupInfo) {
			if !g.MuteAll {
				t.Fatal("mute_all not on")
			}
		})},
		{name: "mute all again", user: owner, body: op("mute_all", `,"mute":true`)},
		{name: "admin mutes m2", user: m1, body: op("mute_member", fmt.Sprintf(`,"user_id":"%d","until":%d`, m2, future)), notified: true},
		{name: "admin mutes the owner", user: m1, body: op("mute_member", fmt.Sprintf(`,"user_id":"%d","until":%d`, owner, future)), want: errcode.Forbidden},
		{name: "members", user: m2, body: op("members", `,"limit":2`), check: func(t *testing.T, data json.RawMessage) {
			p := unmarshal[protocol.GroupMembersReply](t, data)
			if len(p.Members) != 2 || !p.More || p.Next != p.Members[1].UserID || p.GroupID.Int64() != gid || p.MemberVersion <= 0 {
				t.Fatalf("members page %s", data)
			}
			idsAreStrings(t, data, "group_id", "user_id", "next")
		}},
		{name: "members, all", user: m2, body: op("members", ""), check: func(t *testing.T, data json.RawMessage) {
			p := unmarshal[protocol.GroupMembersReply](t, data)
			roles := map[int64]protocol.GroupMember{}
			for _, m := range p.Members {
				roles[m.UserID.Int64()] = m
			}
			if len(p.Members) != 4 || p.More || roles[owner].Role != "owner" || roles[m1].Role != "admin" ||
				roles[m2].Role != "member" || roles[m2].MuteUntil != future || roles[m1].MuteUntil != 0 {
				t.Fatalf("members %s", data)
			}
		}},
		{name: "admin unmutes m2", user: m1, body: op("mute_member", fmt.Sprintf(`,"user_id":%d,"until":0`, m2)), notified: true},
		{name: "update", user: m1, body: op("update", `,"name":"renamed","announcement":""`), notified: true, check: info(func(t *testing.T, g protocol.GroupInfo) {
			if g.Name != "renamed" || g.Announcement != "" {
				t.Fatalf("updated %+v", g)
			}
		})},
		{name: "remove", user: m1, body: op("remove", fmt.Sprintf(`,"user_ids":["%d"]`, stranger)), notified: true, check: func(t *testing.T, data json.RawMessage) {
			got := unmarshal[protocol.GroupChangeReply](t, data)
			if !got.Changed || len(got.Removed) != 1 || got.Removed[0].Int64() != stranger {
				t.Fatalf("remove %s", data)
			}
		}},
		{name: "the removed reads", user: stranger, body: op("info", ""), want: errcode.Forbidden},
		{name: "m2 leaves", user: m2, body: op("leave", ""), notified: true},
		{name: "m2 leaves again", user: m2, body: op("leave", "")},
		{name: "transfer to a non-member", user: owner, body: op("transfer", fmt.Sprintf(`,"user_id":"%d"`, m2)), want: errcode.NotFound},
		{name: "transfer", user: owner, body: op("transfer", fmt.Sprintf(`,"user_id":"%d"`, m1)), notified: true, check: info(func(t *testing.T, g protocol.GroupInfo) {
			if g.OwnerID.Int64() != m1 {
				t.Fatalf("owner %d", g.OwnerID)
			}
		})},
		{name: "the old owner dissolves", user: owner, body: op("dissolve", ""), want: errcode.Forbidden},
		{name: "dissolve", user: m1, body: op("dissolve", ""), notified: true, check: info(func(t *testing.T, g protocol.GroupInfo) {
			if g.Status != 2 {
				t.Fatalf("status %d", g.Status)
			}
		})},
		{name: "dissolve again", user: m1, body: op("dissolve", "")},
		{name: "add to a dissolved group", user: m1, body: op("add", fmt.Sprintf(`,"user_ids":["%d"]`, m2)), want: errcode.Conflict},
	})
}
