package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"
)

// Member is the part of a t_conversation_members row sync and the
// read/settings paths use.
type Member struct {
	ConversationID int64 `db:"conversation_id"`
	UserID         int64 `db:"user_id"`
	Role           int   `db:"role"`
	LastReadMsgID  int64 `db:"last_read_msg_id"`
	Muted          bool  `db:"muted"`
	Pinned         bool  `db:"pinned"`
	// HiddenAt is the conversation's last_msg_id when the member hid it (0:
	// not hidden); it is hidden while no newer message exists.
	HiddenAt int64 `db:"hidden_at_msg_id"`
}

// Hidden reports whether the conversation is hidden from the member's list
// given its newest message id.
func (m Member) Hidden(lastMsgID int64) bool { return m.HiddenAt != 0 && lastMsgID <= m.HiddenAt }

const memberColumns = "conversation_id, user_id, role, last_read_msg_id, muted, pinned, hidden_at_msg_id"

// Conversation is a t_conversations row.
type Conversation struct {
	ID        int64     `db:"id"`
	Type      int       `db:"type"`
	LastMsgID int64     `db:"last_msg_id"`
	LastMsgAt time.Time `db:"last_msg_at"`
}

// GetMember reads a user's membership of a conversation; ErrNotFound when
// the user is not a member.
func (s *Store) GetMember(ctx context.Context, conversationID, userID int64) (Member, error) {
	var m Member
	err := s.db.GetContext(ctx, &m, "SELECT "+memberColumns+" FROM t_conversation_members WHERE conversation_id = ? AND user_id = ?",
		conversationID, userID)
	if errors.Is(err, sql.ErrNoRows) {
		return Member{}, ErrNotFound
	}
	return m, err
}

// MemberIDs returns the user ids of a conversation's members, ascending
// (the order mailbox seq rows are locked in).
func (s *Store) MemberIDs(ctx context.Context, conversationID int64) ([]int64, error) {
	var out []int64
	err := s.db.SelectContext(ctx, &out, "SELECT user_id FROM t_conversation_members WHERE conversation_id = ? ORDER BY user_id", conversationID)
	return out, err
}

// Memberships returns the conversation ids of a user (the cold rebuild of
// the user's list).
func (s *Store) Memberships(ctx context.Context, userID int64) ([]int64, error) {
	var out []int64
	err := s.db.SelectContext(ctx, &out, "SELECT conversation_id FROM t_conversation_members WHERE user_id = ?", userID)
	return out, err
}

// GetConversation reads a conversation row; ErrNotFound without one.
func (s *Store) GetConversation(ctx context.Context, id int64) (Conversation, error) {
	var c Conversation
	err := s.db.GetContext(ctx, &c, "SELECT id, type, last_msg_id, last_msg_at FROM t_conversations WHERE id = ?", id)
	if errors.Is(err, sql.ErrNoRows) {
		return Conversation{}, ErrNotFound
	}
	return c, err
}

// AdvanceRead moves a member's last_read_msg_id forward to msgID (never
// back) and returns the effective value and whether it moved. ErrNotFound
// when the user is not a member.
func (s *Store) AdvanceRead(ctx context.Context, conversationID, userID, msgID int64) (effective int64, moved bool, err error) {
	res, err := s.db.ExecContext(ctx, "UPDATE t_conversation_members SET last_read_msg_id = GREATEST(last_read_msg_id, ?) WHERE conversation_id = ? AND user_id = ?",
		msgID, conversationID, userID)
	if err != nil {
		return 0, false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, false, err
	}
	m, err := s.GetMember(ctx, conversationID, userID)
	if err != nil {
		return 0, false, err
	}
	return m.LastReadMsgID, n > 0, nil
}

// UpdateSettings sets the member's flags that are non-nil and returns the
// row after the update; ErrNotFound when the user is not a member.
func (s *Store) UpdateSettings(ctx context.Context, conversationID, userID int64, muted, pinned, hidden *bool) (Member, error) {
	if muted != nil || pinned != nil || hidden != nil {
		var sets []string
		var args []any
		if muted != nil {
			sets, args = append(sets, "m.muted = ?"), append(args, *muted)
		}
		if pinned != nil {
			sets, args = append(sets, "m.pinned = ?"), append(args, *pinned)
		}
		if hidden != nil {
			// Hidden up to the newest message now; the next one shows it
			// again. Read in the same statement, so no message slips in
			// between.
			if *hidden {
				// 1 when there is no message yet: ids are far above it.
				sets = append(sets, "m.hidden_at_msg_id = GREATEST(c.last_msg_id, 1)")
			} else {
				sets = append(sets, "m.hidden_at_msg_id = 0")
			}
		}
		q := "UPDATE t_conversation_members m JOIN t_conversations c ON c.id = m.conversation_id SET " + strings.Join(sets, ", ") +
			" WHERE m.conversation_id = ? AND m.user_id = ?"
		if _, err := s.db.ExecContext(ctx, q, append(args, conversationID, userID)...); err != nil {
			return Member{}, err
		}
	}
	return s.GetMember(ctx, conversationID, userID)
}
