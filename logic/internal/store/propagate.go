package store

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// conversationMembersTx reads, inside a change's transaction, whether
// conversation cid is a group and, when it is not, its members in id order
// (the order mailbox seq rows are locked in). A group's members may be
// thousands: deliver reaches them in chunks, so they are not read here.
func conversationMembersTx(ctx context.Context, tx *sqlx.Tx, cid int64) (group bool, members []int64, err error) {
	var ctype int
	if err := tx.GetContext(ctx, &ctype, "SELECT type FROM t_conversations WHERE id = ?", cid); err != nil {
		return false, nil, err
	}
	if ctype == ConversationGroup {
		return true, nil, nil
	}
	err = tx.SelectContext(ctx, &members, "SELECT user_id FROM t_conversation_members WHERE conversation_id = ? ORDER BY user_id", cid)
	return false, members, err
}

// appendMemberEventsTx appends one mailbox event per member, built by
// event, with ids taken from ids: a P2P conversation's members learn of a
// change to one of its messages in the change's own transaction.
func appendMemberEventsTx(ctx context.Context, tx *sqlx.Tx, members []int64, ids func(n int) ([]int64, error), event func(member int64) MailboxEvent) error {
	if len(members) == 0 {
		return nil
	}
	evIDs, err := ids(len(members))
	if err != nil {
		return err
	}
	events := make([]MailboxEvent, len(members))
	for i, u := range members {
		events[i] = event(u)
	}
	_, err = AppendMailboxTx(ctx, tx, events, evIDs[:len(members)])
	return err
}
