package client

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
)

// Each RELATION and GROUP helper sends its command with the op's body (ids
// as strings) and decodes the answer's data.
func TestRelationAndGroupHelpers(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{})
	ctx := context.Background()
	until := time.UnixMilli(1893456000000)
	groupData := `{"group":{"group_id":"70","conversation_id":"71","name":"g","owner_id":"5","status":1,"member_count":2},"changed":true,"added":["6"],"removed":[]}`
	type call struct {
		name     string
		do       func() (any, error)
		cmd      uint16
		wantBody string
		data     string
		want     any
	}
	calls := []call{
		{"request", func() (any, error) { return c.RequestFriend(ctx, 6, "hi") }, CmdRelation,
			`{"op":"request","user_id":"6","note":"hi"}`, `{"changed":true}`, true},
		{"accept", func() (any, error) { return c.AcceptFriend(ctx, 6) }, CmdRelation,
			`{"op":"accept","user_id":"6"}`, `{"changed":false}`, false},
		{"reject", func() (any, error) { return c.RejectFriend(ctx, 6) }, CmdRelation,
			`{"op":"reject","user_id":"6"}`, `{"changed":true}`, true},
		{"remove", func() (any, error) { return c.RemoveFriend(ctx, 6) }, CmdRelation,
			`{"op":"remove","user_id":"6"}`, `{"changed":true}`, true},
		{"remark clears", func() (any, error) { return c.SetRemark(ctx, 6, "") }, CmdRelation,
			`{"op":"remark","user_id":"6","remark":""}`, `{"changed":true}`, true},
		{"block", func() (any, error) { return c.Block(ctx, 6) }, CmdRelation,
			`{"op":"block","user_id":"6"}`, `{"changed":true}`, true},
		{"unblock", func() (any, error) { return c.Unblock(ctx, 6) }, CmdRelation,
			`{"op":"unblock","user_id":"6"}`, `{"changed":true}`, true},
		{"friends", func() (any, error) { return c.Friends(ctx, 0, 0) }, CmdRelation,
			`{"op":"friends"}`, `{"friends":[{"user_id":"6","remark":"r","created_at":9}],"next":"6","more":true}`,
			FriendsPage{Friends: []Friend{{UserID: 6, Remark: "r", CreatedAt: 9}}, Next: 6, More: true}},
		{"blocks", func() (any, error) { return c.Blocks(ctx, 6, 10) }, CmdRelation,
			`{"op":"blocks","after":"6","limit":10}`, `{"blocks":[],"next":"6","more":false}`,
			BlocksPage{Blocks: []protocol.BlockedUser{}, Next: 6}},
		{"requests", func() (any, error) { return c.FriendRequests(ctx, 0, 5) }, CmdRelation,
			`{"op":"requests","limit":5}`, `{"requests":[{"user_id":"7","note":"n","created_at":1,"updated_at":2}],"next":"7","more":false}`,
			FriendRequestsPage{Requests: []protocol.FriendRequest{{UserID: 7, Note: "n", CreatedAt: 1, UpdatedAt: 2}}, Next: 7}},
		{"create", func() (any, error) {
			return c.CreateGroup(ctx, NewGroup{Name: "g", MemberIDs: []int64{6}, Announcement: "a"})
		}, CmdGroup, `{"op":"create","member_ids":["6"],"name":"g","announcement":"a"}`, groupData, nil},
		{"add", func() (any, error) { return c.AddGroupMembers(ctx, 70, []int64{6, 8}) }, CmdGroup,
			`{"op":"add","group_id":"70","user_ids":["6","8"]}`, groupData, nil},
		{"remove", func() (any, error) { return c.RemoveGroupMembers(ctx, 70, []int64{6}) }, CmdGroup,
			`{"op":"remove","group_id":"70","user_ids":["6"]}`, groupData, nil},
		{"leave", func() (any, error) { return c.LeaveGroup(ctx, 70) }, CmdGroup,
			`{"op":"leave","group_id":"70"}`, groupData, nil},
		{"role", func() (any, error) { return c.SetGroupRole(ctx, 70, 6, protocol.GroupRoleAdmin) }, CmdGroup,
			`{"op":"role","group_id":"70","user_id":"6","role":"admin"}`, groupData, nil},
		{"mute all off", func() (any, error) { return c.MuteGroup(ctx, 70, false) }, CmdGroup,
			`{"op":"mute_all","group_id":"70","mute":false}`, groupData, nil},
		{"mute member", func() (any, error) { return c.MuteGroupMember(ctx, 70, 6, until) }, CmdGroup,
			`{"op":"mute_member","group_id":"70","user_id":"6","until":1893456000000}`, groupData, nil},
		{"unmute member", func() (any, error) { return c.MuteGroupMember(ctx, 70, 6, time.Time{}) }, CmdGroup,
			`{"op":"mute_member","group_id":"70","user_id":"6","until":0}`, groupData, nil},
		{"transfer", func() (any, error) { return c.TransferGroup(ctx, 70, 6) }, CmdGroup,
			`{"op":"transfer","group_id":"70","user_id":"6"}`, groupData, nil},
		{"dissolve", func() (any, error) { return c.DissolveGroup(ctx, 70) }, CmdGroup,
			`{"op":"dissolve","group_id":"70"}`, groupData, nil},
		{"update", func() (any, error) {
			name := "new"
			return c.UpdateGroup(ctx, 70, GroupUpdate{Name: &name})
		}, CmdGroup, `{"op":"update","group_id":"70","name":"new"}`, groupData, nil},
		{"info", func() (any, error) { return c.GroupInfo(ctx, 70) }, CmdGroup,
			`{"op":"info","group_id":"70"}`, `{"group":{"group_id":"70","owner_id":"5","name":"g"}}`,
			GroupInfo{GroupID: 70, OwnerID: 5, Name: "g"}},
		{"members", func() (any, error) { return c.GroupMembers(ctx, 70, 5, 2) }, CmdGroup,
			`{"op":"members","group_id":"70","after":"5","limit":2}`,
			`{"group_id":"70","members":[{"user_id":"6","role":"member","mute_until":0,"joined_at":3}],"next":"0","more":false,"member_version":4}`,
			GroupMembersPage{GroupID: 70, Members: []GroupMember{{UserID: 6, Role: "member", JoinedAt: 3}}, MemberVersion: 4}},
	}
	var wantGroup GroupChange
	if err := json.Unmarshal([]byte(groupData), &wantGroup); err != nil {
		t.Fatal(err)
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			type result struct {
				v   any
				err error
			}
			done := make(chan result, 1)
			go func() { v, err := tc.do(); done <- result{v, err} }()
			req := s.read()
			if req.h.Command != tc.cmd || string(req.body) != tc.wantBody {
				t.Fatalf("sent command %d body %s, want %d %s", req.h.Command, req.body, tc.cmd, tc.wantBody)
			}
			s.answer(req, tc.cmd, envelope.OK(s.ids.Next(), []byte(tc.data)))
			got := recv(t, done, tc.name)
			if got.err != nil {
				t.Fatal(got.err)
			}
			want := tc.want
			if want == nil {
				want = wantGroup
			}
			if !reflect.DeepEqual(got.v, want) {
				t.Fatalf("got %+v, want %+v", got.v, want)
			}
		})
	}
}

