// Package lease holds a Redis lease: a key set with NX and a TTL to a
// random token, renewed by compare-and-expire, released by
// compare-and-delete. Logic guards its MsgId machine id with one.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrHeld is returned when another holder keeps the lease.
var ErrHeld = errors.New("lease: held by another process")

var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)

var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// Lease is a held lease.
type Lease struct {
	rdb   redis.UniversalClient
	key   string
	token string
	ttl   time.Duration

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Acquire takes key for ttl. When someone else holds it, Acquire keeps
// trying for up to wait (a just-crashed predecessor's lease expires within
// one TTL) and then fails with ErrHeld. onLost is called (once, from the
// renewal goroutine) if the lease is found taken by another holder later.
func Acquire(ctx context.Context, rdb redis.UniversalClient, key string, ttl, wait time.Duration, onLost func(error)) (*Lease, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	l := &Lease{rdb: rdb, key: key, token: hex.EncodeToString(b[:]), ttl: ttl, stop: make(chan struct{}), done: make(chan struct{})}
	deadline := time.Now().Add(wait)
	for {
		ok, err := rdb.SetNX(ctx, key, l.token, ttl).Result()
		if err != nil {
			return nil, fmt.Errorf("lease: SET NX %s: %w", key, err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %s", ErrHeld, key)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	go l.renew(onLost)
	return l, nil
}

// Key returns the leased key.
func (l *Lease) Key() string { return l.key }

func (l *Lease) renew(onLost func(error)) {
	defer close(l.done)
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.ttl/3)
		n, err := renewScript.Run(ctx, l.rdb, []string{l.key}, l.token, l.ttl.Milliseconds()).Int()
		if err == nil && n == 0 {
			// Expired (Redis was unreachable for a TTL, or flushed): take it
			// again unless someone else has.
			var ok bool
			ok, err = l.rdb.SetNX(ctx, l.key, l.token, l.ttl).Result()
			if err == nil && !ok {
				cancel()
				if onLost != nil {
					onLost(fmt.Errorf("%w: %s was taken over", ErrHeld, l.key))
				}
				return
			}
		}
		cancel()
		// Other errors (Redis down) are retried at the next tick.
	}
}

// Release stops renewing and deletes the key if still ours.
func (l *Lease) Release(ctx context.Context) error {
	l.once.Do(func() { close(l.stop) })
	<-l.done
	return releaseScript.Run(ctx, l.rdb, []string{l.key}, l.token).Err()
}
