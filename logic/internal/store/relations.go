package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/retry"
)

// Friend request statuses (t_friend_requests.status).
const (
	RequestPending  = 1
	RequestAccepted = 2
	RequestRejected = 3
)

// RelationOutcome says what a relationship change did, so the caller knows
// which mailbox events it implies. RelationUnchanged means the state was
// already what was asked: nothing was written and no event appended.
type RelationOutcome int

// Relationship change outcomes.
const (
	RelationUnchanged RelationOutcome = iota
	// RelationRequested: a pending request from the caller now exists
	// (new, or renewed after a rejection or a removal).
	RelationRequested
	// RelationBefriended: the two users became friends (both rows
	// written).
	RelationBefriended
	RelationRejected
	RelationRemoved
	RelationRemarked
	RelationBlocked
	RelationUnblocked
)

// RelationEvents returns the mailbox events a change with outcome o
// appends in its own transaction (none for RelationUnchanged). It runs
// inside the transaction, so it must not block or do I/O.
type RelationEvents func(o RelationOutcome) []MailboxEvent

// RelationChange is the result of a relationship change.
type RelationChange struct {
	Outcome RelationOutcome
	// Events are the appended mailbox events, Seq filled in.
	Events []MailboxEvent
}

// Friend is one row of a user's friend list.
type Friend struct {
	FriendID  int64     `db:"friend_id"`
	Remark    string    `db:"remark"`
	CreatedAt time.Time `db:"created_at"`
}

// Block is one row of a user's block list.
type Block struct {
	BlockedUserID int64     `db:"blocked_user_id"`
	CreatedAt     time.Time `db:"created_at"`
}

// FriendRequest is one incoming friend request.
type FriendRequest struct {
	FromUserID int64     `db:"from_user_id"`
	Note       string    `db:"note"`
	CreatedAt  time.Time `db:"created_at"`
	UpdatedAt  time.Time `db:"updated_at"`
}

// P2PFacts are what the P2P policy needs to know about a sender and a
// recipient, read in one statement on the send path.
type P2PFacts struct {
	// RecipientStatus is the recipient's t_users.status, 0 when the
	// recipient has no row.
	RecipientStatus int `db:"recipient_status"`
	// Blocked: one of the two blocked the other.
	Blocked bool `db:"blocked"`
	// Friends: the sender has the recipient as a friend.
	Friends bool `db:"friends"`
}

// relationPair is the two users of a relationship change, the one who
// acted first; it is also the data of the change's webhook event.
type relationPair struct {
	UserID       jsonid.ID `json:"user_id"`
	TargetUserID jsonid.ID `json:"target_user_id"`
}

func pairOf(user, target int64) relationPair {
	return relationPair{UserID: jsonid.ID(user), TargetUserID: jsonid.ID(target)}
}

// relationWebhookEvents maps an outcome to its webhook event type (a
// remark is private to its owner: none).
var relationWebhookEvents = map[RelationOutcome]string{
	RelationRequested:  EventFriendRequested,
	RelationBefriended: EventFriendAdded,
	RelationRejected:   EventFriendRejected,
	RelationRemoved:    EventFriendRemoved,
	RelationBlocked:    EventBlockAdded,
	RelationUnblocked:  EventBlockRemoved,
}

// relationTx runs fn in a READ COMMITTED transaction, then appends the
// events of its outcome in the same transaction, re-running it all after
// a deadlock, a lock wait timeout or a duplicate key (concurrent changes
// of the same two users: the re-run sees the winner's commit). ids are
// the event row ids, at least as many as any outcome has events; they are
// allocated before the transaction so nothing waits for the id generator
// holding a row lock.
//
// READ COMMITTED because a locking read of a missing row under REPEATABLE
// READ takes a gap lock, and on these sparse tables one gap spans many
// users: unrelated users' requests would lock each other out and
// deadlock. Under READ COMMITTED locks are taken on existing rows only,
// and every change is written so that this is enough (see RequestFriend).
func (s *Store) relationTx(ctx context.Context, op string, users relationPair, ids []int64, events RelationEvents,
	fn func(tx *sqlx.Tx, now time.Time) (RelationOutcome, error)) (RelationChange, error) {
	p := txRetry
	p.Retryable = func(err error) bool {
		_, dup := duplicateKey(err)
		return IsRetryable(err) || dup
	}
	var ch RelationChange
	err := retry.Do(ctx, p, func(ctx context.Context) (err error) {
		ch, err = s.relationTxOnce(ctx, users, ids, events, fn)
		return err
	})
	if err != nil {
		return RelationChange{}, fmt.Errorf("store: %s: %w", op, err)
	}
	return ch, nil
}

