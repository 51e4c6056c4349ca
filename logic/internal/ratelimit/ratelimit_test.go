package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/testredis"
)

// nextAddr gives every test its own client address, so tests never share a
// bucket in the shared test DB.
var nextAddr atomic.Int32

func freshAddr() string { return fmt.Sprintf("10.9.%d.%d", nextAddr.Add(1)/250, nextAddr.Load()%250+1) }

// limited reports whether err is a 42901 and its retry-after.
func limited(t *testing.T, err error) (bool, time.Duration) {
	t.Helper()
	if err == nil {
		return false, 0
	}
	if c, _ := errcode.Of(err); c != errcode.RateLimited {
		t.Fatalf("error %v: want nil or 42901", err)
	}
	return true, errcode.RetryAfterOf(err)
}

func classConfig(c Class, l Limits) Config {
	cfg := baseConfig()
	cfg.Classes[c] = l
	return cfg
}

// testTimeout bounds a test limiter's Redis call. The production 200ms
// is shorter than the scheduling delays of a loaded 2-core CI machine:
// a late answer there made a check fail open (and pause the limiter for
// a second), so a bucket test saw requests pass that the bucket refused
// and AuthFailed not block. The fail-open test's Redis refuses the
// connection, which no timeout delays.
const testTimeout = 10 * time.Second

// baseConfig limits nothing, with the limiter's timings except a Redis
// timeout no scheduling delay reaches.
func baseConfig() Config {
	c := FromConfig(config.RateLimit{})
	c.Timeout = testTimeout
	return c
}

