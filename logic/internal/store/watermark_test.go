package store_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
)

// stressEnv names the variable that turns on the long run of
// TestWatermarkReadSkipsNothingUnderConcurrentSends: a Go duration such as
// "60s". The long run also requires the old single-statement read to skip,
// which proves the test can see the race it guards against.
const stressEnv = "SPARK_WATERMARK_STRESS"

// skipReader pages through one conversation the way a syncing device does
// and records every id it was given.
type skipReader struct {
	kind  string // "old query" or "watermark"
	name  string
	page  func(ctx context.Context, after int64) ([]int64, error)
	seen  map[int64]bool
	last  int64
	reads int
}

func (r *skipReader) poll(ctx context.Context) error {
	for {
		ids, err := r.page(ctx, r.last)
		if err != nil {
			return fmt.Errorf("%s reader: %w", r.name, err)
		}
		r.reads++
		for _, id := range ids {
			if id <= r.last {
				return fmt.Errorf("%s reader: id %d not above its cursor %d", r.name, id, r.last)
			}
			r.seen[id] = true
			r.last = id
		}
		if len(ids) < syncPage {
			return nil
		}
	}
}

const syncPage = 200

// TestWatermarkReadSkipsNothingUnderConcurrentSends runs the send
// transactions (single and group commit) from two pools, as two logic
// processes would, into one conversation, while readers page through it
// with the old single-statement "id > cursor" query and with the product's
// watermark read (ConversationPage). Afterwards every reader has paged to
// the end; an id it never saw was skipped for good. The watermark reader
// must never skip.
func TestWatermarkReadSkipsNothingUnderConcurrentSends(t *testing.T) {
	run := 3 * time.Second
	long := false
	if v := os.Getenv(stressEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", stressEnv, v, err)
		}
		run, long = d, true
	}
	dsn, db1 := testenv.MySQL(t)
	db2, err := store.Open(dsn, 16, 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db2.Close() })
	pools := []*store.Store{store.New(db1), store.New(db2)}

	ctx, cancel := context.WithTimeout(context.Background(), run+2*time.Minute)
	defer cancel()
	var nextID atomic.Int64
	nextID.Store(1 << 40)
	newID := func(context.Context) (int64, error) { return nextID.Add(1), nil }
	conv, err := pools[0].GetOrCreateP2P(ctx, testenv.RandomUserID(), testenv.RandomUserID(), newID)
	if err != nil {
		t.Fatal(err)
	}

	// Writers: 8 per pool; even ones commit one message a transaction, odd
	// ones batches of 1-4 (the group-commit statement).
	const writersPerPool = 8
	var (
		writes atomic.Int64
		stop   = make(chan struct{})
		wg     sync.WaitGroup
		werr   = make(chan error, 2*writersPerPool)
	)
	single := func(_ context.Context, last int64, _ time.Time) (int64, error) { return last + 1, nil }
	batch := func(_ context.Context, _ int, last int64, _ time.Time) (int64, error) { return last + 1, nil }
	for p, st := range pools {
		for w := 0; w < writersPerPool; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					m := store.NewMessage{ConversationID: conv, SenderID: 1, SenderDevice: "d", MessageType: 1, Content: []byte(`{"t":1,"text":"x"}`)}
					var err error
					if w%2 == 0 {
						m.ClientMsgID = fmt.Sprintf("p%d-w%d-%d", p, w, k)
						_, err = st.InsertMessage(ctx, m, single)
						if err == nil {
							writes.Add(1)
						}
					} else {
						msgs := make([]store.NewMessage, 1+k%4)
						for i := range msgs {
							msgs[i] = m
							msgs[i].ClientMsgID = fmt.Sprintf("p%d-w%d-%d-%d", p, w, k, i)
						}
						_, err = st.InsertMessages(ctx, msgs, batch)
						if err == nil {
							writes.Add(int64(len(msgs)))
						}
					}
					if err != nil && !store.IsRetryable(err) {
						werr <- fmt.Errorf("writer %d of pool %d: %w", w, p, err)
						return
					}
				}
			}()
		}
	}

	oldQuery := func(db *sqlx.DB) func(ctx context.Context, after int64) ([]int64, error) {
		return func(ctx context.Context, after int64) ([]int64, error) {
			var ids []int64
			err := db.SelectContext(ctx, &ids, "SELECT id FROM t_messages WHERE conversation_id = ? AND id > ? ORDER BY id ASC LIMIT ?", conv, after, syncPage)
			return ids, err
		}
	}
	watermark := func(st *store.Store) func(ctx context.Context, after int64) ([]int64, error) {
		return func(ctx context.Context, after int64) ([]int64, error) {
			_, msgs, err := st.ConversationPage(ctx, conv, after, syncPage)
			ids := make([]int64, len(msgs))
			for i, m := range msgs {
				ids[i] = m.ID
			}
			return ids, err
		}
	}
	readers := []*skipReader{
		{kind: "old query", name: "old query, pool 1", page: oldQuery(db1)},
		{kind: "old query", name: "old query, pool 2", page: oldQuery(db2)},
		{kind: "watermark", name: "watermark, pool 1", page: watermark(pools[0])},
		{kind: "watermark", name: "watermark, pool 2", page: watermark(pools[1])},
	}
	var rwg sync.WaitGroup
	rerr := make(chan error, len(readers))
	for _, r := range readers {
		r.seen = map[int64]bool{}
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := r.poll(ctx); err != nil {
					rerr <- err
					return
				}
			}
		}()
	}

	select {
	case <-time.After(run):
	case err := <-werr:
		t.Error(err)
	}
	close(stop)
	wg.Wait()
	rwg.Wait()
	close(werr)
	close(rerr)
	for err := range werr {
		t.Error(err)
	}
	for err := range rerr {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	var all []int64
	if err := db1.SelectContext(ctx, &all, "SELECT id FROM t_messages WHERE conversation_id = ? ORDER BY id", conv); err != nil {
		t.Fatal(err)
	}
	if int64(len(all)) != writes.Load() {
		t.Fatalf("%d rows stored, %d committed", len(all), writes.Load())
	}
	skips := map[string]int{}
	for _, r := range readers {
		if err := r.poll(ctx); err != nil { // page to the end, as the next sync would
			t.Fatal(err)
		}
		n := 0
		for _, id := range all {
			if !r.seen[id] {
				n++
			}
		}
		skips[r.kind] += n
		t.Logf("%s: %d reads, %d of %d messages never seen", r.name, r.reads, n, len(all))
	}
	t.Logf("%d messages committed in %v by %d writers on 2 pools; skipped: old query %d, watermark %d",
		len(all), run, 2*writersPerPool, skips["old query"], skips["watermark"])
	if skips["watermark"] != 0 {
		t.Errorf("the watermark read skipped %d committed messages", skips["watermark"])
	}
	if long && skips["old query"] == 0 {
		t.Errorf("the long run saw no skip by the old query: the test did not reproduce the race it guards against")
	}
}
