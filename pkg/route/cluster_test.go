package route

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/testredis"
)

// On a 3-master Redis Cluster the route scripts (AUTH's swap, close's
// and deliver's compare-and-delete) work on route hashes on every master,
// and count the user's routes for presence.
func TestRouteScriptsOnEveryClusterMaster(t *testing.T) {
	rdb := testredis.OpenCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	swap, cad, closeScript := redis.NewScript(SwapScript), redis.NewScript(CompareAndDeleteScript), redis.NewScript(CloseScript)
	users := make([]int64, 12)
	keys := make([]string, len(users))
	for i := range users {
		users[i] = 930001 + int64(i)
		keys[i] = rediskey.Route(users[i])
	}
	if n, err := testredis.Masters(ctx, rdb, keys...); err != nil || n != testredis.ClusterMasters {
		t.Fatalf("the route hashes are on %d masters (%v), want all %d", n, err, testredis.ClusterMasters)
	}
	// first is an entry written before the real IP was recorded (a rolling
	// upgrade); the others carry it, and closes name them by Key().
	first := Entry{GateID: "g1", ConnID: 1, SinceMs: 1}.String()
	secondE := Entry{GateID: "g2", ConnID: 2, SinceMs: 2, RealIP: "203.0.113.7"}
	second := secondE.String()
	thirdE := Entry{GateID: "g1", ConnID: 3, SinceMs: 3, RealIP: "2001:db8::1"}
	third := thirdE.String()
	// lookalike shares second's key as a string prefix but names another
	// connection (since 2 vs 20).
	lookalike := Entry{GateID: "g2", ConnID: 2, SinceMs: 20}.Key()
	for _, k := range keys {
		run := func(sc *redis.Script, args ...any) func() (string, error) {
			return func() (string, error) {
				v, err := sc.Run(ctx, rdb, []string{k}, args...).Result()
				return fmt.Sprint(v), err
			}
		}
		steps := []struct {
			name string
			run  func() (string, error)
			want string
		}{
			{"first AUTH swaps in, finds nothing, one device", run(swap, "phone", first), "[ 1]"},
			{"second AUTH swaps in and finds the first to kick", run(swap, "phone", second), "[" + first + " 1]"},
			{"another device comes in: two", run(swap, "pad", third), "[ 2]"},
			{"the first connection's late close deletes nothing", run(cad, "phone", first), "0"},
			{"the first connection's late own close deletes nothing", run(closeScript, "phone", first), "-1"},
			{"a close of a connection whose key is a prefix of the route's deletes nothing", run(closeScript, "phone", lookalike), "-1"},
			{"the second connection's close by key leaves the pad", run(closeScript, "phone", secondE.Key()), "1"},
			{"the pad's route removed by deliver by key", run(cad, "pad", thirdE.Key()), "1"},
			{"no route is left", func() (string, error) { n, err := rdb.HLen(ctx, k).Result(); return fmt.Sprint(n), err }, "0"},
		}
		for _, st := range steps {
			if got, err := st.run(); err != nil || got != st.want {
				t.Fatalf("%s, %s: %v (%v), want %v", k, st.name, got, err, st.want)
			}
		}
	}
}