// mustNew is New for a test, which fails on an error.
func mustNew(t testing.TB, rdb Redis, cfg Config, log *zap.Logger, reg prometheus.Registerer) *Limiter {
	t.Helper()
	l, err := New(rdb, cfg, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// scaled runs attempt with the test's intervals multiplied by k = 1, 2,
// 4, … until an attempt is conclusive. On a loaded machine a test can be
// descheduled for longer than a bucket's interval, and then a bucket
// rightly lets through a request the test expected it to refuse: such an
// attempt proves nothing and is tried again with more room. An attempt
// fails the test itself when the limiter answers wrongly within the time
// the test measured, so a wrong limiter fails at every k.
func scaled(t *testing.T, attempt func(k int) (conclusive bool)) {
	t.Helper()
	const maxScale = 32
	for k := 1; k <= maxScale; k *= 2 {
		if attempt(k) {
			return
		}
		t.Logf("the machine was too slow for the intervals times %d; again with twice the room", k)
	}
	t.Fatalf("no attempt ran within its intervals, up to %d times them", maxScale)
}

// slowed is l with each bucket's rate divided by k: k times its interval.
func slowed(l Limits, k int) Limits {
	for _, b := range []*Bucket{&l.Device, &l.IP} {
		if b.on() {
			b.Rate /= float64(k)
		}
	}
	return l
}

// Each class's buckets refuse the request past the burst with 42901 and a
// retry-after no longer than one emission interval, and take it again once
// that time has passed.
func TestThresholdRetryAfterAndRecovery(t *testing.T) {
	rdb := testredis.Open(t)
	ctx := context.Background()
	tests := []struct {
		name      string
		class     Class
		limits    Limits
		burst     int
		interval  time.Duration
		wantScope string
		wantMsg   string
	}{
		{"send per device", Send, Limits{Device: Bucket{20, 3}}, 3, 50 * time.Millisecond, scopeDevice, "too many messages from this device"},
		{"send per address", Send, Limits{IP: Bucket{20, 4}}, 4, 50 * time.Millisecond, scopeIP, "too many messages from this address"},
		{"sync per device", Sync, Limits{Device: Bucket{10, 2}, IP: Bucket{1000, 100}}, 2, 100 * time.Millisecond, scopeDevice, "too many sync requests"},
		{"edit per address under a looser device bucket", Edit, Limits{Device: Bucket{1000, 100}, IP: Bucket{25, 5}}, 5, 40 * time.Millisecond, scopeIP, "from this address"},
		{"auth per device", Auth, Limits{Device: Bucket{20, 2}}, 2, 50 * time.Millisecond, scopeDevice, "too many logins from this device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Every wait the bucket decides is measured against the wall
			// time around the Redis calls (Redis's clock, read inside the
			// script, lies within it): a request that passes when the
			// bucket should refuse it is a failure only if less than the
			// interval that would have freed its token elapsed.
			scaled(t, func(k int) bool {
				interval := tt.interval * time.Duration(k)
				l := mustNew(t, rdb, classConfig(tt.class, slowed(tt.limits, k)), nil, nil)
				ip := freshAddr()
				allow := func() error {
					if tt.class == Auth {
						return l.AdmitDevice(ctx, ip, 7, "phone")
					}
					return l.Allow(ctx, tt.class, ip, 7, "phone")
				}
				start := time.Now()
				for i := 0; i < tt.burst; i++ {
					if err := allow(); err != nil {
						t.Fatalf("request %d of the burst: %v", i+1, err)
					}
				}
				refused := time.Now()
				err := allow()
				over, retry := limited(t, err)
				elapsed := time.Since(start)
				if !over {
					if elapsed < interval {
						t.Fatalf("request %d past a burst of %d allowed %v after the burst began (interval %v)", tt.burst+1, tt.burst, elapsed, interval)
					}
					return false
				}
				if _, msg := errcode.Of(err); !strings.Contains(msg, tt.wantMsg) {
					t.Fatalf("message %q, want it to contain %q", msg, tt.wantMsg)
				}
				// The bucket frees one token an interval after the burst
				// began: the hint is that interval less the time spent.
				if retry <= 0 || retry > interval+time.Millisecond || retry < interval-elapsed-time.Millisecond {
					t.Fatalf("retry-after %v, want within (%v - %v elapsed, %v]", retry, interval, elapsed, interval)
				}
				if got := testutil.ToFloat64(l.m.limited[tt.class][scopeIndex(tt.wantScope)]); got != 1 {
					t.Fatalf("limited{%s,%s} = %v, want 1", tt.class, tt.wantScope, got)
				}
				// Refusals take no token: asking again at once is still
				// refused with about the same wait, not a longer one. (The
				// hint is rounded up to a millisecond, so the token may be
				// back a millisecond before it.)
				over, again := limited(t, allow())
				if !over {
					if since := time.Since(refused); since < retry-time.Millisecond {
						t.Fatalf("second refusal: allowed %v after the first, which said %v", since, retry)
					}
					return false
				}
				if again > retry {
					t.Fatalf("second refusal: retry %v (first %v)", again, retry)
				}
				time.Sleep(retry)
				if err := allow(); err != nil {
					t.Fatalf("after waiting the retry-after %v: %v", retry, err)
				}
				// The next token comes an interval after the one just
				// taken, unless the machine stalled that long.
				if over, _ := limited(t, allow()); !over {
					if since := time.Since(refused); since < retry-time.Millisecond+interval {
						t.Fatalf("one token came back, but two requests passed within %v of the refusal (retry-after %v, interval %v)", since, retry, interval)
					}
					return false
				}
				return true
			})
		})
	}
}

// Two limiters (two logic processes, each with its own Redis client) draw
// from one bucket: together they get the burst, not twice it.
func TestTwoLimitersShareOneBucket(t *testing.T) {
	cfg := classConfig(Send, Limits{Device: Bucket{1, 6}, IP: Bucket{1, 10}})
	a := mustNew(t, testredis.Open(t), cfg, nil, nil)
	b := mustNew(t, testredis.Open(t), cfg, nil, nil)
	ctx := context.Background()
	ip := freshAddr()
	passed := 0
	for i := 0; i < 12; i++ {
		l := a
		if i%2 == 1 {
			l = b
		}
		if err := l.Allow(ctx, Send, ip, 1, "d"); err == nil {
			passed++
		}
	}
	if passed != 6 {
		t.Fatalf("%d of 12 requests through two limiters passed, want the one burst of 6", passed)
	}
	// The address's bucket is shared by the user's other devices and
	// other users on the address, across both processes: 6 taken, 4 left.
	passed = 0
	for i := 0; i < 8; i++ {
		l := a
		if i%2 == 1 {
			l = b
		}
		if err := l.Allow(ctx, Send, ip, int64(100+i), "d"); err == nil {
			passed++
		}
	}
	if passed != 4 {
		t.Fatalf("other devices on the address: %d passed, want the 4 left of its burst of 10", passed)
	}
	if err := a.Allow(ctx, Send, freshAddr(), 1, "d"); err != nil {
		t.Fatalf("the same device on another address: %v", err)
	}
}

// A request refused by one of its buckets takes no token from the other.
func TestRefusalTakesNothing(t *testing.T) {
	l := mustNew(t, testredis.Open(t), classConfig(Edit, Limits{Device: Bucket{0.5, 1}, IP: Bucket{0.5, 3}}), nil, nil)
	ctx := context.Background()
	ip := freshAddr()
	steps := []struct {
		device string
		want   bool // allowed
	}{
		{"a", true},  // device a: 1/1, address: 1/3
		{"a", false}, // device a empty: the address keeps its token
		{"a", false},
		{"b", true}, // address 2/3
		{"c", true}, // address 3/3
		{"d", false},
	}
	for i, s := range steps {
		over, _ := limited(t, l.Allow(ctx, Edit, ip, 9, s.device))
		if over == s.want {
			t.Fatalf("step %d device %s: allowed %v, want %v", i, s.device, !over, s.want)
		}
	}
}

// Failed AUTHs block their address at the threshold, for the block's
// time: AdmitAuth then refuses at once with the block's remaining time,
// while another address, and the same user's device on it, pass.
func TestAuthFailuresBlockTheAddress(t *testing.T) {
	rdb := testredis.Open(t)
	cfg := baseConfig()
	cfg.AuthFailures, cfg.AuthFailureWindow, cfg.AuthBlock = 3, time.Minute, 400*time.Millisecond
	cfg.Classes[Auth] = Limits{Device: Bucket{100, 100}, IP: Bucket{100, 100}}
	l := mustNew(t, rdb, cfg, nil, nil)
	ctx := context.Background()
	bad, good := freshAddr(), freshAddr()
	for i := 1; i <= 3; i++ {
		if err := l.AdmitAuth(ctx, bad); err != nil {
			t.Fatalf("attempt %d before the threshold: %v", i, err)
		}
		if blocked := l.AuthFailed(ctx, bad); blocked != (i == 3) {
			t.Fatalf("failure %d set the block: %v", i, blocked)
		}
	}
	err := l.AdmitAuth(ctx, bad)
	over, retry := limited(t, err)
	if !over || retry <= 0 || retry > 400*time.Millisecond {
		t.Fatalf("blocked address: %v (retry %v), want 42901 within the 400ms block", err, retry)
	}
	if _, msg := errcode.Of(err); !strings.Contains(msg, "failed logins") {
		t.Fatalf("message %q", msg)
	}
	if err := l.AdmitAuth(ctx, good); err != nil {
		t.Fatalf("another address: %v", err)
	}
	if err := l.AdmitDevice(ctx, good, 5, "phone"); err != nil {
		t.Fatalf("the user's device on another address: %v", err)
	}
	if got := testutil.ToFloat64(l.m.authBlocks); got != 1 {
		t.Fatalf("auth_blocks_total %v", got)
	}
	time.Sleep(retry + 20*time.Millisecond)
	if err := l.AdmitAuth(ctx, bad); err != nil {
		t.Fatalf("after the block: %v", err)
	}
	// The count started afresh with the block: one failure is not
	// another block.
	if l.AuthFailed(ctx, bad) {
		t.Fatal("the first failure after a block blocked again")
	}
}

// Failures outside the window do not add up.
func TestAuthFailureWindow(t *testing.T) {
	rdb := testredis.Open(t)
	ctx := context.Background()
	scaled(t, func(k int) bool {
		window := 150 * time.Millisecond * time.Duration(k)
		cfg := baseConfig()
		cfg.AuthFailures, cfg.AuthFailureWindow, cfg.AuthBlock = 2, window, time.Minute
		l := mustNew(t, rdb, cfg, nil, nil)
		ip := freshAddr()
		if l.AuthFailed(ctx, ip) {
			t.Fatal("first failure blocked")
		}
		time.Sleep(window + window/3)
		// The next failure opens a new window; the one after it is within
		// that window unless the machine stalled for the whole window.
		opened := time.Now()
		if l.AuthFailed(ctx, ip) {
			t.Fatal("a failure after the window blocked")
		}
		if !l.AuthFailed(ctx, ip) {
			if time.Since(opened) < window {
				t.Fatal("two failures within the window did not block")
			}
			return false
		}
		return true
	})
}

// Buckets expire once they are full again, so idle devices and addresses
// cost no Redis memory.
func TestBucketKeysExpire(t *testing.T) {
	rdb := testredis.Open(t)
	ctx := context.Background()
	// A key may already be gone when the test asks for its TTL if the
	// machine stalled longer than that TTL: only then is no TTL an answer.
	scaled(t, func(k int) bool {
		l := mustNew(t, rdb, classConfig(Sync, slowed(Limits{Device: Bucket{10, 5}, IP: Bucket{100, 50}}, k)), nil, nil)
		ip := freshAddr()
		start := time.Now()
		if err := l.Allow(ctx, Sync, ip, 3, "d"); err != nil {
			t.Fatal(err)
		}
		for key, max := range map[string]time.Duration{
			rediskey.RateDevice(ip, "sync", 3, "d"): 100 * time.Millisecond * time.Duration(k),
			rediskey.RateIP(ip, "sync"):             10 * time.Millisecond * time.Duration(k),
		} {
			ttl, err := rdb.PTTL(ctx, key).Result()
			// PTTL answers -2 for a key that is gone (-1: no TTL at all).
			if err == nil && ttl == -2 && time.Since(start) >= max {
				return false
			}
			if err != nil || ttl <= 0 || ttl > max+time.Millisecond {
				t.Fatalf("%s: TTL %v (%v), want (0, %v]", key, ttl, err, max)
			}
		}
		return true
	})
}

// The script runs by EVALSHA; after SCRIPT FLUSH (a Redis restart or
// failover) it is sent again and the limits keep working.
func TestScriptReloadedAfterFlush(t *testing.T) {
	rdb := testredis.Open(t)
	l := mustNew(t, rdb, classConfig(Send, Limits{Device: Bucket{1, 1}}), nil, nil)
	ctx := context.Background()
	ip := freshAddr()
	if err := l.Allow(ctx, Send, ip, 1, "d"); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if over, _ := limited(t, l.Allow(ctx, Send, ip, 1, "d")); !over {
		t.Fatal("after SCRIPT FLUSH the bucket no longer limits")
	}
	if got := testutil.ToFloat64(l.m.failOpen[Send]); got != 0 {
		t.Fatalf("fail_open %v: NOSCRIPT was treated as an outage", got)
	}
}

// An unreachable Redis lets every request through (fail open), counts
// it, and pauses: within the pause no call waits on Redis at all.
func TestFailOpenWhenRedisIsDown(t *testing.T) {
	ctx := context.Background()
	// Whether the limiter asked Redis is counted on the client, not read
	// off the wall clock, which a loaded machine stretches; and whatever
	// is expected within the pause is checked only if the pause had not
	// run out by the time the test looked, else tried with a longer one.
	scaled(t, func(k int) bool {
		rt := &roundTrips{}
		down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
		t.Cleanup(func() { _ = down.Close() })
		down.AddHook(rt)
		asked := func() int64 { return rt.commands.Load() + rt.pipelines.Load() }
		cfg := classConfig(Send, Limits{Device: Bucket{1, 1}, IP: Bucket{1, 1}})
		cfg.AuthFailures, cfg.AuthFailureWindow, cfg.AuthBlock = 1, time.Minute, time.Minute
		cfg.Classes[Auth] = Limits{IP: Bucket{1, 1}}
		cfg.Pause = 300 * time.Millisecond * time.Duration(k)
		cfg.Timeout = redisTimeout
		l := mustNew(t, down, cfg, nil, nil)
		start := time.Now()
		for i := 0; i < 3; i++ {
			if err := l.Allow(ctx, Send, "10.0.0.1", 1, "d"); err != nil {
				t.Fatalf("request %d with Redis down: %v", i, err)
			}
		}
		if got := testutil.ToFloat64(l.m.failOpen[Send]); got != 3 {
			t.Fatalf("fail_open{send} = %v, want 3", got)
		}
		paused := l.paused()
		if err := l.AdmitAuth(ctx, "10.0.0.1"); err != nil {
			t.Fatalf("AUTH with Redis down: %v", err)
		}
		if l.AuthFailed(ctx, "10.0.0.1") {
			t.Fatal("a failure blocked with Redis down")
		}
		if time.Since(start) >= cfg.Pause {
			return false
		}
		if !paused {
			t.Fatal("not paused after a failure")
		}
		if n := asked(); n != 1 {
			t.Fatalf("Redis asked %d times; the paused limiter should have asked only for the first request", n)
		}
		time.Sleep(cfg.Pause + 50*time.Millisecond)
		if l.paused() {
			t.Fatal("still paused after the pause")
		}
		return true
	})
}

// A parent context that ends is the request's end, not Redis's failure:
// the request passes and nothing pauses.
func TestCanceledRequestDoesNotPause(t *testing.T) {
	l := mustNew(t, testredis.Open(t), classConfig(Send, Limits{Device: Bucket{1, 1}}), nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Allow(ctx, Send, freshAddr(), 1, "d"); err != nil {
		t.Fatalf("canceled request: %v", err)
	}
	if l.paused() {
		t.Fatal("a canceled request paused the limiter")
	}
}

// logic.rate_limit maps onto the limiter's buckets; enabled: false limits
// nothing, and a nil limiter allows everything.
func TestFromConfig(t *testing.T) {
	c, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	cfg := FromConfig(c.Logic.RateLimit)
	if cfg.Classes[Send].Device != (Bucket{100, 400}) || cfg.Classes[Auth].IP != (Bucket{200, 10000}) || cfg.AuthFailures != 10 || cfg.AuthBlock != 5*time.Minute {
		t.Fatalf("defaults mapped to %+v", cfg)
	}
	c.Logic.RateLimit.Enabled = false
	if off := FromConfig(c.Logic.RateLimit); off != (Config{Timeout: redisTimeout, Pause: failOpenPause}) {
		t.Fatalf("disabled section mapped to %+v", off)
	}
	if _, err := New(nil, Config{}, nil, nil); err == nil {
		t.Fatal("a Config without timings accepted")
	}
	var nilLimiter *Limiter
	if err := errors.Join(nilLimiter.Allow(context.Background(), Send, "", 1, "d"), nilLimiter.AdmitAuth(context.Background(), "")); err != nil {
		t.Fatal(err)
	}
}
