// Package relation is the relationships domain: friends (request and
// accept, or a direct add by the business API; remarks), blocks, and the
// P2P policy check the send path asks before a one-to-one message.
//
// The Service takes ids and typed requests and returns typed results; the
// client protocol, the business API and the internal RPC adapt onto it.
// Errors are *errcode.Error. Every change writes its friend mailbox
// events (protocol.EventFriend, for every device of the users concerned)
// in the transaction of the change, and returns them so an adapter can
// push them to online devices.
package relation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sparkim/spark/logic/internal/cache"
	"github.com/sparkim/spark/logic/internal/mailbox"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// Policy is who may send a P2P message to whom (logic.p2p_policy).
type Policy string

// The policies.
const (
	// PolicyOpen: anyone may message anyone who has not blocked them
	// (and whom they have not blocked).
	PolicyOpen Policy = "open"
	// PolicyFriendsOnly: only friends may message each other.
	PolicyFriendsOnly Policy = "friends_only"
)

// ParsePolicy reads a policy name; "" is PolicyOpen.
func ParsePolicy(s string) (Policy, error) {
	switch Policy(s) {
	case "", PolicyOpen:
		return PolicyOpen, nil
	case PolicyFriendsOnly:
		return PolicyFriendsOnly, nil
	}
	return "", fmt.Errorf("relation: unknown p2p policy %q (want %q or %q)", s, PolicyOpen, PolicyFriendsOnly)
}

// Limits of the free text and of list pages.
const (
	// MaxTextLen bounds a request note and a remark, in characters (the
	// columns are VARCHAR(128)).
	MaxTextLen = 128
	// DefaultPageSize is a list page when the request names no limit,
	// MaxPageSize the largest one served.
	DefaultPageSize = 100
	MaxPageSize     = 500
)

// maxEventsPerChange is the most mailbox events one change appends (an
// acceptance tells both users).
const maxEventsPerChange = 2

// Event kinds, the "kind" of a friend event's payload.
const (
	// KindRequest: user_id asked the event's owner to be friends.
	KindRequest = "request"
	// KindAccepted: the owner and user_id are friends now (a request was
	// accepted, either asked the other while a request was pending, or the
	// business API added them).
	KindAccepted = "accepted"
	// KindRejected: the owner rejected user_id's request (told only to the
	// owner's own devices; the requester is not told).
	KindRejected = "rejected"
	// KindRemoved: the friendship of the owner and user_id ended.
	KindRemoved = "removed"
	// KindRemark: the owner changed their remark for user_id.
	KindRemark = "remark"
	// KindBlocked / KindUnblocked: the owner blocked / unblocked user_id
	// (told only to the owner's own devices; the blocked user never
	// learns).
	KindBlocked   = "blocked"
	KindUnblocked = "unblocked"
)

// Payload is the JSON payload of a friend mailbox event: ids only, as
// decimal strings.
type Payload struct {
	Kind   string    `json:"kind"`
	UserID jsonid.ID `json:"user_id"`
}

// IDs issues mailbox event row ids (a *msgid.Generator).
type IDs interface {
	Next(ctx context.Context) (int64, error)
}

// Options configure a Service.
type Options struct {
	// Policy is the P2P policy; "" is PolicyOpen.
	Policy Policy
	// CheckTTL is how long a CheckP2P answer is reused (DefaultCheckTTL
	// when 0; negative: never).
	CheckTTL time.Duration
}

// DefaultCheckTTL bounds how long another logic instance may keep letting
// a pair talk after a block, an unfriend under friends_only, or a disabled
// user (decision 59). The instance that made the change forgets its
// answers at once.
const DefaultCheckTTL = 2 * time.Second

// checkCacheSize bounds the cached CheckP2P answers.
const checkCacheSize = 200_000

// p2pCheck is a cached CheckP2P answer.
type p2pCheck struct {
	err     error
	expires time.Time
	gen     uint64 // the Service's generation when the facts were read
}

// Service is the relationships domain service.
type Service struct {
	store  *store.Store
	ids    IDs
	policy Policy

	// checks caches CheckP2P answers: the check runs on every P2P send,
	// and reading the facts from MySQL each time was a third of logic's
	// CPU at saturation. gen moves on every change made here, which voids
	// every cached answer at once.
	checks   *cache.Map[[2]int64, p2pCheck]
	checkTTL time.Duration
	gen      atomic.Uint64
	now      func() time.Time
}

