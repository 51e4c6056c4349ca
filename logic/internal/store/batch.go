package store

import (
	"context"
	"errors"
	"strings"
	"time"
)

// ChooseBatchID picks the MsgId of message i of a batch, given its
// conversation's running last id (the row's last_msg_id, then the id of the
// batch's previous message in that conversation) and the commit time; it
// must return an id > lastMsgID.
type ChooseBatchID func(ctx context.Context, i int, lastMsgID int64, now time.Time) (int64, error)

// BatchResult is the outcome of InsertMessages: Rows[i] is message i's row
// unless Missing[i] (its conversation row does not exist; nothing was
// written for it).
type BatchResult struct {
	Rows    []Message
	Missing []bool
}

// ErrBatchRow wraps an error that concerns one row of a batch (a duplicate
// key, the error of choose): the batch was rolled back and its messages
// should be committed one by one with InsertMessage, which tells the cases
// apart.
var ErrBatchRow = errors.New("store: a row of the batch was refused")

// InsertMessages runs the send transaction of several messages once (group
// commit): lock their conversation rows in ascending id order (two batches
// never wait on each other in a cycle), choose the ids in the order of ms so
// that ids within a conversation increase in that order, insert every
// message with one statement, advance every conversation's
// last_msg_id/last_msg_at with one statement, commit. Messages whose
// conversation does not exist are reported Missing and left out. Errors:
// ErrBatchRow (rolled back; duplicate key or choose failed), retryable lock
// errors (see IsRetryable), or other database errors.
func (s *Store) InsertMessages(ctx context.Context, msgs []NewMessage, choose ChooseBatchID) (BatchResult, error) {
	res := BatchResult{Rows: make([]Message, len(msgs)), Missing: make([]bool, len(msgs))}
	if len(msgs) == 0 {
		return res, nil
	}
	convs := make([]int64, 0, len(msgs))
	seen := make(map[int64]struct{}, len(msgs))
	for _, m := range msgs {
		if _, ok := seen[m.ConversationID]; !ok {
			seen[m.ConversationID] = struct{}{}
			convs = append(convs, m.ConversationID)
		}
	}

	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return res, err
	}
	defer func() { _ = tx.Rollback() }()

	// FORCE INDEX (PRIMARY) on this SELECT and the UPDATE below: when the
	// IN list covers a large share of a small table, MariaDB plans a full
	// index scan, which locks rows of conversations the batch never names
	// and deadlocks with the batches that do. A primary-key range locks
	// exactly the batch's rows.
	var b strings.Builder
	args := make([]any, 0, 9*len(msgs))
	b.WriteString("SELECT id, last_msg_id FROM t_conversations FORCE INDEX (PRIMARY) WHERE id IN (")
	for i, c := range convs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('?')
		args = append(args, c)
	}
	b.WriteString(") ORDER BY id FOR UPDATE")
	rows, err := tx.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return res, err
	}
	last := make(map[int64]int64, len(convs))
	for rows.Next() {
		var id, l int64
		if err := rows.Scan(&id, &l); err != nil {
			_ = rows.Close()
			return res, err
		}
		last[id] = l
	}
	if err := rows.Close(); err != nil {
		return res, err
	}
	if err := rows.Err(); err != nil {
		return res, err
	}

	now := ms(time.Now())
	b.Reset()
	args = args[:0]
	b.WriteString("INSERT INTO t_messages (" + messageColumns + ") VALUES ")
	n := 0
	for i, m := range msgs {
		l, ok := last[m.ConversationID]
		if !ok {
			res.Missing[i] = true
			continue
		}
		id, err := choose(ctx, i, l, now)
		if err != nil {
			return res, errors.Join(ErrBatchRow, err)
		}
		last[m.ConversationID] = id
		row := Message{
			ID: id, ConversationID: m.ConversationID, SenderID: m.SenderID, SenderDevice: m.SenderDevice,
			ClientMsgID: m.ClientMsgID, MessageType: m.MessageType, Content: m.Content, Status: MessageNormal, CreatedAt: now,
		}
		res.Rows[i] = row
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?,?,?)")
		args = append(args, row.ID, row.ConversationID, row.SenderID, row.SenderDevice, row.ClientMsgID, row.MessageType, row.Content, row.Status, row.CreatedAt)
		n++
	}
	if n == 0 {
		return res, nil // every conversation missing: nothing to write
	}
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		if _, dup := duplicateKey(err); dup {
			return res, errors.Join(ErrBatchRow, err)
		}
		return res, err
	}

	// One UPDATE for every conversation that got messages; last holds each
	// one's newest id.
	b.Reset()
	args = args[:0]
	var in strings.Builder
	b.WriteString("UPDATE t_conversations FORCE INDEX (PRIMARY) SET last_msg_id = CASE id")
	k := 0
	for _, c := range convs {
		if _, ok := last[c]; !ok {
			continue
		}
		b.WriteString(" WHEN ? THEN ?")
		args = append(args, c, last[c])
		if k > 0 {
			in.WriteByte(',')
		}
		in.WriteByte('?')
		k++
	}
	b.WriteString(" END, last_msg_at = ? WHERE id IN (")
	args = append(args, now)
	b.WriteString(in.String())
	b.WriteByte(')')
	for _, c := range convs {
		if _, ok := last[c]; ok {
			args = append(args, c)
		}
	}
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return res, err
	}
	if err := tx.Commit(); err != nil {
		return res, err
	}
	return res, nil
}
