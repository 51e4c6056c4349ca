// Package conversation is the send path's conversation concern: it
// resolves a send's target (a user, a group, or a conversation id) to a
// conversation, checks that the sender may send there, and says who
// receives. The send path, its deliver job and the group commit carry a
// Conversation, never a user pair, so groups and P2P share one path.
package conversation

import (
	"context"
	"errors"
	"fmt"
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
	case t.GroupID != 0:
		return errcode.New(errcode.InvalidArgument, "groups are not available yet")
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

// Resolver resolves and authorizes send targets. Pair and conversation
// lookups are cached: a pair's conversation never changes once created.
type Resolver struct {
	store  *store.Store
	newID  func(context.Context) (int64, error)
	policy P2PPolicy

	pairs *cache.Map[[2]int64, int64]
	convs *cache.Map[int64, Conversation]
}

// cacheSize bounds each lookup cache.
const cacheSize = 100_000

// NewResolver returns a Resolver; newID issues ids of new conversations.
// A nil policy only requires that the recipient exists.
func NewResolver(st *store.Store, newID func(context.Context) (int64, error), policy P2PPolicy) *Resolver {
	r := &Resolver{
		store: st, newID: newID,
		pairs: cache.New[[2]int64, int64](cacheSize),
		convs: cache.New[int64, Conversation](cacheSize),
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
		if t.UserID < 0 || t.UserID == from {
			return Conversation{}, errcode.New(errcode.InvalidArgument, "invalid to_user_id")
		}
		return r.pair(ctx, from, t.UserID)
	default:
		if t.ConversationID < 0 {
			return Conversation{}, errcode.New(errcode.InvalidArgument, "invalid conversation_id")
		}
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
		return Conversation{}, busy("find conversation", err)
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

// ByID returns a conversation by id: 40401 when there is none, 40301 when
// it is of a kind this server cannot send to yet.
func (r *Resolver) ByID(ctx context.Context, id int64) (Conversation, error) {
	if c, ok := r.convs.Get(id); ok {
		return c, nil
	}
	p, err := r.store.P2PByConversation(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		_, terr := r.store.ConversationType(ctx, id)
		if errors.Is(terr, store.ErrNotFound) {
			return Conversation{}, errcode.New(errcode.NotFound, "conversation not found")
		}
		if terr != nil {
			return Conversation{}, busy("conversation type", terr)
		}
		return Conversation{}, errcode.New(errcode.Forbidden, "not a P2P conversation of yours")
	}
	if err != nil {
		return Conversation{}, busy("conversation", err)
	}
	c := Conversation{ID: id, Type: protocol.ConversationP2P, Users: [2]int64{p.UserSmall, p.UserBig}}
	r.remember(c)
	return c, nil
}

// Open checks that from may send into c now and returns it with its id,
// creating a P2P conversation on the first message of a pair. Errors are
// *errcode.Error: 40301 (not a member, refused by the policy), 40401, or
// 50301.
func (r *Resolver) Open(ctx context.Context, from int64, c Conversation, now time.Time) (Conversation, error) {
	_ = now // group mutes compare with it
	switch c.Type {
	case protocol.ConversationP2P:
		if !c.Has(from) {
			return Conversation{}, errcode.New(errcode.Forbidden, "not a member of the conversation")
		}
		if err := r.policy.CheckP2P(ctx, from, c.Peer(from)); err != nil {
			return Conversation{}, err
		}
		if c.ID != 0 {
			return c, nil
		}
		id, err := r.store.GetOrCreateP2P(ctx, c.Users[0], c.Users[1], r.newID)
		if err != nil {
			return Conversation{}, busy("create conversation", err)
		}
		c.ID = id
		r.remember(c)
		return c, nil
	default:
		return Conversation{}, errcode.New(errcode.Forbidden, "not a conversation you can send to")
	}
}

// userExists is the P2P policy of a server without relationships: the
// recipient must exist (40401). Positive answers are cached.
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
		return busy("user lookup", err)
	}
	if !ok {
		return errcode.New(errcode.NotFound, "recipient not found")
	}
	u.users.Put(to, struct{}{})
	return nil
}

// busy wraps a dependency failure as 50301: the client retries.
func busy(what string, err error) error {
	return errcode.Wrap(errcode.Busy, "", fmt.Errorf("conversation: %s: %w", what, err))
}