// New returns a Service.
func New(st *store.Store, ids IDs, opts Options) (*Service, error) {
	p, err := ParsePolicy(string(opts.Policy))
	if err != nil {
		return nil, err
	}
	ttl := opts.CheckTTL
	if ttl == 0 {
		ttl = DefaultCheckTTL
	}
	return &Service{store: st, ids: ids, policy: p, checks: cache.New[[2]int64, p2pCheck](checkCacheSize), checkTTL: ttl, now: time.Now}, nil
}

// Policy returns the P2P policy in force.
func (s *Service) Policy() Policy { return s.policy }

// Event is a friend mailbox event a change appended: the adapter pushes
// it to the owner's online devices (all of them: the event is for device
// "") as it is in the mailbox, so a device that gets it both ways
// de-duplicates by seq.
type Event struct {
	UserID  int64
	Seq     int64
	Kind    string
	PeerID  int64
	Payload json.RawMessage
}

// Change is the result of a relationship change.
type Change struct {
	// Changed is false when the state already was what was asked (an
	// idempotent repeat): nothing was written and Events is empty.
	Changed bool
	// Events are the mailbox events appended, in order.
	Events []Event
}

// Users returns the users with an event, each once, in event order: who
// an adapter pushes to.
func (c Change) Users() []int64 {
	var out []int64
	seen := map[int64]bool{}
	for _, e := range c.Events {
		if !seen[e.UserID] {
			seen[e.UserID] = true
			out = append(out, e.UserID)
		}
	}
	return out
}

// FriendRequest asks To to be friends with From.
type FriendRequest struct {
	From, To int64
	// Note is shown to To with the request; at most MaxTextLen characters.
	Note string
}

// RemarkRequest sets UserID's private name for FriendID; "" clears it.
type RemarkRequest struct {
	UserID, FriendID int64
	Remark           string
}

// ListRequest asks for one page of a user's list: entries whose id is
// greater than After (0: from the start), at most Limit (0: the default).
type ListRequest struct {
	UserID int64
	After  int64
	Limit  int
}

// Friend is one entry of a friend list.
type Friend struct {
	UserID    int64
	Remark    string
	CreatedAt int64 // Unix ms
}

// FriendPage is a page of friends by user id; Next is the After of the
// next page, More whether one follows.
type FriendPage struct {
	Friends []Friend
	Next    int64
	More    bool
}

// Blocked is one entry of a block list.
type Blocked struct {
	UserID    int64
	CreatedAt int64 // Unix ms
}

// BlockPage is a page of blocked users by user id.
type BlockPage struct {
	Blocked []Blocked
	Next    int64
	More    bool
}

// IncomingRequest is a pending friend request to the list's owner.
type IncomingRequest struct {
	From      int64
	Note      string
	CreatedAt int64 // Unix ms, the first request of the pair
	UpdatedAt int64 // Unix ms, the latest one
}

// RequestPage is a page of incoming pending requests by requester id.
type RequestPage struct {
	Requests []IncomingRequest
	Next     int64
	More     bool
}

// refusedMsg is the one answer to every P2P refusal.
const refusedMsg = "cannot send to this user"

// refused returns the P2P refusal. Every reason (unknown or disabled
// recipient, a block either way, not friends under friends_only) answers
// the same code and message, so a sender learns nothing about another
// user from it; the reason stays in the cause, for logs only.
func refused(reason string) error {
	return errcode.Wrap(errcode.Forbidden, refusedMsg, errors.New("relation: "+reason))
}

// IsRefused reports whether err is CheckP2P's (or RequestFriend's)
// refusal.
func IsRefused(err error) bool {
	var e *errcode.Error
	return errors.As(err, &e) && e.Code == errcode.Forbidden && e.Msg == refusedMsg
}

// checkPair validates two distinct positive user ids.
func checkPair(a, b int64, self string) error {
	if a <= 0 || b <= 0 {
		return errcode.New(errcode.InvalidArgument, "user ids must be positive")
	}
	if a == b {
		return errcode.New(errcode.InvalidArgument, self)
	}
	return nil
}

func checkText(field, s string) error {
	if !utf8.ValidString(s) {
		return errcode.New(errcode.InvalidArgument, field+" must be valid UTF-8")
	}
	if utf8.RuneCountInString(s) > MaxTextLen {
		return errcode.New(errcode.InvalidArgument, fmt.Sprintf("%s is at most %d characters", field, MaxTextLen))
	}
	return nil
}

