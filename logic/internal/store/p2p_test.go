package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/msgid"
)

func TestGetOrCreateP2PRace(t *testing.T) {
	_, db := testenv.MySQL(t)
	st := store.New(db)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var gens []*msgid.Generator
	for _, m := range []int{11, 12} { // two logic processes
		g, err := msgid.New(ctx, msgid.Settings{MachineID: m})
		if err != nil {
			t.Fatal(err)
		}
		gens = append(gens, g)
	}
	const pairs = 50
	type result struct {
		pair int
		conv int64
		err  error
	}
	tests := []struct {
		name    string
		callers int // goroutines per pair, alternating direction
	}{
		{"two users message each other at once", 2},
		{"four racing callers per pair", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			users := make([][2]int64, pairs)
			for i := range users {
				users[i] = [2]int64{testenv.RandomUserID(), testenv.RandomUserID()}
			}
			results := make(chan result, pairs*tt.callers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, u := range users {
				for c := 0; c < tt.callers; c++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						a, b := u[0], u[1]
						if c%2 == 1 {
							a, b = b, a
						}
						<-start
						id, err := st.GetOrCreateP2P(ctx, a, b, gens[c%2].Next)
						results <- result{i, id, err}
					}()
				}
			}
			close(start)
			wg.Wait()
			close(results)
			convOf := map[int]int64{}
			for r := range results {
				if r.err != nil {
					t.Fatalf("pair %d: %v", r.pair, r.err)
				}
				if prev, ok := convOf[r.pair]; ok && prev != r.conv {
					t.Fatalf("pair %d got two conversations %d and %d", r.pair, prev, r.conv)
				}
				convOf[r.pair] = r.conv
			}
			for i, u := range users {
				small, big := store.Pair(u[0], u[1])
				var n int
				if err := db.GetContext(ctx, &n, "SELECT COUNT(*) FROM t_p2p_conversations WHERE user_small = ? AND user_big = ?", small, big); err != nil || n != 1 {
					t.Fatalf("pair %d: %d pair rows (%v)", i, n, err)
				}
				if err := db.GetContext(ctx, &n, "SELECT COUNT(*) FROM t_conversations WHERE id = ? AND type = 1 AND last_msg_id = 0", convOf[i]); err != nil || n != 1 {
					t.Fatalf("pair %d: %d conversation rows (%v)", i, n, err)
				}
				var members []int64
				if err := db.SelectContext(ctx, &members, "SELECT user_id FROM t_conversation_members WHERE conversation_id = ? ORDER BY user_id", convOf[i]); err != nil {
					t.Fatal(err)
				}
				if len(members) != 2 || members[0] != small || members[1] != big {
					t.Fatalf("pair %d: members %v, want [%d %d]", i, members, small, big)
				}
			}
			// No orphan conversations from losing racers.
			var orphans int
			if err := db.GetContext(ctx, &orphans, "SELECT COUNT(*) FROM t_conversations c LEFT JOIN t_p2p_conversations p ON p.conversation_id = c.id WHERE p.id IS NULL"); err != nil || orphans != 0 {
				t.Fatalf("%d orphan conversations (%v)", orphans, err)
			}
		})
	}
}

func TestHighWater(t *testing.T) {
	_, db := testenv.MySQL(t)
	hw := store.NewHighWater(db)
	ctx := context.Background()
	steps := []struct {
		store int64
		want  int64
	}{{0, 0}, {1000, 1000}, {500, 1000}, {2000, 2000}}
	for _, s := range steps {
		if s.store > 0 {
			if err := hw.StoreHighWater(ctx, 7, s.store); err != nil {
				t.Fatal(err)
			}
		}
		got, err := hw.LoadHighWater(ctx, 7)
		if err != nil || got != s.want {
			t.Fatalf("after storing %d: got %d (%v), want %d", s.store, got, err, s.want)
		}
	}
}
