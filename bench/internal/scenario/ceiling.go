package scenario

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// Ceiling measures what the storage allows on this machine in this run:
// the send transaction's statements on the same MySQL (scratch database
// from the migrations, as many conversations and the same concurrency as
// p2p), the same messages committed the way logic's group commit does in
// batches of CeilingBatches, and XADD of a deliver-job-sized entry on the
// same Redis.
type Ceiling struct{}

// CeilingBatches are the batch sizes of the raw group-commit ceiling
// (issue 9's). Logic's batches are whatever sends wait at that moment (at
// most logic.commit_batch), so two sizes bracket them rather than one
// guess.
var CeilingBatches = []int{8, 32}

// commitWorkers is logic.commit_workers' default (decisions 28, 92), which the
// benchmark's logic runs with: the batched ceiling commits from as many
// connections as logic's group commit does.
const commitWorkers = 4

// Name implements Scenario.
func (Ceiling) Name() string { return "ceiling" }

// Run implements Scenario.
func (Ceiling) Run(ctx context.Context, e *Env) (*Result, error) {
	p := e.Profile
	res := &Result{Scenario: "ceiling", Data: map[string]any{}}
	// Logic's pool holds at most 64 MySQL connections and p2p keeps up to
	// (users × window) sends in flight, so 64 is the concurrency MySQL sees.
	conc := min(p.P2PUsers, 64)
	convs := max(p.P2PUsers/2, 1)
	name := e.C.DBName + "_ceil"
	dsn, err := e.C.CreateDatabase(ctx, name)
	if err != nil {
		return res, err
	}
	if err := e.C.Migrate(ctx, dsn); err != nil {
		return res, err
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return res, fmt.Errorf("scenario: ceiling: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(conc)
	db.SetMaxIdleConns(conc)
	now := time.Now().UTC()
	var vals []string
	var args []any
	for c := 1; c <= convs; c++ {
		vals = append(vals, "(?, 1, 0, ?, ?)")
		args = append(args, c, now, now)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO t_conversations (id, type, last_msg_id, last_msg_at, created_at) VALUES "+strings.Join(vals, ","), args...); err != nil {
		return res, fmt.Errorf("scenario: ceiling: seed conversations: %w", err)
	}
	content := []byte(`{"t":1,"text":"benchmark message 12345 from 1000001"}`)
	var ids atomic.Int64
	ids.Store(1 << 40)
	sendTx := func(ctx context.Context, w int, n int64) error {
		conv := w%convs + 1
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		var last int64
		if err := tx.QueryRowContext(ctx, "SELECT last_msg_id FROM t_conversations WHERE id = ? FOR UPDATE", conv).Scan(&last); err != nil {
			return err
		}
		id := max(ids.Add(1), last+1)
		t := time.Now().UTC()
		if _, err := tx.ExecContext(ctx, "INSERT INTO t_messages (id, conversation_id, sender_id, sender_device, client_msg_id, message_type, content, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
			id, conv, 1000000+w, "d", fmt.Sprintf("c%d-%d", w, n), 1, content, 1, t); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE t_conversations SET last_msg_id = ?, last_msg_at = ? WHERE id = ?", id, t, conv); err != nil {
			return err
		}
		return tx.Commit()
	}
	txRate, txErrs, txKinds := hammer(ctx, conc, p.CeilingDuration, sendTx)
	res.add("raw send transactions (MySQL)", txRate, "tx/s")
	e.Ceiling = txRate

	var batchErrs, deadlocks int64
	batchKinds := map[string]int{}
	for _, size := range CeilingBatches {
		var st batchStats
		batch := batchCommit(db, size, convs, content, &ids, &st)
		rate, nerr, kinds := hammer(ctx, commitWorkers, p.CeilingDuration, batch)
		if given := int64(kinds[errGivenUp.Error()]); given > 0 {
			nerr -= given
			delete(kinds, errGivenUp.Error())
		}
		res.headline(fmt.Sprintf("raw batched send transactions, batches of %d (MySQL)", size), rate*float64(size), "msg/s")
		res.add(fmt.Sprintf("raw batched send transactions, batches of %d: transactions", size), rate, "tx/s")
		res.add(fmt.Sprintf("raw batched send transactions, batches of %d: deadlocks retried", size), float64(st.retried.Load()), "")
		res.add(fmt.Sprintf("raw batched send transactions, batches of %d: batches given up after %d attempts", size, batchAttempts), float64(st.givenUp.Load()), "")
		if msgs := rate * float64(size); msgs > e.BatchCeiling {
			e.BatchCeiling, e.BatchCeilingSize = msgs, size
		}
		batchErrs += nerr
		deadlocks += st.retried.Load() + st.givenUp.Load()
		for k, v := range kinds {
			batchKinds[k] += v
		}
	}

	rdb := e.C.Redis()
	job := strings.Repeat("x", 180) // about a deliver job's protobuf
	xadd := func(ctx context.Context, w int, n int64) error {
		return rdb.XAdd(ctx, &redis.XAddArgs{Stream: fmt.Sprintf("imbench:ceil:%d", w%16), Values: []string{"job", job}}).Err()
	}
	xRate, xErrs, xKinds := hammer(ctx, conc, p.CeilingDuration, xadd)
	for i := 0; i < 16; i++ {
		_ = rdb.Del(ctx, fmt.Sprintf("imbench:ceil:%d", i)).Err()
	}
	res.add("raw XADD (Redis)", xRate, "ops/s")
	res.Passed = txErrs == 0 && xErrs == 0 && batchErrs == 0
	if !res.Passed {
		res.note("errors: %d send transactions %v, %d batched transactions %v, %d XADDs %v", txErrs, txKinds, batchErrs, batchKinds, xErrs, xKinds)
	}
	res.note("concurrency %d, %d conversations, %.0f s each, same MySQL and Redis as the system", conc, convs, p.CeilingDuration.Seconds())
	res.note("batched: %d connections (logic's commit workers), each committing one batch at a time as logic.message's committer does — one idempotency lookup for the batch's keys, then in one transaction the conversation rows locked in id order, one multi-row INSERT, one UPDATE of every conversation's last_msg_id; consecutive messages go to consecutive conversations (the batches of concurrent workers overlap, as concurrent sends do); the p2p report compares its acked rate with the better of the batch sizes", commitWorkers)
	if deadlocks > 0 {
		// Seen on MariaDB 10.11: EXPLAIN UPDATE shows type "index" once the
		// IN list is a large share of the rows.
		res.note("batched lock errors: MariaDB plans the multi-row UPDATE … WHERE id IN (…) as a full index scan when a batch's conversations are a large share of the table, and at REPEATABLE READ that scan locks other conversations' rows, so batches deadlock although they lock their own rows in id order; logic's batches run the same statement")
	}
	return res, nil
}

// hammer runs op from conc goroutines for d and returns successes/s and
// the error count and the errors by kind.
func hammer(ctx context.Context, conc int, d time.Duration, op func(ctx context.Context, w int, n int64) error) (float64, int64, map[string]int) {
	errKinds := map[string]int{}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var ok, bad atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := int64(0); ctx.Err() == nil; n++ {
				if err := op(ctx, w, n); err != nil {
					if ctx.Err() == nil {
						bad.Add(1)
						mu.Lock()
						errKinds[trimErr(err)]++
						mu.Unlock()
					}
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(ok.Load()) / time.Since(start).Seconds(), bad.Load(), errKinds
}

// batchStats counts what the batched ceiling retried and gave up.
type batchStats struct {
	retried, givenUp atomic.Int64
}

// batchAttempts and the back-off between attempts are logic's
// (maxCommitAttempts in logic/internal/message): a batch refused by a
// deadlock or a lock wait timeout runs again, and after the last attempt
// logic falls back to one transaction per send.
const batchAttempts = 5

// errGivenUp marks a batch that failed every attempt on lock errors; it
// is counted, not a failed check, since logic then commits the sends one
// by one.
var errGivenUp = errors.New("batch given up after lock errors")

// batchCommit returns an operation that commits size messages at once with
// the statements of logic's group commit (logic/internal/message's
// committer over store.InsertMessages), retried on lock errors as logic
// retries them. It sends them one round trip each, where logic sends them
// in two multi-statement round trips (decision 92), so it is a lower bound
// of what MySQL allows logic. Messages go to the
// conversations in turn (next is shared by the workers).
func batchCommit(db *sql.DB, size, convs int, content []byte, ids *atomic.Int64, st *batchStats) func(ctx context.Context, w int, n int64) error {
	var next atomic.Int64
	return func(ctx context.Context, w int, n int64) error {
		ms := make([]batchMsg, size)
		for i := range ms {
			conv := next.Add(1)%int64(convs) + 1
			ms[i] = batchMsg{conv: conv, sender: 1_000_000 + conv, client: fmt.Sprintf("b%d-%d-%d-%d", size, w, n, i)}
		}
		if err := lookupBatch(ctx, db, ms); err != nil {
			return err
		}
		for attempt := 0; ; attempt++ {
			err := insertBatch(ctx, db, ms, content, ids)
			var me *mysql.MySQLError
			if err == nil || !errors.As(err, &me) || me.Number != 1213 && me.Number != 1205 {
				return err
			}
			if attempt+1 == batchAttempts {
				st.givenUp.Add(1)
				return errGivenUp
			}
			st.retried.Add(1)
			select {
			case <-time.After(time.Duration(5*(attempt+1)) * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

type batchMsg struct {
	conv, sender int64
	client       string
}

// lookupBatch is the batch's idempotency lookup: every key in one
// statement, outside the transaction (the keys are new, so it finds none).
func lookupBatch(ctx context.Context, db *sql.DB, ms []batchMsg) error {
	size := len(ms)
	var b strings.Builder
	args := make([]any, 0, 3*size)
	b.WriteString("SELECT id FROM t_messages WHERE (sender_id, conversation_id, client_msg_id) IN (")
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?)")
		args = append(args, m.sender, m.conv, m.client)
	}
	b.WriteByte(')')
	rows, err := db.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return fmt.Errorf("idempotency lookup: %w", err)
	}
	found := 0
	for rows.Next() {
		found++
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("idempotency lookup: %w", err)
	}
	if found > 0 {
		return fmt.Errorf("idempotency lookup found %d of %d new keys", found, size)
	}
	return nil
}

// insertBatch is the batch's transaction: the conversation rows locked in
// ascending id order, ids chosen above each row's last_msg_id, one
// multi-row INSERT and one UPDATE … CASE of every conversation touched.
func insertBatch(ctx context.Context, db *sql.DB, ms []batchMsg, content []byte, ids *atomic.Int64) error {
	var b strings.Builder
	args := make([]any, 0, 9*len(ms))
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var lockIDs []int64
	seen := map[int64]bool{}
	for _, m := range ms {
		if !seen[m.conv] {
			seen[m.conv] = true
			lockIDs = append(lockIDs, m.conv)
		}
	}
	b.WriteString("SELECT id, last_msg_id FROM t_conversations FORCE INDEX (PRIMARY) WHERE id IN (")
	for i, c := range lockIDs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('?')
		args = append(args, c)
	}
	b.WriteString(") ORDER BY id FOR UPDATE")
	rows, err := tx.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	last := make(map[int64]int64, len(lockIDs))
	for rows.Next() {
		var id, l int64
		if err := rows.Scan(&id, &l); err != nil {
			_ = rows.Close()
			return fmt.Errorf("lock: %w", err)
		}
		last[id] = l
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	now := time.Now().UTC()
	b.Reset()
	args = args[:0]
	b.WriteString("INSERT INTO t_messages (id, conversation_id, sender_id, sender_device, client_msg_id, message_type, content, status, created_at) VALUES ")
	for i, m := range ms {
		id := max(ids.Add(1), last[m.conv]+1)
		last[m.conv] = id
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?,?,?)")
		args = append(args, id, m.conv, m.sender, "d", m.client, 1, content, 1, now)
	}
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	b.Reset()
	args = args[:0]
	var in strings.Builder
	b.WriteString("UPDATE t_conversations FORCE INDEX (PRIMARY) SET last_msg_id = CASE id")
	for i, c := range lockIDs {
		b.WriteString(" WHEN ? THEN ?")
		args = append(args, c, last[c])
		if i > 0 {
			in.WriteByte(',')
		}
		in.WriteByte('?')
	}
	b.WriteString(" END, last_msg_at = ? WHERE id IN (")
	args = append(args, now)
	b.WriteString(in.String())
	b.WriteByte(')')
	for _, c := range lockIDs {
		args = append(args, c)
	}
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("update: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
