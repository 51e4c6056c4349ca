// Package lease holds logic's MsgId machine-id lease on top of the Redis
// lease primitive (pkg/lease): a key taken with a random token, renewed
// in the background, released on stop. Logic issues ids only while the
// lease is certainly still its own (Check): a holder that cannot renew
// stops at a safety margin before the key could expire in Redis, so a
// process that takes the id over never overlaps it.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/failpoint"
	redislease "github.com/sparkim/spark/pkg/lease"
	"github.com/sparkim/spark/pkg/retry"
)

// ErrHeld is returned when another holder keeps the lease.
var ErrHeld = errors.New("lease: held by another process")

// ErrNotHeld is returned by Check when the lease may have expired (it
// could not be renewed within TTL minus the margin) or was taken over.
var ErrNotHeld = errors.New("lease: not certainly held")

// Options configure Acquire.
type Options struct {
	// TTL is the key's lifetime in Redis; it is renewed every TTL/5.
	TTL time.Duration
	// Wait is how long Acquire keeps trying while another holder has the
	// key (a just-crashed predecessor's lease expires within one TTL).
	Wait time.Duration
	// Margin is how long before the key could expire Check starts failing
	// when renewals do not get through: it covers the clock-rate
	// difference between this host and Redis and the issuance already
	// past its Check. Default TTL/3, so three renewals in a row may fail
	// before ids stop.
	Margin time.Duration
	// OnLost is called once, from the renewal goroutine, when another
	// holder has taken the key; the lease is then gone for good.
	OnLost func(error)
	// OnRetake runs when a renewal found the key expired (Redis was
	// unreachable past the TTL, or lost its data) and took it again,
	// before Check succeeds again: someone may have held the key in
	// between. An error keeps Check failing and is retried at the next
	// renewal.
	OnRetake func(ctx context.Context) error
}

