// Package testredis is the one table of the Redis DB indexes unit-test
// packages use, and the helper that opens them.
//
// Rule: every test package that touches the shared test Redis
// (SPARK_TEST_REDIS_ADDR, default 127.0.0.1:6379) uses the DB index listed
// for it below and no other, and no two packages share an index. `go test`
// runs packages in parallel, and several of them FLUSHDB their DB at the
// start of a test: a shared index lets one package wipe another's keys
// mid-test. DB 0 belongs to `make run` and is never used by tests.
// End-to-end tests (tests/e2e) and the bench start a private redis-server
// per cluster and appear here only for completeness.
//
// A package that needs Redis in its tests takes the next free index here;
// past 15 (Redis's default of 16 DBs), switch the packages to a private
// redis-server each, as tests/framework.StartRedis does.
//
// | DB | package                     | flushes |
// | -- | --------------------------- | ------- |
// |  0 | (make run, never tests)     |         |
// |  1 | pkg/dialog                  | yes     |
// |  2 | logic/internal/inbox        | yes     |
// |  3 | logic/internal/lease        | yes     |
// |  4 | logic/internal/server       | yes     |
// |  5 | logic/internal/gateway      | yes     |
// |  6 | logic/internal/message      | yes     |
// |  7 | deliver/internal/consumer   | yes     |
// |  8 | deliver/internal/fanout     | yes     |
// |  9 | deliver/internal/service    | yes     |
// | 10 | logic/internal/api          | yes     |
// | 11 | logic/internal/notify       | yes     |
// | 12 | logic/internal/ratelimit    | yes     |
// | 13 | pkg/redisconn               | yes     |
// | 14 | deliver/internal/lease      | yes     |
// | –  | deliver/internal/service outage_test, tests/e2e, bench: private redis-server |
//
// Cluster-mode checks start a private 3-master Redis Cluster per test
// (StartCluster, OpenCluster in cluster.go) instead of a DB index: a
// cluster has only DB 0.
package testredis

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The DB index of each test package; see the table above.
const (
	DialogDB   = 1
	InboxDB    = 2
	LeaseDB    = 3
	ServerDB   = 4
	GatewayDB  = 5
	MessageDB  = 6
	ConsumerDB = 7
	FanoutDB   = 8
	ServiceDB  = 9
	APIDB      = 10
	NotifyDB   = 11
	// RateLimitDB is logic/internal/ratelimit's.
	RateLimitDB = 12
	// RedisConnDB is pkg/redisconn's.
	RedisConnDB = 13
	// DeliverLeaseDB is deliver/internal/lease's: its keys have fixed
	// names, so it needs a DB of its own.
	DeliverLeaseDB = 14
)

// AddrEnv names the environment variable that overrides DefaultAddr.
const AddrEnv = "SPARK_TEST_REDIS_ADDR"

// DefaultAddr is the test Redis when AddrEnv is unset.
const DefaultAddr = "127.0.0.1:6379"

// Addr returns the test Redis address.
func Addr() string {
	if v := os.Getenv(AddrEnv); v != "" {
		return v
	}
	return DefaultAddr
}

// flushed records the DBs this test binary (one package) already flushed.
var flushed sync.Map

// Open returns a client on DB index db of the test Redis, closed when the
// test ends. The first Open of a DB in a test binary flushes it, so keys of
// an earlier run never leak in; later Opens do not, so a test holding two
// clients never loses its own keys. An unreachable Redis fails the test: a
// test that skips when its service is missing passes in CI without
// checking anything (make services starts one).
func Open(t testing.TB, db int) *redis.Client {
	t.Helper()
	if db <= 0 || db > 15 {
		t.Fatalf("testredis: DB %d is not a test DB (1..15, from the table in pkg/testredis)", db)
	}
	addr := Addr()
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		t.Fatalf("test Redis unreachable at %s (set %s, or run `make services`): %v", addr, AddrEnv, err)
	}
	if _, done := flushed.LoadOrStore(db, true); !done {
		if err := rdb.FlushDB(ctx).Err(); err != nil {
			_ = rdb.Close()
			t.Fatalf("flush test Redis DB %d at %s: %v", db, addr, err)
		}
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