func (s *Store) relationTxOnce(ctx context.Context, users relationPair, ids []int64, events RelationEvents,
	fn func(tx *sqlx.Tx, now time.Time) (RelationOutcome, error)) (RelationChange, error) {
	tx, err := s.db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return RelationChange{}, err
	}
	defer func() { _ = tx.Rollback() }()
	now := ms(time.Now())
	out, err := fn(tx, now)
	if err != nil {
		return RelationChange{}, err
	}
	ch := RelationChange{Outcome: out}
	if out != RelationUnchanged && events != nil {
		ch.Events = events(out)
	}
	if len(ch.Events) > len(ids) {
		return RelationChange{}, fmt.Errorf("%d events but %d event ids", len(ch.Events), len(ids))
	}
	if len(ch.Events) > 0 {
		seqs, err := AppendMailboxTx(ctx, tx, ch.Events, ids[:len(ch.Events)])
		if err != nil {
			return RelationChange{}, fmt.Errorf("append mailbox: %w", err)
		}
		for i := range ch.Events {
			ch.Events[i].ID = ids[i]
			ch.Events[i].Seq = seqs[i]
		}
	}
	// Last before the commit (the dispatcher's settle rule).
	if typ := relationWebhookEvents[out]; typ != "" {
		if err := s.writeWebhookEvents(ctx, tx, now, pendingEvent{typ: typ, data: users}); err != nil {
			return RelationChange{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return RelationChange{}, err
	}
	return ch, nil
}

// lockRequest reads the status of the request from -> to under a row
// lock; 0 when there is none (nothing is locked then: READ COMMITTED). A
// row another transaction inserted and has not committed is waited for.
func lockRequest(ctx context.Context, tx *sqlx.Tx, from, to int64) (int, error) {
	var st int
	err := tx.GetContext(ctx, &st, "SELECT status FROM t_friend_requests WHERE to_user_id = ? AND from_user_id = ? FOR UPDATE", to, from)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return st, err
}

// lockFriends reports, under row locks, which of the two directed rows
// of a and b exist.
func lockFriends(ctx context.Context, tx *sqlx.Tx, a, b int64) (ab, ba bool, err error) {
	var owners []int64
	err = tx.SelectContext(ctx, &owners, `SELECT user_id FROM t_friends
WHERE (user_id = ? AND friend_id = ?) OR (user_id = ? AND friend_id = ?) FOR UPDATE`, a, b, b, a)
	for _, o := range owners {
		if o == a {
			ab = true
		} else {
			ba = true
		}
	}
	return ab, ba, err
}

// befriend writes both directed rows (those missing) and marks a pending
// request in either direction accepted. It reports whether a row was
// written. The rows are inserted smaller user first whichever way the
// call names them, so two calls for one pair lock in the same order.
func befriend(ctx context.Context, tx *sqlx.Tx, a, b int64, now time.Time) (bool, error) {
	a, b = Pair(a, b)
	res, err := tx.ExecContext(ctx, `INSERT IGNORE INTO t_friends (user_id, friend_id, remark, created_at, updated_at)
VALUES (?, ?, '', ?, ?), (?, ?, '', ?, ?)`, a, b, now, now, b, a, now, now)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE t_friend_requests SET status = ?, updated_at = ?
WHERE ((to_user_id = ? AND from_user_id = ?) OR (to_user_id = ? AND from_user_id = ?)) AND status = ?`,
		RequestAccepted, now, a, b, b, a, RequestPending); err != nil {
		return false, err
	}
	return n > 0, nil
}

// RequestFriend records a friend request from -> to with note. Already
// friends: unchanged. A pending request to -> from (they asked first, or
// are asking at this moment): the two become friends at once
// (RelationBefriended). A pending request from -> to: unchanged but for
// the note. Otherwise the request is created or set back to pending
// (RelationRequested). events gives the mailbox events of the outcome,
// appended in the same transaction.
//
// Two users asking each other at once: each writes its own request first
// and only then reads the other's under a lock, so the later reader sees
// the other's row (or waits for it, which InnoDB may end as a deadlock
// that is retried): they end as friends, never as two pending requests.
func (s *Store) RequestFriend(ctx context.Context, from, to int64, note string, ids []int64, events RelationEvents) (RelationChange, error) {
	return s.relationTx(ctx, "request friend", pairOf(from, to), ids, events, func(tx *sqlx.Tx, now time.Time) (RelationOutcome, error) {
		ab, ba, err := lockFriends(ctx, tx, from, to)
		if err != nil {
			return 0, err
		}
		if ab && ba {
			return RelationUnchanged, nil
		}
		if ab || ba {
			// Half a friendship (never written so; repaired): asking is
			// agreeing.
			if _, err := befriend(ctx, tx, from, to, now); err != nil {
				return 0, err
			}
			return RelationBefriended, nil
		}
		own, err := lockRequest(ctx, tx, from, to)
		if err != nil {
			return 0, err
		}
		out := RelationRequested
		switch own {
		case RequestPending:
			out = RelationUnchanged
			_, err = tx.ExecContext(ctx, "UPDATE t_friend_requests SET note = ? WHERE to_user_id = ? AND from_user_id = ?", note, to, from)
		case 0:
			// A plain INSERT: a concurrent identical request makes it a
			// duplicate-key error, and the retry finds that one pending.
			_, err = tx.ExecContext(ctx, `INSERT INTO t_friend_requests (to_user_id, from_user_id, note, status, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?)`, to, from, note, RequestPending, now, now)
		default:
			_, err = tx.ExecContext(ctx, "UPDATE t_friend_requests SET note = ?, status = ?, updated_at = ? WHERE to_user_id = ? AND from_user_id = ?",
				note, RequestPending, now, to, from)
		}
		if err != nil {
			return 0, err
		}
		rev, err := lockRequest(ctx, tx, to, from)
		if err != nil {
			return 0, err
		}
		if rev == RequestPending {
			if _, err := befriend(ctx, tx, from, to, now); err != nil {
				return 0, err
			}
			return RelationBefriended, nil
		}
		return out, nil
	})
}

// AcceptFriend accepts the request from -> to (to is the one accepting):
// both become friends (RelationBefriended). Accepting again while they
// are still friends is unchanged; ErrNotFound when there is no pending
// request (none, rejected, or accepted and removed since).
func (s *Store) AcceptFriend(ctx context.Context, to, from int64, ids []int64, events RelationEvents) (RelationChange, error) {
	return s.relationTx(ctx, "accept friend", pairOf(to, from), ids, events, func(tx *sqlx.Tx, now time.Time) (RelationOutcome, error) {
		st, err := lockRequest(ctx, tx, from, to)
		if err != nil {
			return 0, err
		}
		ab, ba, err := lockFriends(ctx, tx, to, from)
		if err != nil {
			return 0, err
		}
		switch {
		case st == RequestAccepted && ab && ba:
			return RelationUnchanged, nil
		case st != RequestPending:
			return 0, ErrNotFound
		}
		wrote, err := befriend(ctx, tx, to, from, now)
		if err != nil {
			return 0, err
		}
		if !wrote {
			return RelationUnchanged, nil // friends already (added directly meanwhile)
		}
		return RelationBefriended, nil
	})
}

// RejectFriend rejects the pending request from -> to (RelationRejected).
// Rejecting again is unchanged; ErrNotFound when there is no request or
// it was accepted.
func (s *Store) RejectFriend(ctx context.Context, to, from int64, ids []int64, events RelationEvents) (RelationChange, error) {
	return s.relationTx(ctx, "reject friend", pairOf(to, from), ids, events, func(tx *sqlx.Tx, now time.Time) (RelationOutcome, error) {
		st, err := lockRequest(ctx, tx, from, to)
		if err != nil {
			return 0, err
		}
		switch st {
		case RequestRejected:
			return RelationUnchanged, nil
		case RequestPending:
			_, err := tx.ExecContext(ctx, "UPDATE t_friend_requests SET status = ?, updated_at = ? WHERE to_user_id = ? AND from_user_id = ?",
				RequestRejected, now, to, from)
			return RelationRejected, err
		default:
			return 0, ErrNotFound
		}
	})
}

// AddFriend makes a and b friends directly, without a request (the
// business API): both rows in one transaction, and any pending request
// between them is marked accepted. Friends already: unchanged.
func (s *Store) AddFriend(ctx context.Context, a, b int64, ids []int64, events RelationEvents) (RelationChange, error) {
	return s.relationTx(ctx, "add friend", pairOf(a, b), ids, events, func(tx *sqlx.Tx, now time.Time) (RelationOutcome, error) {
		wrote, err := befriend(ctx, tx, a, b, now)
		if err != nil {
			return 0, err
		}
		if !wrote {
			return RelationUnchanged, nil
		}
		return RelationBefriended, nil
	})
}

// RemoveFriend deletes both rows of the friendship of a and b
// (RelationRemoved); not friends: unchanged. Requests between them keep
// their status, so either may ask again.
func (s *Store) RemoveFriend(ctx context.Context, a, b int64, ids []int64, events RelationEvents) (RelationChange, error) {
	return s.relationTx(ctx, "remove friend", pairOf(a, b), ids, events, func(tx *sqlx.Tx, now time.Time) (RelationOutcome, error) {
		res, err := tx.ExecContext(ctx, "DELETE FROM t_friends WHERE (user_id = ? AND friend_id = ?) OR (user_id = ? AND friend_id = ?)", a, b, b, a)
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return RelationUnchanged, nil
		}
		return RelationRemoved, nil
	})
}

// SetRemark sets user's remark for friend (RelationRemarked); the same
// remark again is unchanged. ErrNotFound when they are not friends.
func (s *Store) SetRemark(ctx context.Context, user, friend int64, remark string, ids []int64, events RelationEvents) (RelationChange, error) {
	return s.relationTx(ctx, "set remark", pairOf(user, friend), ids, events, func(tx *sqlx.Tx, now time.Time) (RelationOutcome, error) {
		var cur string
		err := tx.GetContext(ctx, &cur, "SELECT remark FROM t_friends WHERE user_id = ? AND friend_id = ? FOR UPDATE", user, friend)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, ErrNotFound
		}
		if err != nil {
			return 0, err
		}
		if cur == remark {
			return RelationUnchanged, nil
		}
		_, err = tx.ExecContext(ctx, "UPDATE t_friends SET remark = ?, updated_at = ? WHERE user_id = ? AND friend_id = ?", remark, now, user, friend)
		return RelationRemarked, err
	})
}

// Block records that user blocks target (RelationBlocked); blocked
// already: unchanged. A friendship is left as it is.
func (s *Store) Block(ctx context.Context, user, target int64, ids []int64, events RelationEvents) (RelationChange, error) {
	return s.relationTx(ctx, "block", pairOf(user, target), ids, events, func(tx *sqlx.Tx, now time.Time) (RelationOutcome, error) {
		res, err := tx.ExecContext(ctx, "INSERT IGNORE INTO t_blocks (user_id, blocked_user_id, created_at) VALUES (?, ?, ?)", user, target, now)
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return RelationUnchanged, nil
		}
		return RelationBlocked, nil
	})
}

// Unblock removes user's block of target (RelationUnblocked); not
// blocked: unchanged.
func (s *Store) Unblock(ctx context.Context, user, target int64, ids []int64, events RelationEvents) (RelationChange, error) {
	return s.relationTx(ctx, "unblock", pairOf(user, target), ids, events, func(tx *sqlx.Tx, now time.Time) (RelationOutcome, error) {
		res, err := tx.ExecContext(ctx, "DELETE FROM t_blocks WHERE user_id = ? AND blocked_user_id = ?", user, target)
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return RelationUnchanged, nil
		}
		return RelationUnblocked, nil
	})
}

// ListFriends returns up to limit friends of user with friend_id > after,
// by friend_id: one range of the primary key.
func (s *Store) ListFriends(ctx context.Context, user, after int64, limit int) ([]Friend, error) {
	var out []Friend
	err := s.db.SelectContext(ctx, &out, `SELECT friend_id, remark, created_at FROM t_friends
WHERE user_id = ? AND friend_id > ? ORDER BY friend_id LIMIT ?`, user, after, limit)
	if err != nil {
		return nil, fmt.Errorf("store: list friends: %w", err)
	}
	return out, nil
}

// ListBlocks returns up to limit users blocked by user with id > after, by
// id.
func (s *Store) ListBlocks(ctx context.Context, user, after int64, limit int) ([]Block, error) {
	var out []Block
	err := s.db.SelectContext(ctx, &out, `SELECT blocked_user_id, created_at FROM t_blocks
WHERE user_id = ? AND blocked_user_id > ? ORDER BY blocked_user_id LIMIT ?`, user, after, limit)
	if err != nil {
		return nil, fmt.Errorf("store: list blocks: %w", err)
	}
	return out, nil
}

// ListIncomingRequests returns up to limit pending requests to user with
// from_user_id > after, by from_user_id.
func (s *Store) ListIncomingRequests(ctx context.Context, user, after int64, limit int) ([]FriendRequest, error) {
	var out []FriendRequest
	err := s.db.SelectContext(ctx, &out, `SELECT from_user_id, note, created_at, updated_at FROM t_friend_requests
WHERE to_user_id = ? AND status = ? AND from_user_id > ? ORDER BY from_user_id LIMIT ?`, user, RequestPending, after, limit)
	if err != nil {
		return nil, fmt.Errorf("store: list friend requests: %w", err)
	}
	return out, nil
}

// IsBlockedEitherWay reports whether a blocked b or b blocked a, in one
// statement (two primary-key lookups).
func (s *Store) IsBlockedEitherWay(ctx context.Context, a, b int64) (bool, error) {
	var blocked bool
	err := s.db.GetContext(ctx, &blocked, `SELECT EXISTS(SELECT 1 FROM t_blocks
WHERE (user_id = ? AND blocked_user_id = ?) OR (user_id = ? AND blocked_user_id = ?))`, a, b, b, a)
	if err != nil {
		return false, fmt.Errorf("store: is blocked: %w", err)
	}
	return blocked, nil
}

// AreFriends reports whether a has b as a friend. The two directed rows
// are written and deleted together, so one row answers for both.
func (s *Store) AreFriends(ctx context.Context, a, b int64) (bool, error) {
	var friends bool
	err := s.db.GetContext(ctx, &friends, "SELECT EXISTS(SELECT 1 FROM t_friends WHERE user_id = ? AND friend_id = ?)", a, b)
	if err != nil {
		return false, fmt.Errorf("store: are friends: %w", err)
	}
	return friends, nil
}

// P2PFacts reads, in one statement (one round trip on the send path),
// whether the recipient exists and is active, whether either user blocked
// the other, and whether they are friends. Reading all three always also
// makes the answer take the same time whichever refuses the send.
func (s *Store) P2PFacts(ctx context.Context, from, to int64) (P2PFacts, error) {
	var f P2PFacts
	err := s.db.GetContext(ctx, &f, `SELECT
COALESCE((SELECT status FROM t_users WHERE id = ?), 0) AS recipient_status,
EXISTS(SELECT 1 FROM t_blocks WHERE (user_id = ? AND blocked_user_id = ?) OR (user_id = ? AND blocked_user_id = ?)) AS blocked,
EXISTS(SELECT 1 FROM t_friends WHERE user_id = ? AND friend_id = ?) AS friends`,
		to, from, to, to, from, from, to)
	if err != nil {
		return P2PFacts{}, fmt.Errorf("store: p2p facts: %w", err)
	}
	return f, nil
}
