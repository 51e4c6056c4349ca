package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/logic/internal/notify"
	"github.com/sparkim/spark/logic/internal/relation"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// This file adapts RELATION (19) and GROUP (20) onto the relation and
// group services, the same ones the business API calls: decode the body,
// check the shape of the fields the op reads (40001 naming the field), call
// the service with the session's user as the actor, notify after a change
// that Changed (notify.After*, as the API does) and encode the answer. No
// rule of who may do what lives here.

// decodeFields decodes body into v (a pointer to a struct) and, when that
// fails, names the first field (in key order) whose value does not decode,
// so "user_id":"x" answers "invalid argument: user_id: …" rather than a
// bare "invalid JSON body".
func decodeFields(body []byte, v any) error {
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(body, &raw) != nil {
		return errcode.Wrap(errcode.InvalidArgument, "invalid JSON body (an object with an op)", err)
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	t := reflect.TypeOf(v).Elem()
	for _, k := range keys {
		one, _ := protocol.Marshal(map[string]json.RawMessage{k: raw[k]}) // raw values: cannot fail
		if ferr := json.Unmarshal(one, reflect.New(t).Interface()); ferr != nil {
			return errcode.Wrap(errcode.InvalidArgument, "invalid argument: "+k+": wrong type (ids are integers or decimal strings)", ferr)
		}
	}
	return errcode.Wrap(errcode.InvalidArgument, "invalid JSON body", err)
}

func positiveID(field string, id jsonid.ID) error {
	if id <= 0 {
		return errcode.Invalid(field, "required, a positive id")
	}
	return nil
}

// ids converts a list of ids, each positive.
func ids(field string, in []jsonid.ID) ([]int64, error) {
	out := make([]int64, len(in))
	for i, id := range in {
		if id <= 0 {
			return nil, errcode.Invalid(field, fmt.Sprintf("%d is not a user id", id))
		}
		out[i] = id.Int64()
	}
	return out, nil
}

// pageArgs checks a list page's after and limit against the service's
// largest page.
func pageArgs(after jsonid.ID, limit, maxLimit int) error {
	switch {
	case after < 0:
		return errcode.Invalid("after", "must not be negative")
	case limit < 0 || limit > maxLimit:
		return errcode.Invalid("limit", fmt.Sprintf("must be 0 to %d", maxLimit))
	}
	return nil
}

// relation answers RELATION (19) for user.
func (h *Handler) relation(ctx context.Context, user int64, body []byte) ([]byte, error) {
	if h.Relations == nil {
		return nil, errcode.New(errcode.Internal, "relations are not configured")
	}
	var r protocol.RelationRequest
	if err := decodeFields(body, &r); err != nil {
		return nil, err
	}
	var (
		ch  relation.Change
		err error
	)
	switch r.Op {
	case protocol.RelationOpRequest, protocol.RelationOpAccept, protocol.RelationOpReject, protocol.RelationOpRemove,
		protocol.RelationOpRemark, protocol.RelationOpBlock, protocol.RelationOpUnblock:
		if err := positiveID("user_id", r.UserID); err != nil {
			return nil, err
		}
		other := r.UserID.Int64()
		switch r.Op {
		case protocol.RelationOpRequest:
			ch, err = h.Relations.RequestFriend(ctx, relation.FriendRequest{From: user, To: other, Note: r.Note})
		case protocol.RelationOpAccept:
			ch, err = h.Relations.AcceptFriend(ctx, user, other)
		case protocol.RelationOpReject:
			ch, err = h.Relations.RejectFriend(ctx, user, other)
		case protocol.RelationOpRemove:
			ch, err = h.Relations.RemoveFriend(ctx, user, other)
		case protocol.RelationOpRemark:
			if r.Remark == nil {
				return nil, errcode.Invalid("remark", "required (\"\" clears it)")
			}
			ch, err = h.Relations.SetRemark(ctx, relation.RemarkRequest{UserID: user, FriendID: other, Remark: *r.Remark})
		case protocol.RelationOpBlock:
			ch, err = h.Relations.Block(ctx, user, other)
		default:
			ch, err = h.Relations.Unblock(ctx, user, other)
		}
		if err != nil {
			return nil, err
		}
		notify.AfterRelationChange(ctx, h.Notifier, h.Log, ch, zap.String("op", "relation."+r.Op), zap.Int64("user_id", user))
		return marshal(protocol.ChangeReply{Changed: ch.Changed})
	case protocol.RelationOpFriends, protocol.RelationOpBlocks, protocol.RelationOpRequests:
		if err := pageArgs(r.After, r.Limit, relation.MaxPageSize); err != nil {
			return nil, err
		}
		lr := relation.ListRequest{UserID: user, After: r.After.Int64(), Limit: r.Limit}
		switch r.Op {
		case protocol.RelationOpFriends:
			p, err := h.Relations.ListFriends(ctx, lr)
			if err != nil {
				return nil, err
			}
			out := protocol.FriendsReply{Friends: make([]protocol.Friend, len(p.Friends)), Next: jsonid.ID(p.Next), More: p.More}
			for i, f := range p.Friends {
				out.Friends[i] = protocol.Friend{UserID: jsonid.ID(f.UserID), Remark: f.Remark, CreatedAt: f.CreatedAt}
			}
			return marshal(out)
		case protocol.RelationOpBlocks:
			p, err := h.Relations.ListBlocks(ctx, lr)
			if err != nil {
				return nil, err
			}
			out := protocol.BlocksReply{Blocks: make([]protocol.BlockedUser, len(p.Blocked)), Next: jsonid.ID(p.Next), More: p.More}
			for i, b := range p.Blocked {
				out.Blocks[i] = protocol.BlockedUser{UserID: jsonid.ID(b.UserID), CreatedAt: b.CreatedAt}
			}
			return marshal(out)
		default:
			p, err := h.Relations.ListRequests(ctx, lr)
			if err != nil {
				return nil, err
			}
			out := protocol.FriendRequestsReply{Requests: make([]protocol.FriendRequest, len(p.Requests)), Next: jsonid.ID(p.Next), More: p.More}
			for i, q := range p.Requests {
				out.Requests[i] = protocol.FriendRequest{UserID: jsonid.ID(q.From), Note: q.Note, CreatedAt: q.CreatedAt, UpdatedAt: q.UpdatedAt}
			}
			return marshal(out)
		}
	case "":
		return nil, errcode.Invalid("op", "required")
	}
	return nil, errcode.Invalid("op", fmt.Sprintf("unknown op %q (request, accept, reject, remove, remark, block, unblock, friends, blocks, requests)", r.Op))
}

// group answers GROUP (20) with user as the actor (never group.System: a
// signed-in user is never the business system).
func (h *Handler) group(ctx context.Context, user int64, body []byte) ([]byte, error) {
	if h.Groups == nil {
		return nil, errcode.New(errcode.Internal, "groups are not configured")
	}
	var r protocol.GroupRequest
	if err := decodeFields(body, &r); err != nil {
		return nil, err
	}
	if r.Op == "" {
		return nil, errcode.Invalid("op", "required")
	}
	if r.Op != protocol.GroupOpCreate {
		if !slices.Contains(groupOps, r.Op) {
			return nil, errcode.Invalid("op", fmt.Sprintf("unknown op %q (create, add, remove, leave, role, mute_all, mute_member, transfer, dissolve, update, info, members)", r.Op))
		}
		if err := positiveID("group_id", r.GroupID); err != nil {
			return nil, err
		}
	}
	gid := r.GroupID.Int64()
	var (
		ch  group.Change
		err error
	)
	switch r.Op {
	case protocol.GroupOpCreate:
		if r.Name == nil {
			return nil, errcode.Invalid("name", "required")
		}
		if r.MemberIDs == nil {
			return nil, errcode.Invalid("member_ids", "required (a list of user ids)")
		}
		members, err := ids("member_ids", r.MemberIDs)
		if err != nil {
			return nil, err
		}
		ch, err = h.Groups.Create(ctx, group.CreateRequest{OwnerID: user, MemberIDs: members, Name: *r.Name,
			Avatar: deref(r.Avatar), Announcement: deref(r.Announcement)})
		if err != nil {
			return nil, err
		}
	case protocol.GroupOpAdd, protocol.GroupOpRemove:
		if len(r.UserIDs) == 0 {
			return nil, errcode.Invalid("user_ids", "required, at least one user id")
		}
		users, err := ids("user_ids", r.UserIDs)
		if err != nil {
			return nil, err
		}
		req := group.MembersChangeRequest{ActorID: user, GroupID: gid, UserIDs: users}
		if r.Op == protocol.GroupOpAdd {
			ch, err = h.Groups.AddMembers(ctx, req)
		} else {
			ch, err = h.Groups.RemoveMembers(ctx, req)
		}
		if err != nil {
			return nil, err
		}
	case protocol.GroupOpLeave:
		if ch, err = h.Groups.Leave(ctx, group.LeaveRequest{GroupID: gid, UserID: user}); err != nil {
			return nil, err
		}
	case protocol.GroupOpRole:
		if err := positiveID("user_id", r.UserID); err != nil {
			return nil, err
		}
		var role group.Role
		switch r.Role {
		case protocol.GroupRoleMember:
			role = group.RoleMember
		case protocol.GroupRoleAdmin:
			role = group.RoleAdmin
		case "":
			return nil, errcode.Invalid("role", `required, "member" or "admin"`)
		default:
			return nil, errcode.Invalid("role", fmt.Sprintf(`%q is not "member" or "admin"`, r.Role))
		}
		if ch, err = h.Groups.SetRole(ctx, group.SetRoleRequest{ActorID: user, GroupID: gid, UserID: r.UserID.Int64(), Role: role}); err != nil {
			return nil, err
		}
	case protocol.GroupOpMuteAll:
		if r.Mute == nil {
			return nil, errcode.Invalid("mute", "required, a boolean")
		}
		if ch, err = h.Groups.MuteAll(ctx, group.MuteAllRequest{ActorID: user, GroupID: gid, On: *r.Mute}); err != nil {
			return nil, err
		}
	case protocol.GroupOpMuteMember:
		if err := positiveID("user_id", r.UserID); err != nil {
			return nil, err
		}
		if r.Until == nil || *r.Until < 0 {
			return nil, errcode.Invalid("until", "required, Unix ms (0 unmutes)")
		}
		var until time.Time
		if *r.Until > 0 {
			until = time.UnixMilli(*r.Until)
		}
		if ch, err = h.Groups.MuteMember(ctx, group.MuteMemberRequest{ActorID: user, GroupID: gid, UserID: r.UserID.Int64(), Until: until}); err != nil {
			return nil, err
		}
	case protocol.GroupOpTransfer:
		if err := positiveID("user_id", r.UserID); err != nil {
			return nil, err
		}
		if ch, err = h.Groups.Transfer(ctx, group.TransferRequest{ActorID: user, GroupID: gid, NewOwnerID: r.UserID.Int64()}); err != nil {
			return nil, err
		}
	case protocol.GroupOpDissolve:
		if ch, err = h.Groups.Dissolve(ctx, group.DissolveRequest{ActorID: user, GroupID: gid}); err != nil {
			return nil, err
		}
	case protocol.GroupOpUpdate:
		if ch, err = h.Groups.Update(ctx, group.UpdateRequest{ActorID: user, GroupID: gid,
			Name: r.Name, Avatar: r.Avatar, Announcement: r.Announcement}); err != nil {
			return nil, err
		}
	case protocol.GroupOpInfo:
		g, err := h.Groups.Get(ctx, group.GetRequest{ActorID: user, GroupID: gid})
		if err != nil {
			return nil, err
		}
		return marshal(protocol.GroupInfoReply{Group: groupInfo(g)})
	default: // protocol.GroupOpMembers
		if err := pageArgs(r.After, r.Limit, group.MaxPageSize); err != nil {
			return nil, err
		}
		p, err := h.Groups.Members(ctx, group.MembersRequest{ActorID: user, GroupID: gid, AfterUserID: r.After.Int64(), Limit: r.Limit})
		if err != nil {
			return nil, err
		}
		out := protocol.GroupMembersReply{GroupID: r.GroupID, Members: make([]protocol.GroupMember, len(p.Members)),
			Next: jsonid.ID(p.NextUserID), More: p.NextUserID != 0, MemberVersion: p.MemberVersion}
		for i, m := range p.Members {
			gm := protocol.GroupMember{UserID: jsonid.ID(m.UserID), Role: m.Role.String(), JoinedAt: m.JoinedAt.UnixMilli()}
			if !m.MuteUntil.IsZero() {
				gm.MuteUntil = m.MuteUntil.UnixMilli()
			}
			out.Members[i] = gm
		}
		return marshal(out)
	}
	notify.AfterGroupChange(ctx, h.Notifier, h.Log, ch, zap.String("op", "group."+r.Op), zap.Int64("user_id", user))
	return marshal(protocol.GroupChangeReply{Group: groupInfo(ch.Group), Changed: ch.Changed,
		Added: idList(ch.Added), Removed: idList(ch.Removed)})
}

// groupOps are GROUP's ops that act on an existing group (all but create).
var groupOps = []string{
	protocol.GroupOpAdd, protocol.GroupOpRemove, protocol.GroupOpLeave, protocol.GroupOpRole,
	protocol.GroupOpMuteAll, protocol.GroupOpMuteMember, protocol.GroupOpTransfer, protocol.GroupOpDissolve,
	protocol.GroupOpUpdate, protocol.GroupOpInfo, protocol.GroupOpMembers,
}

func groupInfo(g group.Info) protocol.GroupInfo {
	return protocol.GroupInfo{
		GroupID: jsonid.ID(g.GroupID), ConversationID: jsonid.ID(g.ConversationID), Name: g.Name, Avatar: g.Avatar,
		Announcement: g.Announcement, OwnerID: jsonid.ID(g.OwnerID), MuteAll: g.MuteAll, Status: int(g.Status),
		MemberCount: g.MemberCount, MemberVersion: g.MemberVersion, MaxMembers: g.MaxMembers,
		CreatedAt: g.CreatedAt.UnixMilli(), UpdatedAt: g.UpdatedAt.UnixMilli(),
	}
}

// idList writes ids as strings; never null, so clients can range over it.
func idList(in []int64) []jsonid.ID {
	out := make([]jsonid.ID, len(in))
	for i, id := range in {
		out[i] = jsonid.ID(id)
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// marshal encodes an answer's data without HTML escaping (docs/protocol.md §3: "<",
// ">" and "&" stay one byte).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("gateway: encode answer: %w", err)
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
