package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/retry"
)

// Reaction errors.
var (
	// ErrDuplicateReaction: the user already reacted with this emoji.
	ErrDuplicateReaction = errors.New("store: duplicate reaction")
	// ErrReactionKinds: the message carries the most emojis allowed.
	ErrReactionKinds = errors.New("store: reaction kinds limit")
	// ErrReactionsPerUser: the user has the most reactions allowed on
	// the message.
	ErrReactionsPerUser = errors.New("store: reactions per user limit")
)

// ReactionChange adds (Add) or removes UserID's Emoji on a message, within
// the caps (Add only).
type ReactionChange struct {
	UserID  int64
	Emoji   string
	Add     bool
	Kinds   int // the most emojis on one message
	PerUser int // the most of them one user adds
	Now     time.Time
}

// Reacted is the outcome of React.
type Reacted struct {
	Message Message
	// Group is set for a group conversation; Members are a P2P
	// conversation's members (a group's are deliver's work).
	Group   bool
	Members []int64
	// Count is the emoji's count on the message now.
	Count int
	// Changed is false for a remove of a reaction the user did not have:
	// nothing was written.
	Changed bool
}

// reactionEvent is the data of a message.reacted webhook event.
type reactionEvent struct {
	MsgID          jsonid.ID `json:"msg_id"`
	ConversationID jsonid.ID `json:"conversation_id"`
	SenderID       jsonid.ID `json:"sender_id"`
	UserID         jsonid.ID `json:"user_id"`
	Emoji          string    `json:"emoji"`
	Added          bool      `json:"added"`
	Count          int       `json:"count"`
	Group          bool      `json:"group"`
}

// React applies c to message msgID (of conversationID when not 0) in one
// transaction that holds the message row, so concurrent reactions to one
// message cannot pass the caps together: the reaction row, the emoji's
// count, a mailbox event per member of a P2P conversation (event builds
// it from the new count) and the message.reacted webhook event. Errors:
// ErrNotFound, ErrWithdrawn, ErrDuplicateReaction, ErrReactionKinds,
// ErrReactionsPerUser.
func (s *Store) React(ctx context.Context, msgID, conversationID int64, c ReactionChange,
	ids func(n int) ([]int64, error), event func(member int64, m Message, count int) MailboxEvent) (Reacted, error) {
	var r Reacted
	err := retry.Do(ctx, txRetry, func(ctx context.Context) (err error) {
		r, err = s.reactOnce(ctx, msgID, conversationID, c, ids, event)
		return err
	})
	switch {
	case err == ctx.Err() && err != nil:
		return Reacted{}, err
	case IsRetryable(err):
		return Reacted{}, fmt.Errorf("store: react: %w", err)
	}
	return r, err
}

func (s *Store) reactOnce(ctx context.Context, msgID, conversationID int64, c ReactionChange,
	ids func(n int) ([]int64, error), event func(member int64, m Message, count int) MailboxEvent) (Reacted, error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return Reacted{}, err
	}
	defer func() { _ = tx.Rollback() }()
	m, err := lockMessage(ctx, tx, msgID, conversationID)
	switch {
	case err != nil:
		return Reacted{}, err
	case m.Status != MessageNormal:
		return Reacted{}, ErrWithdrawn
	}
	r := Reacted{Message: m}
	if c.Add {
		r.Count, err = addReactionTx(ctx, tx, m, c)
		r.Changed = err == nil
	} else {
		r.Count, r.Changed, err = removeReactionTx(ctx, tx, m.ID, c)
	}
	if err != nil || !r.Changed {
		return r, err
	}
	if r.Group, r.Members, err = conversationMembersTx(ctx, tx, m.ConversationID); err != nil {
		return Reacted{}, err
	}
	if err := appendMemberEventsTx(ctx, tx, r.Members, ids, func(u int64) MailboxEvent { return event(u, m, r.Count) }); err != nil {
		return Reacted{}, err
	}
	// Last before the commit (the dispatcher's settle rule).
	if err := s.writeWebhookEvents(ctx, tx, c.Now, pendingEvent{typ: EventMessageReacted, conversationID: m.ConversationID,
		data: reactionEvent{MsgID: jsonid.ID(m.ID), ConversationID: jsonid.ID(m.ConversationID), SenderID: jsonid.ID(m.SenderID),
			UserID: jsonid.ID(c.UserID), Emoji: c.Emoji, Added: c.Add, Count: r.Count, Group: r.Group}}); err != nil {
		return Reacted{}, err
	}
	if err := tx.Commit(); err != nil {
		return Reacted{}, err
	}
	return r, nil
}

