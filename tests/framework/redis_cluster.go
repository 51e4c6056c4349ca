package framework

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/testredis"
)

// launchRedisCluster starts a private Redis Cluster of
// testredis.ClusterMasters masters without replicas on loopback ports:
// each a redis-server with --cluster-enabled and its nodes.conf in its
// own temp dir. It returns form, which joins them
// (testredis.CreateCluster) and waits until every node reports
// cluster_state:ok. Stop and Start keep the cluster (its nodes.conf and
// append-only files stay), so a test can take the whole Redis away and
// bring it back as with a single server. A master
// turns ok no sooner than 2 s after it started (Redis's writable delay,
// not configurable), so a caller with other set-up to do does it between
// the two and the delay passes meanwhile.
func launchRedisCluster(t testing.TB) (r *Redis, form func()) {
	t.Helper()
	bin := redisServer(t)
	r = &Redis{}
	for i := range testredis.ClusterMasters {
		port, bus := FreePort(t), FreePort(t)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		r.Addrs = append(r.Addrs, addr)
		args := append(testredis.ClusterNodeArgs(port, bus, t.TempDir()), persistence...)
		r.procs = append(r.procs, NewProcess(t, fmt.Sprintf("redis-%d", i+1), bin, args, nil))
	}
	r.Addr = r.Addrs[0]
	t.Cleanup(func() { _ = r.Kill() })
	for _, p := range r.procs {
		if _, err := p.Launch(); err != nil {
			t.Fatal(err)
		}
	}
	return r, func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i, p := range r.procs {
			if err := waitRedisPing(ctx, r.Addrs[i]); err != nil {
				t.Fatalf("%v\n%s", err, p.Tail(20))
			}
		}
		if err := testredis.CreateCluster(ctx, r.Addrs); err != nil {
			t.Fatal(err)
		}
	}
}

func waitClusterOK(ctx context.Context, addrs []string) error {
	return testredis.WaitClusterOK(ctx, addrs)
}