// Lease is a held lease.
type Lease struct {
	rdb   redis.UniversalClient
	key   string
	token string
	opts  Options

	// base anchors deadline on the monotonic clock.
	base time.Time
	// deadline is when Check starts failing, as time since base: the
	// send time of the last renewal Redis confirmed, plus TTL - Margin.
	deadline atomic.Int64
	lost     atomic.Bool

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Acquire takes key. When someone else holds it, Acquire keeps trying for
// up to opts.Wait and then fails with ErrHeld.
func Acquire(ctx context.Context, rdb redis.UniversalClient, key string, opts Options) (*Lease, error) {
	l, err := newLease(rdb, key, opts)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(opts.Wait)
	for {
		ok, err := l.take(ctx)
		if err != nil {
			return nil, err
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %s", ErrHeld, key)
		}
		if err := retry.Sleep(ctx, 250*time.Millisecond); err != nil {
			return nil, fmt.Errorf("lease: waiting for %s: %w", key, err)
		}
	}
	go l.renew()
	return l, nil
}

// AcquireFree takes the first free one of the keys keyOf(0) …
// keyOf(n-1), trying each once from start on (wrapping), and returns it
// with its index; ErrHeld when all are held. Processes that start at
// different offsets seldom try the same key first.
func AcquireFree(ctx context.Context, rdb redis.UniversalClient, keyOf func(int) string, n, start int, opts Options) (*Lease, int, error) {
	if n <= 0 {
		return nil, 0, fmt.Errorf("lease: %d keys to choose from", n)
	}
	for k := range n {
		i := ((start+k)%n + n) % n
		l, err := newLease(rdb, keyOf(i), opts)
		if err != nil {
			return nil, 0, err
		}
		ok, err := l.take(ctx)
		if err != nil {
			return nil, 0, err
		}
		if ok {
			go l.renew()
			return l, i, nil
		}
	}
	return nil, 0, fmt.Errorf("%w: all %d keys from %s to %s", ErrHeld, n, keyOf(0), keyOf(n-1))
}

func newLease(rdb redis.UniversalClient, key string, opts Options) (*Lease, error) {
	if opts.TTL <= 0 {
		return nil, fmt.Errorf("lease: TTL %v must be positive", opts.TTL)
	}
	if opts.Margin <= 0 {
		opts.Margin = opts.TTL / 3
	}
	if opts.Margin >= opts.TTL {
		return nil, fmt.Errorf("lease: margin %v must be below the TTL %v", opts.Margin, opts.TTL)
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("lease: token: %w", err)
	}
	return &Lease{rdb: rdb, key: key, token: hex.EncodeToString(b[:]), opts: opts, base: time.Now(),
		stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// take tries to acquire the key once; true when it is now ours.
func (l *Lease) take(ctx context.Context) (bool, error) {
	sent := l.since()
	ok, err := redislease.Acquire(ctx, l.rdb, l.key, l.token, l.opts.TTL)
	if err != nil {
		return false, err
	}
	if ok {
		l.confirmed(sent)
	}
	return ok, nil
}

// Key returns the leased key.
func (l *Lease) Key() string { return l.key }

// Check returns nil while the lease is certainly this holder's: renewed
// within TTL - Margin and never taken over. Otherwise it returns an error
// wrapping ErrNotHeld.
func (l *Lease) Check() error {
	if l.lost.Load() {
		return fmt.Errorf("%w: %s was taken over", ErrNotHeld, l.key)
	}
	if over := l.since() - time.Duration(l.deadline.Load()); over >= 0 {
		return fmt.Errorf("%w: %s not renewed for %v", ErrNotHeld, l.key, l.opts.TTL-l.opts.Margin+over)
	}
	return nil
}

func (l *Lease) since() time.Duration { return time.Since(l.base) }

// confirmed records a renewal Redis confirmed, sent at sent: the key
// lives at least TTL from then.
func (l *Lease) confirmed(sent time.Duration) {
	l.deadline.Store(int64(sent + l.opts.TTL - l.opts.Margin))
}

func (l *Lease) renew() {
	defer close(l.done)
	every := l.opts.TTL / 5
	t := time.NewTicker(every)
	defer t.Stop()
	retaken := false // the key expired and was taken again; OnRetake not yet done
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		sent := l.since()
		ours, err := l.renewOnce(ctx)
		if err == nil && !ours {
			// Expired (Redis was unreachable for a TTL, or flushed): take
			// it again unless someone else has.
			var ok bool
			ok, err = redislease.Acquire(ctx, l.rdb, l.key, l.token, l.opts.TTL)
			if err == nil && !ok {
				cancel()
				l.lost.Store(true)
				if l.opts.OnLost != nil {
					l.opts.OnLost(fmt.Errorf("%w: %s was taken over", ErrHeld, l.key))
				}
				return
			}
			retaken = retaken || err == nil
		}
		if err == nil && retaken && l.opts.OnRetake != nil {
			err = l.opts.OnRetake(ctx)
		}
		if err == nil {
			retaken = false
			l.confirmed(sent)
		}
		cancel()
		// Other errors (Redis down) are retried at the next tick; Check
		// fails once the deadline passes.
	}
}

// renewOnce extends the key if it is still ours: false when it is gone or
// someone else's.
func (l *Lease) renewOnce(ctx context.Context) (bool, error) {
	// An armed "error" is a renewal that does not get through, as when
	// Redis is unreachable from this process only.
	if err := failpoint.Inject("logic/lease/renew"); err != nil {
		return false, err
	}
	return redislease.Renew(ctx, l.rdb, l.key, l.token, l.opts.TTL)
}

// Release stops renewing and deletes the key if still ours.
func (l *Lease) Release(ctx context.Context) error {
	l.once.Do(func() { close(l.stop) })
	<-l.done
	// Nothing may be issued under a lease being given up.
	l.lost.Store(true)
	_, err := redislease.Release(ctx, l.rdb, l.key, l.token)
	return err
}
