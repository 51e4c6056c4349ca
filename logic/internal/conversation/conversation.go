// Package conversation is the send path's conversation concern: it
// resolves a send's target (a user, a group, or a conversation id) to a
// conversation, checks that the sender may send there, and says who
// receives. The send path, its deliver job and the group commit carry a
// Conversation, never a user pair, so groups and P2P share one path.
package conversation

import (
	"context"
	"errors"
	"time"

	"github.com/sparkim/spark/logic/internal/cache"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
)

// Target names whom a send is for: exactly one field is set.
type Target struct {
	UserID         int64
	GroupID        int64
	ConversationID int64
}

// Validate checks the shape of a target without looking anything up:
// exactly one field set (40001).
func (t Target) Validate() error {
	n := 0
	for _, id := range []int64{t.UserID, t.GroupID, t.ConversationID} {
		if id != 0 {
			n++
		}
	}
	switch {
	case n != 1:
		return errcode.New(errcode.InvalidArgument, "exactly one of to_user_id, group_id, conversation_id is required")
	case t.UserID < 0:
		return errcode.New(errcode.InvalidArgument, "invalid to_user_id")
	case t.GroupID < 0:
		return errcode.New(errcode.InvalidArgument, "invalid group_id")
	case t.ConversationID < 0:
		return errcode.New(errcode.InvalidArgument, "invalid conversation_id")
	}
	return nil
}

// Conversation is a resolved send target.
type Conversation struct {
	// ID is the conversation id; 0 for a P2P pair that never talked (Open
	// creates it).
	ID int64
	// Type is protocol.ConversationP2P or protocol.ConversationGroup.
	Type int
	// Users are the pair of a P2P conversation, smaller id first.
	Users [2]int64
	// GroupID is the group of a group conversation.
	GroupID int64
	// MemberVersion is the group's member-list version Open authorized
	// the send against (groups only).
	MemberVersion int64
}

// Sender is who sends: a user, or the business API's system account.
type Sender struct {
	UserID int64
	// System: the business API's own account, which may send into any
	// conversation and is not subject to the P2P policy.
	System bool
}

// Peer returns the other user of a P2P conversation.
func (c Conversation) Peer(uid int64) int64 {
	if c.Users[0] == uid {
		return c.Users[1]
	}
	return c.Users[0]
}

// Has reports whether uid is one of a P2P conversation's pair.
func (c Conversation) Has(uid int64) bool { return c.Users[0] == uid || c.Users[1] == uid }

// Recipients lists the users a message of sender reaches when the list is
// known here: both users of a P2P conversation (the sender's other devices
// get it too). It is nil for a group, whose members deliver expands from
// its member cache.
func (c Conversation) Recipients() []int64 {
	if c.Type == protocol.ConversationP2P {
		return []int64{c.Users[0], c.Users[1]}
	}
	return nil
}

// P2PPolicy decides whether from may message to (blocks, friends-only).
// Its errors are *errcode.Error; an unknown recipient and a refused one
// should look the same, so ids reveal nothing.
type P2PPolicy interface {
	CheckP2P(ctx context.Context, from, to int64) error
}

// Groups is the send path's view of groups (a *group.Service).
type Groups interface {
	// ConversationOf returns a group's conversation (40401 when none).
	ConversationOf(ctx context.Context, groupID int64) (int64, error)
	// GroupOf returns the group of a conversation, store.ErrNotFound when
	// it is no group's.
	GroupOf(ctx context.Context, conversationID int64) (int64, error)
	// AuthorizeSend checks that a sender may send into the group
	// conversation now and returns the member_version it checked.
	AuthorizeSend(ctx context.Context, conversationID, userID int64, system bool, now time.Time) (int64, error)
}

// Resolver resolves and authorizes send targets. Pair and conversation
// lookups are cached: a pair's conversation never changes once created.
type Resolver struct {
	store  *store.Store
	newID  func(context.Context) (int64, error)
	policy P2PPolicy
	groups Groups

	pairs  *cache.Map[[2]int64, int64]
	groupc *cache.Map[int64, int64] // group id → conversation id
	convs  *cache.Map[int64, Conversation]
}

// cacheSize bounds each lookup cache.
const cacheSize = 100_000

// NewResolver returns a Resolver; newID issues ids of new conversations.
// A nil policy only requires that the recipient exists (the product passes
// the relation service); nil groups refuse every group target.
func NewResolver(st *store.Store, newID func(context.Context) (int64, error), policy P2PPolicy, groups Groups) *Resolver {
	r := &Resolver{
		store: st, newID: newID, groups: groups,
		pairs:  cache.New[[2]int64, int64](cacheSize),
		groupc: cache.New[int64, int64](cacheSize),
		convs:  cache.New[int64, Conversation](cacheSize),
	}
	if policy == nil {
		policy = &userExists{store: st, users: cache.New[int64, struct{}](cacheSize)}
	}
	r.policy = policy
	return r
}

// Resolve finds the conversation a send of from to t is for, without
// checking permissions (the idempotency lookup comes first: a retry of a
// committed send gets its answer even if permissions changed since). A
// P2P pair that never talked resolves with ID 0. Errors: 40001 for a
// malformed target, 40401 for an unknown conversation id.
func (r *Resolver) Resolve(ctx context.Context, from int64, t Target) (Conversation, error) {
	if err := t.Validate(); err != nil {
		return Conversation{}, err
	}
	switch {
	case t.UserID != 0:
		if t.UserID == from {
			return Conversation{}, errcode.New(errcode.InvalidArgument, "invalid to_user_id")
		}
		return r.pair(ctx, from, t.UserID)
	case t.GroupID != 0:
		return r.group(ctx, t.GroupID)
	default:
		return r.ByID(ctx, t.ConversationID)
	}
}

