package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"time"
)

// ChooseBatchID picks the MsgId of message i of a batch, given its
// conversation's running last id (the row's last_msg_id, then the id of the
// batch's previous message in that conversation) and the commit time; it
// must return an id > lastMsgID.
type ChooseBatchID func(ctx context.Context, i int, lastMsgID int64, now time.Time) (int64, error)

// BatchResult is the outcome of InsertMessages: Rows[i] is message i's row:
// the stored one when Found[i] (its client key already had a row: a retry
// of a committed send, or a reuse of the key; nothing was written for it),
// else the one inserted, unless Missing[i] (its conversation row does not
// exist; nothing was written for it).
type BatchResult struct {
	Rows    []Message
	Found   []bool
	Missing []bool
}

// ErrBatchRow wraps an error that concerns one row of a batch (a duplicate
// key, the error of choose): the batch was rolled back and its messages
// should be committed one by one with InsertMessage, which tells the cases
// apart.
var ErrBatchRow = errors.New("store: a row of the batch was refused")

// rollbackTimeout bounds the ROLLBACK of a batch that failed; a connection
// that cannot roll back within it is closed, which rolls back too.
const rollbackTimeout = 5 * time.Second

// InsertMessages runs the send transaction of several messages once (group
// commit): look up their client keys (idempotency: a key with a row is
// reported Found and left out), lock their conversation rows in ascending
// id order (two batches never wait on each other in a cycle), choose the
// ids of the new messages in the order of msgs so that ids within a
// conversation increase in that order, insert them with one statement,
// advance every conversation's last_msg_id/last_msg_at with one statement,
// commit. Messages whose conversation does not exist are reported Missing
// and left out. Errors: ErrBatchRow (rolled back; duplicate key or choose
// failed), retryable lock errors (see IsRetryable), or other database
// errors; with any error nothing was committed, except when the COMMIT's
// own answer was lost, exactly as with a single COMMIT statement.
//
// It costs two round trips, each one multi-statement request on one
// connection (decision 92): the lookup, START TRANSACTION and the locking
// SELECT; then the INSERT, the UPDATE and COMMIT. MySQL stops a
// multi-statement request at its first error, so a refused INSERT never
// reaches the COMMIT behind it, and the transaction is rolled back.
func (s *Store) InsertMessages(ctx context.Context, msgs []NewMessage, choose ChooseBatchID) (BatchResult, error) {
	res := BatchResult{Rows: make([]Message, len(msgs)), Found: make([]bool, len(msgs)), Missing: make([]bool, len(msgs))}
	if len(msgs) == 0 {
		return res, nil
	}
	convs := make([]int64, 0, len(msgs))
	seen := make(map[int64]struct{}, len(msgs))
	keys := make([]ClientKey, len(msgs))
	for i, m := range msgs {
		keys[i] = ClientKey{SenderID: m.SenderID, ConversationID: m.ConversationID, ClientMsgID: m.ClientMsgID}
		if _, ok := seen[m.ConversationID]; !ok {
			seen[m.ConversationID] = struct{}{}
			convs = append(convs, m.ConversationID)
		}
	}

	conn, err := s.db.Conn(ctx)
	if err != nil {
		return res, err
	}
	defer conn.Close()
	inTx := false
	committed := false
	defer func() {
		if inTx && !committed {
			rollback(ctx, conn)
		}
	}()

	// Round trip 1: the idempotency lookup (outside the transaction, as a
	// plain read), START TRANSACTION and the locking read. FORCE INDEX
	// (PRIMARY) on this SELECT and the UPDATE below: when the IN list
	// covers a large share of a small table, MariaDB plans a full index
	// scan, which locks rows of conversations the batch never names and
	// deadlocks with the batches that do. A primary-key range locks
	// exactly the batch's rows.
	var b strings.Builder
	args := make([]any, 0, 9*len(msgs))
	b.WriteString(clientKeysQuery)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?)")
		args = append(args, k.SenderID, k.ConversationID, k.ClientMsgID)
	}
	b.WriteString("); START TRANSACTION; SELECT id, last_msg_id FROM t_conversations FORCE INDEX (PRIMARY) WHERE id IN (")
	for i, c := range convs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('?')
		args = append(args, c)
	}
	b.WriteString(") ORDER BY id FOR UPDATE")
	inTx = true // from here on an error may leave the transaction open
	found, last, err := lookupAndLock(ctx, conn, b.String(), args)
	if err != nil {
		return res, err
	}

	now := ms(time.Now())
	b.Reset()
	args = args[:0]
	b.WriteString("INSERT INTO t_messages (" + messageColumns + ") VALUES ")
	n := 0
	advanced := make(map[int64]bool, len(convs))
	for i, m := range msgs {
		if row, ok := found[keys[i]]; ok {
			res.Rows[i], res.Found[i] = row, true
			continue
		}
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
		advanced[m.ConversationID] = true
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
		return res, nil // every send a replay or its conversation missing: nothing to write
	}

	// Round trip 2: one UPDATE for every conversation that got messages
	// (last holds each one's newest id), then COMMIT. A conversation
	// whose every send was found is in last with its row's value, which
	// the UPDATE leaves out.
	b.WriteString("; UPDATE t_conversations FORCE INDEX (PRIMARY) SET last_msg_id = CASE id")
	var in strings.Builder
	var inArgs []any
	for _, c := range convs {
		if !advanced[c] {
			continue
		}
		b.WriteString(" WHEN ? THEN ?")
		args = append(args, c, last[c])
		if len(inArgs) > 0 {
			in.WriteByte(',')
		}
		in.WriteByte('?')
		inArgs = append(inArgs, c)
	}
	b.WriteString(" END, last_msg_at = ? WHERE id IN (")
	args = append(args, now)
	b.WriteString(in.String())
	b.WriteString("); COMMIT")
	args = append(args, inArgs...)
	if _, err := conn.ExecContext(ctx, b.String(), args...); err != nil {
		if _, dup := duplicateKey(err); dup {
			return res, errors.Join(ErrBatchRow, err)
		}
		return res, err
	}
	committed = true
	return res, nil
}

// lookupAndLock sends round trip 1 of InsertMessages and reads its two
// result sets: the rows found for the client keys, and each locked
// conversation's last_msg_id.
func lookupAndLock(ctx context.Context, conn *sql.Conn, query string, args []any) (map[ClientKey]Message, map[int64]int64, error) {
	rows, err := conn.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	found, err := scanClientKeys(rows)
	if err != nil {
		return nil, nil, err
	}
	// START TRANSACTION's OK is skipped: NextResultSet moves to the next
	// result with rows, or reports the first statement that failed.
	if !rows.NextResultSet() {
		if err := rows.Err(); err != nil {
			return nil, nil, err
		}
		return nil, nil, errors.New("store: batch: no answer to the locking read")
	}
	last := make(map[int64]int64)
	for rows.Next() {
		var id, l int64
		if err := rows.Scan(&id, &l); err != nil {
			return nil, nil, err
		}
		last[id] = l
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return found, last, rows.Close()
}

// rollback ends conn's open transaction. It runs even when ctx has ended
// (the batch's deadline may be what failed it), within rollbackTimeout;
// when it fails the connection is discarded rather than returned to the
// pool with a transaction open.
func rollback(ctx context.Context, conn *sql.Conn) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if _, err := conn.ExecContext(rctx, "ROLLBACK"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}