// A refusal comes back as a *CodeError with the server's code, whichever
// op was refused.
func TestRelationAndGroupRefusals(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{})
	ctx := context.Background()
	for _, tc := range []struct {
		cmd  uint16
		code errcode.Code
		do   func() error
	}{
		{CmdRelation, errcode.Forbidden, func() error { _, err := c.RequestFriend(ctx, 9, ""); return err }},
		{CmdRelation, errcode.NotFound, func() error { _, err := c.AcceptFriend(ctx, 9); return err }},
		{CmdGroup, errcode.Forbidden, func() error { _, err := c.AddGroupMembers(ctx, 1, []int64{9}); return err }},
		{CmdGroup, errcode.Conflict, func() error { _, err := c.GroupInfo(ctx, 1); return err }},
	} {
		done := make(chan error, 1)
		go func() { done <- tc.do() }()
		req := s.read()
		s.answer(req, tc.cmd, envelope.Fail(s.ids.Next(), tc.code, "no"))
		err := recv(t, done, string(tc.code))
		var ce *CodeError
		if !errors.As(err, &ce) || ce.Code != tc.code || ce.Command != tc.cmd {
			t.Fatalf("error %v, want a %s CodeError of command %d", err, tc.code, tc.cmd)
		}
	}
}

func TestControlEventPush(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(Options{})
	s.write(frame.Header{Command: protocol.CmdControlEvent, SequenceID: 3},
		envelope.OK(s.ids.Next(), []byte(`{"event_type":4,"conversation_id":"0","payload":{"kind":"request","user_id":"6"}}`)))
	f := recv(t, c.Pushes(), "control event")
	ev, err := f.ControlEvent()
	if err != nil || ev.EventType != EventFriend || string(ev.Payload) != `{"kind":"request","user_id":"6"}` {
		t.Fatalf("event %+v, %v", ev, err)
	}
	if _, err := (Frame{Command: protocol.CmdMessage}).ControlEvent(); err == nil {
		t.Fatal("a MESSAGE frame decoded as a control event")
	}
}