// pair returns the P2P conversation of (a, b), ID 0 when they never talked.
func (r *Resolver) pair(ctx context.Context, a, b int64) (Conversation, error) {
	small, big := store.Pair(a, b)
	c := Conversation{Type: protocol.ConversationP2P, Users: [2]int64{small, big}}
	if id, ok := r.pairs.Get(c.Users); ok {
		c.ID = id
		return c, nil
	}
	id, err := r.store.FindP2P(ctx, a, b)
	if errors.Is(err, store.ErrNotFound) {
		return c, nil
	}
	if err != nil {
		return Conversation{}, errcode.Unavailable("conversation: find conversation", err)
	}
	c.ID = id
	r.remember(c)
	return c, nil
}

func (r *Resolver) remember(c Conversation) {
	r.convs.Put(c.ID, c)
	if c.Type == protocol.ConversationP2P {
		r.pairs.Put(c.Users, c.ID)
	}
}

// group returns the conversation of a group (40401 when there is none).
func (r *Resolver) group(ctx context.Context, gid int64) (Conversation, error) {
	if r.groups == nil {
		return Conversation{}, errcode.New(errcode.NotFound, "group not found")
	}
	cid, ok := r.groupc.Get(gid)
	if !ok {
		var err error
		if cid, err = r.groups.ConversationOf(ctx, gid); err != nil {
			return Conversation{}, err
		}
		r.groupc.Put(gid, cid)
	}
	c := Conversation{ID: cid, Type: protocol.ConversationGroup, GroupID: gid}
	r.convs.Put(cid, c)
	return c, nil
}

// ByID returns a conversation by id: 40401 when there is none.
func (r *Resolver) ByID(ctx context.Context, id int64) (Conversation, error) {
	if c, ok := r.convs.Get(id); ok {
		return c, nil
	}
	p, err := r.store.P2PByConversation(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		typ, terr := r.store.ConversationType(ctx, id)
		if errors.Is(terr, store.ErrNotFound) {
			return Conversation{}, errcode.New(errcode.NotFound, "conversation not found")
		}
		if terr != nil {
			return Conversation{}, errcode.Unavailable("conversation: conversation type", terr)
		}
		if typ != protocol.ConversationGroup || r.groups == nil {
			return Conversation{}, errcode.New(errcode.Forbidden, "not a conversation you can send to")
		}
		gid, gerr := r.groups.GroupOf(ctx, id)
		if errors.Is(gerr, store.ErrNotFound) {
			return Conversation{}, errcode.New(errcode.Forbidden, "not a conversation you can send to")
		}
		if gerr != nil {
			return Conversation{}, gerr
		}
		c := Conversation{ID: id, Type: protocol.ConversationGroup, GroupID: gid}
		r.groupc.Put(gid, id)
		r.convs.Put(id, c)
		return c, nil
	}
	if err != nil {
		return Conversation{}, errcode.Unavailable("conversation: conversation", err)
	}
	c := Conversation{ID: id, Type: protocol.ConversationP2P, Users: [2]int64{p.UserSmall, p.UserBig}}
	r.remember(c)
	return c, nil
}

// Open checks that from may send into c now and returns it with its id
// (and a group's member_version), creating a P2P conversation on the first
// message of a pair. Errors are *errcode.Error: 40301 (not a member, muted,
// refused by the policy), 40401, or 50301.
func (r *Resolver) Open(ctx context.Context, from Sender, c Conversation, now time.Time) (Conversation, error) {
	switch c.Type {
	case protocol.ConversationGroup:
		v, err := r.groups.AuthorizeSend(ctx, c.ID, from.UserID, from.System, now)
		if err != nil {
			return Conversation{}, err
		}
		c.MemberVersion = v
		return c, nil
	case protocol.ConversationP2P:
		if !c.Has(from.UserID) {
			return Conversation{}, errcode.New(errcode.Forbidden, "not a member of the conversation")
		}
		if !from.System {
			if err := r.policy.CheckP2P(ctx, from.UserID, c.Peer(from.UserID)); err != nil {
				return Conversation{}, err
			}
		} else if c.ID == 0 {
			// The business API's system account skips the policy, but a
			// new conversation still needs a real recipient. Its callers
			// hold an API key, so a clear 40401 probes nothing.
			ok, err := r.store.UserExists(ctx, c.Peer(from.UserID))
			if err != nil {
				return Conversation{}, errcode.Unavailable("conversation: user lookup", err)
			}
			if !ok {
				return Conversation{}, errcode.New(errcode.NotFound, "recipient not found")
			}
		}
		if c.ID != 0 {
			return c, nil
		}
		id, err := r.store.GetOrCreateP2P(ctx, c.Users[0], c.Users[1], r.newID)
		if err != nil {
			return Conversation{}, errcode.Unavailable("conversation: create conversation", err)
		}
		c.ID = id
		r.remember(c)
		return c, nil
	default:
		return Conversation{}, errcode.New(errcode.Forbidden, "not a conversation you can send to")
	}
}

// userExists is the P2P policy of a resolver built without one (tests of
// the send path): the recipient must exist. It refuses like the product's
// relation policy, with one 40301 for every refusal (decision 37).
// Positive answers are cached.
type userExists struct {
	store *store.Store
	users *cache.Map[int64, struct{}]
}

func (u *userExists) CheckP2P(ctx context.Context, _, to int64) error {
	if _, ok := u.users.Get(to); ok {
		return nil
	}
	ok, err := u.store.UserExists(ctx, to)
	if err != nil {
		return errcode.Unavailable("conversation: user lookup", err)
	}
	if !ok {
		return errcode.New(errcode.Forbidden, "cannot send to this user")
	}
	u.users.Put(to, struct{}{})
	return nil
}
