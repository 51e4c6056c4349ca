// Package lease is the Redis side of a lease: a key whose value names its
// holder, taken with SET NX PX, renewed by compare-and-PEXPIRE and released
// by compare-and-DEL. Each operation is one script on one key, so it runs
// unchanged on a single Redis and on a Redis Cluster (the key's slot picks
// the master). What a lease guards, how often it is renewed and what a
// holder does when a renewal fails stay with its user: logic's machine-id
// lease and deliver's partition leases are built on these three calls.
package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// acquireScript is SET NX PX, except that a lease already naming the
// holder is extended and reported taken: a holder that restarts under the
// same name (deliver.id) resumes without waiting out its old lease. A
// holder with a fresh random name never finds its own value, so for it
// this is plain SET NX PX.
var acquireScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0`)

// renewScript extends the lease only while it still names the holder.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)

// releaseScript deletes the lease only while it still names the holder, so
// a late release never removes the lease of the one that took over.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// Acquire takes key for holder for ttl: true when the key is now the
// holder's (it was free, or already named holder and is extended), false
// when someone else holds it.
func Acquire(ctx context.Context, rdb redis.Scripter, key, holder string, ttl time.Duration) (bool, error) {
	n, err := acquireScript.Run(ctx, rdb, []string{key}, holder, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("lease: acquire %s: %w", key, err)
	}
	return n == 1, nil
}

// Renew extends key by ttl if it still names holder: false when it is gone
// (expired, flushed) or someone else's.
func Renew(ctx context.Context, rdb redis.Scripter, key, holder string, ttl time.Duration) (bool, error) {
	n, err := renewScript.Run(ctx, rdb, []string{key}, holder, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("lease: renew %s: %w", key, err)
	}
	return n == 1, nil
}

// Release deletes key if it still names holder: false when it was already
// gone or someone else's (then it is left alone).
func Release(ctx context.Context, rdb redis.Scripter, key, holder string) (bool, error) {
	n, err := releaseScript.Run(ctx, rdb, []string{key}, holder).Int()
	if err != nil {
		return false, fmt.Errorf("lease: release %s: %w", key, err)
	}
	return n == 1, nil
}