// CheckP2P says whether from may send a P2P message to to under the
// policy. It refuses with 40301 when the recipient does not exist or is
// disabled, when either blocked the other, or when the policy is
// friends_only and they are not friends; always with the same message
// (see refused). One database round trip.
func (s *Service) CheckP2P(ctx context.Context, from, to int64) error {
	if err := checkPair(from, to, "cannot send to yourself"); err != nil {
		return err
	}
	key, now := [2]int64{from, to}, s.now()
	gen := s.gen.Load()
	if c, ok := s.checks.Get(key); ok && c.gen == gen && now.Before(c.expires) {
		return c.err
	}
	f, err := s.store.P2PFacts(ctx, from, to)
	if err != nil {
		return errcode.Unavailable("relation: check p2p", err)
	}
	res := s.decide(f)
	if s.checkTTL > 0 {
		s.checks.Put(key, p2pCheck{err: res, expires: now.Add(s.checkTTL), gen: gen})
	}
	return res
}

func (s *Service) decide(f store.P2PFacts) error {
	switch {
	case f.RecipientStatus != store.UserActive:
		return refused("recipient unknown or disabled")
	case f.Blocked:
		return refused("blocked")
	case s.policy == PolicyFriendsOnly && !f.Friends:
		return refused("not friends (friends_only)")
	}
	return nil
}

// note is one friend event to write: to owner (every device of theirs,
// device ""), of kind, about peer.
type note struct {
	owner int64
	kind  string
	peer  int64
}

// change allocates the event ids, runs the store change, whose outcome
// picks the notes, and returns what was written. store.ErrNotFound is
// returned as it is for the caller to name what was missing.
func (s *Service) change(ctx context.Context, op string,
	run func(ids []int64, ev store.RelationEvents) (store.RelationChange, error),
	notes func(o store.RelationOutcome) []note) (Change, error) {
	ids, err := mailbox.NewIDs(ctx, s.ids, maxEventsPerChange)
	if err != nil {
		return Change{}, errcode.Wrap(errcode.Busy, "", fmt.Errorf("relation: %s: %w", op, err))
	}
	var built []note
	ch, err := run(ids, func(o store.RelationOutcome) []store.MailboxEvent {
		built = notes(o)
		evs := make([]store.MailboxEvent, len(built))
		for i, n := range built {
			p, _ := protocol.Marshal(Payload{Kind: n.kind, UserID: jsonid.ID(n.peer)}) // cannot fail
			evs[i] = store.MailboxEvent{UserID: n.owner, EventType: protocol.EventFriend, Payload: p}
		}
		return evs
	})
	if errors.Is(err, store.ErrNotFound) {
		return Change{}, err // mapped by the caller, which knows what was missing
	}
	if err != nil {
		return Change{}, errcode.Unavailable("relation: "+op, err)
	}
	out := Change{Changed: ch.Outcome != store.RelationUnchanged}
	if out.Changed {
		s.gen.Add(1) // a pair's facts changed: no cached CheckP2P answer holds
	}
	for i, e := range ch.Events {
		out.Events = append(out.Events, Event{UserID: e.UserID, Seq: e.Seq, Kind: built[i].kind, PeerID: built[i].peer, Payload: e.Payload})
	}
	return out, nil
}

// RequestFriend asks r.To to be friends with r.From. An unknown or
// disabled recipient, or a block either way, is refused exactly like a
// P2P send (40301, one message), so requests cannot probe ids or blocks.
// Friends already, or a pending request already: OK with no event (the
// note is updated). If r.To had asked r.From and that request is pending,
// they become friends at once, both told KindAccepted. Otherwise r.To is
// told KindRequest; r.From's devices are not told (the request is theirs).
func (s *Service) RequestFriend(ctx context.Context, r FriendRequest) (Change, error) {
	if err := checkPair(r.From, r.To, "cannot befriend yourself"); err != nil {
		return Change{}, err
	}
	if err := checkText("note", r.Note); err != nil {
		return Change{}, err
	}
	f, err := s.store.P2PFacts(ctx, r.From, r.To)
	if err != nil {
		return Change{}, errcode.Unavailable("relation: request friend", err)
	}
	if f.RecipientStatus != store.UserActive {
		return Change{}, refused("recipient unknown or disabled")
	}
	if f.Blocked {
		return Change{}, refused("blocked")
	}
	return s.change(ctx, "request friend", func(ids []int64, ev store.RelationEvents) (store.RelationChange, error) {
		return s.store.RequestFriend(ctx, r.From, r.To, r.Note, ids, ev)
	}, func(o store.RelationOutcome) []note {
		if o == store.RelationBefriended {
			return []note{{r.From, KindAccepted, r.To}, {r.To, KindAccepted, r.From}}
		}
		return []note{{r.To, KindRequest, r.From}}
	})
}