// addReactionTx adds c's reaction to m within the caps and answers the
// emoji's new count.
func addReactionTx(ctx context.Context, tx *sqlx.Tx, m Message, c ReactionChange) (int, error) {
	var mine []string
	if err := tx.SelectContext(ctx, &mine, "SELECT emoji FROM t_reactions WHERE msg_id = ? AND user_id = ?", m.ID, c.UserID); err != nil {
		return 0, err
	}
	if slices.Contains(mine, c.Emoji) {
		return 0, ErrDuplicateReaction
	}
	if len(mine) >= c.PerUser {
		return 0, ErrReactionsPerUser
	}
	var n int
	err := tx.GetContext(ctx, &n, "SELECT n FROM t_reaction_counts WHERE msg_id = ? AND emoji = ?", m.ID, c.Emoji)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		var kinds int
		if err := tx.GetContext(ctx, &kinds, "SELECT COUNT(*) FROM t_reaction_counts WHERE msg_id = ?", m.ID); err != nil {
			return 0, err
		}
		if kinds >= c.Kinds {
			return 0, ErrReactionKinds
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO t_reaction_counts (msg_id, emoji, n, first_at) VALUES (?, ?, 1, ?)", m.ID, c.Emoji, c.Now); err != nil {
			return 0, err
		}
	case err != nil:
		return 0, err
	default:
		if _, err := tx.ExecContext(ctx, "UPDATE t_reaction_counts SET n = n + 1 WHERE msg_id = ? AND emoji = ?", m.ID, c.Emoji); err != nil {
			return 0, err
		}
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO t_reactions (msg_id, emoji, user_id, conversation_id, created_at) VALUES (?, ?, ?, ?, ?)",
		m.ID, c.Emoji, c.UserID, m.ConversationID, c.Now); err != nil {
		return 0, err
	}
	return n + 1, nil
}

// removeReactionTx removes c's reaction from message msgID, answering the
// emoji's count and whether there was one to remove.
func removeReactionTx(ctx context.Context, tx *sqlx.Tx, msgID int64, c ReactionChange) (int, bool, error) {
	res, err := tx.ExecContext(ctx, "DELETE FROM t_reactions WHERE msg_id = ? AND emoji = ? AND user_id = ?", msgID, c.Emoji, c.UserID)
	if err != nil {
		return 0, false, err
	}
	gone, err := res.RowsAffected()
	if err != nil {
		return 0, false, err
	}
	var n int
	err = tx.GetContext(ctx, &n, "SELECT n FROM t_reaction_counts WHERE msg_id = ? AND emoji = ?", msgID, c.Emoji)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	case gone == 0:
		return n, false, nil
	case n <= 1:
		_, err = tx.ExecContext(ctx, "DELETE FROM t_reaction_counts WHERE msg_id = ? AND emoji = ?", msgID, c.Emoji)
		return 0, true, err
	}
	_, err = tx.ExecContext(ctx, "UPDATE t_reaction_counts SET n = n - 1 WHERE msg_id = ? AND emoji = ?", msgID, c.Emoji)
	return n - 1, true, err
}

// ReactionCount is one emoji's count on a message; Me says the asking
// user is among them.
type ReactionCount struct {
	MsgID int64  `db:"msg_id"`
	Emoji string `db:"emoji"`
	Count int    `db:"n"`
	Me    bool   `db:"me"`
}

// ReactionCounts reads the counts of the messages ids of conversation cid
// that are neither recalled nor deleted for everyone, by message id and
// then in the order each emoji was first used, with userID's own marked.
// Messages of another conversation are absent, as are ones without
// reactions.
func (s *Store) ReactionCounts(ctx context.Context, cid, userID int64, ids []int64) ([]ReactionCount, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	q, args, err := sqlx.In(`SELECT c.msg_id, c.emoji, c.n, r.user_id IS NOT NULL AS me
		FROM t_reaction_counts c
		JOIN t_messages m ON m.id = c.msg_id AND m.conversation_id = ? AND m.status = ?
		LEFT JOIN t_reactions r ON r.msg_id = c.msg_id AND r.emoji = c.emoji AND r.user_id = ?
		WHERE c.msg_id IN (?) ORDER BY c.msg_id, c.first_at, c.emoji`, cid, MessageNormal, userID, ids)
	if err != nil {
		return nil, fmt.Errorf("store: reaction counts: %w", err)
	}
	var out []ReactionCount
	if err := s.db.SelectContext(ctx, &out, s.db.Rebind(q), args...); err != nil {
		return nil, fmt.Errorf("store: reaction counts: %w", err)
	}
	return out, nil
}

// Reactor is one user who reacted with an emoji, and when.
type Reactor struct {
	UserID    int64     `db:"user_id"`
	ReactedAt time.Time `db:"created_at"`
}

// Reactors reads up to limit users who reacted to msgID with emoji, after
// user id after, by user id, and the emoji's count.
func (s *Store) Reactors(ctx context.Context, msgID int64, emoji string, after int64, limit int) ([]Reactor, int, error) {
	var out []Reactor
	if err := s.db.SelectContext(ctx, &out, "SELECT user_id, created_at FROM t_reactions WHERE msg_id = ? AND emoji = ? AND user_id > ? ORDER BY user_id LIMIT ?",
		msgID, emoji, after, limit); err != nil {
		return nil, 0, fmt.Errorf("store: reactors: %w", err)
	}
	var n int
	err := s.db.GetContext(ctx, &n, "SELECT n FROM t_reaction_counts WHERE msg_id = ? AND emoji = ?", msgID, emoji)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, 0, fmt.Errorf("store: reactors: %w", err)
	}
	return out, n, nil
}
