package scenario

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Ceiling measures what the storage allows on this machine in this run:
// the send transaction's statements on the same MySQL (scratch database
// from the migrations, as many conversations and the same concurrency as
// p2p) and XADD of a deliver-job-sized entry on the same Redis.
type Ceiling struct{}

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
	res.Passed = txErrs == 0 && xErrs == 0
	if !res.Passed {
		res.note("errors: %d send transactions %v, %d XADDs %v", txErrs, txKinds, xErrs, xKinds)
	}
	res.note("concurrency %d, %d conversations, %.0f s each, same MySQL and Redis as the system", conc, convs, p.CeilingDuration.Seconds())
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
