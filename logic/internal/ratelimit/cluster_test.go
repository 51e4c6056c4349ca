package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/testredis"
)

// On a 3-master Redis Cluster the GCRA script checks a device's and an
// address's buckets in one call (their keys share the address's hash
// tag), the failure script counts and blocks, concurrent checks of many
// addresses share pipelines that span every master, and a script cache
// flushed on every master is loaded again without failing open.
func TestBucketsAndAuthBlockWorkOnRedisCluster(t *testing.T) {
	rdb := testredis.OpenCluster(t)
	cfg := baseConfig()
	cfg.Timeout, cfg.AuthFailures, cfg.AuthFailureWindow, cfg.AuthBlock = 5*time.Second, 2, time.Minute, time.Minute
	// A token a thousand seconds: nothing comes back within the test.
	cfg.Classes[Send] = Limits{Device: Bucket{0.001, 2}, IP: Bucket{0.001, 3}}
	cfg.Classes[Auth] = Limits{Device: Bucket{100, 100}, IP: Bucket{100, 100}}
	l := mustNew(t, rdb, cfg, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ips := make([]string, 24)
	keys := make([]string, len(ips))
	for i := range ips {
		ips[i] = fmt.Sprintf("10.77.0.%d", i+1)
		keys[i] = rediskey.RateIP(addr(ips[i]), Send.String())
	}
	if n, err := testredis.Masters(ctx, rdb, keys...); err != nil || n != testredis.ClusterMasters {
		t.Fatalf("the addresses' buckets are on %d masters (%v), want all %d", n, err, testredis.ClusterMasters)
	}
	isLimited := func(err error) bool {
		c, _ := errcode.Of(err)
		return err != nil && c == errcode.RateLimited
	}
	steps := []struct {
		name        string
		run         func(ip string) error
		wantLimited bool
	}{
		{"device's first token", func(ip string) error { return l.Allow(ctx, Send, ip, 1, "d1") }, false},
		{"device's second token", func(ip string) error { return l.Allow(ctx, Send, ip, 1, "d1") }, false},
		{"device past its burst of 2", func(ip string) error { return l.Allow(ctx, Send, ip, 1, "d1") }, true},
		{"another device takes the address's third token", func(ip string) error { return l.Allow(ctx, Send, ip, 2, "d2") }, false},
		{"a third device past the address's burst of 3", func(ip string) error { return l.Allow(ctx, Send, ip, 3, "d3") }, true},
		{"first failed AUTH does not block", func(ip string) error {
			if l.AuthFailed(ctx, ip) {
				return fmt.Errorf("blocked after one failure of 2")
			}
			return nil
		}, false},
		{"second failed AUTH blocks", func(ip string) error {
			if !l.AuthFailed(ctx, ip) {
				return fmt.Errorf("not blocked after 2 failures")
			}
			return nil
		}, false},
		{"a blocked address is refused AUTH", func(ip string) error { return l.AdmitAuth(ctx, ip) }, true},
	}
	for _, st := range steps {
		// All addresses at once, so the coalescer's pipelines carry
		// checks for every master.
		var wg sync.WaitGroup
		for _, ip := range ips {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := st.run(ip)
				if got := isLimited(err); got != st.wantLimited || (err != nil && !got) {
					t.Errorf("%s, address %s: %v, want rate limited %v", st.name, ip, err, st.wantLimited)
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() })
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range ips {
		if err := l.Allow(ctx, Send, ip, 1, "d1"); !isLimited(err) {
			t.Fatalf("address %s after SCRIPT FLUSH on every master: %v, want still limited", ip, err)
		}
		if err := l.Allow(ctx, Send, "10.78.0."+ip[len("10.77.0."):], 1, "d1"); err != nil {
			t.Fatalf("a fresh address after SCRIPT FLUSH: %v", err)
		}
	}
	if got := testutil.ToFloat64(l.m.failOpen[Send]); got != 0 {
		t.Fatalf("fail_open{send} = %v: a cluster error was treated as an outage", got)
	}
}