// AcceptFriend accepts from's pending request to user: both become
// friends and both are told KindAccepted. Accepting again while friends
// is OK with no event; no pending request is 40401.
func (s *Service) AcceptFriend(ctx context.Context, user, from int64) (Change, error) {
	if err := checkPair(user, from, "cannot befriend yourself"); err != nil {
		return Change{}, err
	}
	ch, err := s.change(ctx, "accept friend", func(ids []int64, ev store.RelationEvents) (store.RelationChange, error) {
		return s.store.AcceptFriend(ctx, user, from, ids, ev)
	}, func(store.RelationOutcome) []note {
		return []note{{from, KindAccepted, user}, {user, KindAccepted, from}}
	})
	if errors.Is(err, store.ErrNotFound) {
		return Change{}, errcode.New(errcode.NotFound, "no pending friend request from this user")
	}
	return ch, err
}

// RejectFriend rejects from's pending request to user. Only user's own
// devices are told (KindRejected, so they drop it from their lists); the
// requester is not. Rejecting again is OK with no event; no pending
// request is 40401.
func (s *Service) RejectFriend(ctx context.Context, user, from int64) (Change, error) {
	if err := checkPair(user, from, "cannot befriend yourself"); err != nil {
		return Change{}, err
	}
	ch, err := s.change(ctx, "reject friend", func(ids []int64, ev store.RelationEvents) (store.RelationChange, error) {
		return s.store.RejectFriend(ctx, user, from, ids, ev)
	}, func(store.RelationOutcome) []note {
		return []note{{user, KindRejected, from}}
	})
	if errors.Is(err, store.ErrNotFound) {
		return Change{}, errcode.New(errcode.NotFound, "no pending friend request from this user")
	}
	return ch, err
}

// AddFriend makes a and b friends without a request, for the business
// API, which is trusted: both must exist (40401 otherwise; the business
// server knows its users, so this reveals nothing), blocks do not stop it
// (they still refuse sends). Both are told KindAccepted; friends already
// is OK with no event.
func (s *Service) AddFriend(ctx context.Context, a, b int64) (Change, error) {
	if err := checkPair(a, b, "cannot befriend yourself"); err != nil {
		return Change{}, err
	}
	for _, u := range []int64{a, b} {
		ok, err := s.store.UserExists(ctx, u)
		if err != nil {
			return Change{}, errcode.Unavailable("relation: add friend", err)
		}
		if !ok {
			return Change{}, errcode.New(errcode.NotFound, fmt.Sprintf("user %d not found", u))
		}
	}
	return s.change(ctx, "add friend", func(ids []int64, ev store.RelationEvents) (store.RelationChange, error) {
		return s.store.AddFriend(ctx, a, b, ids, ev)
	}, func(store.RelationOutcome) []note {
		return []note{{a, KindAccepted, b}, {b, KindAccepted, a}}
	})
}

// RemoveFriend ends the friendship of user and friend: both lists change,
// so both are told KindRemoved. Not friends is OK with no event.
func (s *Service) RemoveFriend(ctx context.Context, user, friend int64) (Change, error) {
	if err := checkPair(user, friend, "cannot unfriend yourself"); err != nil {
		return Change{}, err
	}
	return s.change(ctx, "remove friend", func(ids []int64, ev store.RelationEvents) (store.RelationChange, error) {
		return s.store.RemoveFriend(ctx, user, friend, ids, ev)
	}, func(store.RelationOutcome) []note {
		return []note{{user, KindRemoved, friend}, {friend, KindRemoved, user}}
	})
}

// SetRemark sets r.UserID's private name for r.FriendID; only r.UserID's
// devices are told (KindRemark). The same remark again is OK with no
// event; not friends is 40401.
func (s *Service) SetRemark(ctx context.Context, r RemarkRequest) (Change, error) {
	if err := checkPair(r.UserID, r.FriendID, "cannot remark yourself"); err != nil {
		return Change{}, err
	}
	if err := checkText("remark", r.Remark); err != nil {
		return Change{}, err
	}
	ch, err := s.change(ctx, "set remark", func(ids []int64, ev store.RelationEvents) (store.RelationChange, error) {
		return s.store.SetRemark(ctx, r.UserID, r.FriendID, r.Remark, ids, ev)
	}, func(store.RelationOutcome) []note {
		return []note{{r.UserID, KindRemark, r.FriendID}}
	})
	if errors.Is(err, store.ErrNotFound) {
		return Change{}, errcode.New(errcode.NotFound, "not a friend")
	}
	return ch, err
}

