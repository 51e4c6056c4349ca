package route

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/testredis"
)

// On a 3-master Redis Cluster the route scripts (AUTH's swap, close's
// and deliver's compare-and-delete) work on route hashes on every master.
func TestRouteScriptsOnEveryClusterMaster(t *testing.T) {
	rdb := testredis.OpenCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	swap, cad := redis.NewScript(SwapScript), redis.NewScript(CompareAndDeleteScript)
	users := make([]int64, 12)
	keys := make([]string, len(users))
	for i := range users {
		users[i] = 930001 + int64(i)
		keys[i] = rediskey.Route(users[i])
	}
	if n, err := testredis.Masters(ctx, rdb, keys...); err != nil || n != testredis.ClusterMasters {
		t.Fatalf("the route hashes are on %d masters (%v), want all %d", n, err, testredis.ClusterMasters)
	}
	first := Entry{GateID: "g1", ConnID: 1, SinceMs: 1}.String()
	second := Entry{GateID: "g2", ConnID: 2, SinceMs: 2}.String()
	for _, k := range keys {
		steps := []struct {
			name string
			run  func() (any, error)
			want any
		}{
			{"first AUTH swaps in and finds nothing", func() (any, error) {
				v, err := swap.Run(ctx, rdb, []string{k}, "phone", first).Result()
				if errors.Is(err, redis.Nil) {
					return nil, nil
				}
				return v, err
			}, nil},
			{"second AUTH swaps in and finds the first to kick", func() (any, error) {
				return swap.Run(ctx, rdb, []string{k}, "phone", second).Result()
			}, first},
			{"the first connection's late close deletes nothing", func() (any, error) {
				return cad.Run(ctx, rdb, []string{k}, "phone", first).Result()
			}, int64(0)},
			{"the second connection's close deletes its route", func() (any, error) {
				return cad.Run(ctx, rdb, []string{k}, "phone", second).Result()
			}, int64(1)},
			{"no route is left", func() (any, error) { return rdb.HLen(ctx, k).Result() }, int64(0)},
		}
		for _, st := range steps {
			if got, err := st.run(); err != nil || got != st.want {
				t.Fatalf("%s, %s: %v (%v), want %v", k, st.name, got, err, st.want)
			}
		}
	}
}