// Block makes user block target: P2P sends between them are refused both
// ways. Any positive id may be blocked, known or not (refusing unknown ids
// would reveal which exist). A friendship stays (unblocking restores
// messaging); removing it would tell target. Only user's devices are told
// (KindBlocked); target never is. Blocked already is OK with no event.
func (s *Service) Block(ctx context.Context, user, target int64) (Change, error) {
	if err := checkPair(user, target, "cannot block yourself"); err != nil {
		return Change{}, err
	}
	return s.change(ctx, "block", func(ids []int64, ev store.RelationEvents) (store.RelationChange, error) {
		return s.store.Block(ctx, user, target, ids, ev)
	}, func(store.RelationOutcome) []note {
		return []note{{user, KindBlocked, target}}
	})
}

// Unblock removes user's block of target; only user's devices are told
// (KindUnblocked). Not blocked is OK with no event.
func (s *Service) Unblock(ctx context.Context, user, target int64) (Change, error) {
	if err := checkPair(user, target, "cannot block yourself"); err != nil {
		return Change{}, err
	}
	return s.change(ctx, "unblock", func(ids []int64, ev store.RelationEvents) (store.RelationChange, error) {
		return s.store.Unblock(ctx, user, target, ids, ev)
	}, func(store.RelationOutcome) []note {
		return []note{{user, KindUnblocked, target}}
	})
}

// page validates a list request and returns the limit to ask the store
// for (one more than the page, to learn whether more follow).
func page(r ListRequest) (int, error) {
	switch {
	case r.UserID <= 0:
		return 0, errcode.New(errcode.InvalidArgument, "user id must be positive")
	case r.After < 0:
		return 0, errcode.New(errcode.InvalidArgument, "cursor must not be negative")
	case r.Limit < 0 || r.Limit > MaxPageSize:
		return 0, errcode.New(errcode.InvalidArgument, fmt.Sprintf("limit is 0 to %d", MaxPageSize))
	case r.Limit == 0:
		return DefaultPageSize, nil
	}
	return r.Limit, nil
}

// ListFriends returns a page of r.UserID's friends by user id.
func (s *Service) ListFriends(ctx context.Context, r ListRequest) (FriendPage, error) {
	n, err := page(r)
	if err != nil {
		return FriendPage{}, err
	}
	rows, err := s.store.ListFriends(ctx, r.UserID, r.After, n+1)
	if err != nil {
		return FriendPage{}, errcode.Unavailable("relation: list friends", err)
	}
	p := FriendPage{More: len(rows) > n, Next: r.After}
	if p.More {
		rows = rows[:n]
	}
	for _, f := range rows {
		p.Friends = append(p.Friends, Friend{UserID: f.FriendID, Remark: f.Remark, CreatedAt: f.CreatedAt.UnixMilli()})
		p.Next = f.FriendID
	}
	return p, nil
}

// ListBlocks returns a page of the users r.UserID blocked, by user id.
func (s *Service) ListBlocks(ctx context.Context, r ListRequest) (BlockPage, error) {
	n, err := page(r)
	if err != nil {
		return BlockPage{}, err
	}
	rows, err := s.store.ListBlocks(ctx, r.UserID, r.After, n+1)
	if err != nil {
		return BlockPage{}, errcode.Unavailable("relation: list blocks", err)
	}
	p := BlockPage{More: len(rows) > n, Next: r.After}
	if p.More {
		rows = rows[:n]
	}
	for _, b := range rows {
		p.Blocked = append(p.Blocked, Blocked{UserID: b.BlockedUserID, CreatedAt: b.CreatedAt.UnixMilli()})
		p.Next = b.BlockedUserID
	}
	return p, nil
}

// ListRequests returns a page of the pending friend requests to
// r.UserID, by requester id.
func (s *Service) ListRequests(ctx context.Context, r ListRequest) (RequestPage, error) {
	n, err := page(r)
	if err != nil {
		return RequestPage{}, err
	}
	rows, err := s.store.ListIncomingRequests(ctx, r.UserID, r.After, n+1)
	if err != nil {
		return RequestPage{}, errcode.Unavailable("relation: list friend requests", err)
	}
	p := RequestPage{More: len(rows) > n, Next: r.After}
	if p.More {
		rows = rows[:n]
	}
	for _, q := range rows {
		p.Requests = append(p.Requests, IncomingRequest{From: q.FromUserID, Note: q.Note,
			CreatedAt: q.CreatedAt.UnixMilli(), UpdatedAt: q.UpdatedAt.UnixMilli()})
		p.Next = q.FromUserID
	}
	return p, nil
}
