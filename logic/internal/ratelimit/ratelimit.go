// Package ratelimit is the client front door's request limits (the
// gateway handler applies them before a request reaches a domain service:
// limits belong to a front door, not to the core, so the business API
// works without them). Every limit lives in Redis, so all logic processes
// share one bucket: each command class has a token bucket per device
// (user and device id) and one per client address, checked together in
// one atomic script call, and failed AUTHs block their address for a while
// (docs/decisions.md 67).
//
// A bucket is GCRA (the generic cell rate algorithm, equivalent to a token
// bucket): one key holding the bucket's theoretical arrival time in
// microseconds of Redis's own clock, so logic processes with skewed clocks
// still share one bucket exactly. A request that would overflow any of its
// buckets changes none of them. When Redis cannot answer, the limiter fails
// open: requests pass, a metric counts them and a rate-limited log line
// says so, because the limits protect the service and must never be what
// stops it.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/ipkey"
	"github.com/sparkim/spark/pkg/rediskey"
)

// Class is a class of client commands with its own buckets.
type Class uint8

// The classes.
const (
	// Auth is AUTH.
	Auth Class = iota
	// Send is SEND_MESSAGE and GENERATE_MSG_ID (a flood of ids would
	// exhaust the MsgId sequence every sender shares).
	Send
	// Sync is SYNC_INBOX and SYNC_MESSAGES.
	Sync
	// Edit is READ_MESSAGE, RECALL_MESSAGE, DELETE_MESSAGE,
	// CONVERSATION_SETTINGS, RELATION and GROUP: the other commands that
	// reach MySQL.
	Edit
	// Signal is SIGNAL: transient, but fanned out to online members.
	Signal
	// NumClasses is the number of classes.
	NumClasses
)

var classNames = [NumClasses]string{"auth", "send", "sync", "edit", "signal"}

// what names a class's requests in 42901 messages.
var what = [NumClasses]string{"logins", "messages", "sync requests", "requests", "signals"}

// String returns the class's name as in logic.rate_limit and the keys.
func (c Class) String() string {
	if c < NumClasses {
		return classNames[c]
	}
	return "class" + strconv.Itoa(int(c))
}

// Bucket is a token bucket: Rate requests a second, bursts of up to Burst.
// A Rate ≤ 0 or a Burst < 1 turns it off.
type Bucket struct {
	Rate  float64
	Burst int
}

func (b Bucket) on() bool { return b.Rate > 0 && b.Burst >= 1 }

// interval is the bucket's emission interval in microseconds, as the
// script reads it.
func (b Bucket) interval() string { return strconv.FormatFloat(1e6/b.Rate, 'f', -1, 64) }

// Limits are the buckets of one class.
type Limits struct {
	Device, IP Bucket
}

// Config is what the limiter enforces.
type Config struct {
	Classes [NumClasses]Limits
	// AuthFailures failed AUTHs from one address within AuthFailureWindow
	// block AUTH from it for AuthBlock; 0 turns that off.
	AuthFailures      int
	AuthFailureWindow time.Duration
	AuthBlock         time.Duration
	// Timeout bounds one Redis call: past it the request passes, so a
	// slow Redis never becomes a slow front door.
	Timeout time.Duration
	// Pause is how long the limiter fails open without asking Redis after
	// a failed call, so an unreachable Redis costs one timeout per pause
	// instead of one per request.
	Pause time.Duration
}

// The limiter's own timings, which are not configuration keys.
const (
	// redisTimeout is far above a healthy check's round trip and far
	// below what a client would notice.
	redisTimeout = 200 * time.Millisecond
	// failOpenPause keeps an unreachable Redis from costing every
	// request a timeout.
	failOpenPause = time.Second
)

// FromConfig converts logic.rate_limit, with the limiter's timings; a
// disabled section limits nothing.
func FromConfig(r config.RateLimit) Config {
	c := Config{Timeout: redisTimeout, Pause: failOpenPause}
	if !r.Enabled {
		return c
	}
	for cl, rc := range map[Class]config.RateClass{Auth: r.Auth, Send: r.Send, Sync: r.Sync, Edit: r.Edit, Signal: r.Signal} {
		c.Classes[cl] = Limits{Device: Bucket{rc.DeviceRate, rc.DeviceBurst}, IP: Bucket{rc.IPRate, rc.IPBurst}}
	}
	c.AuthFailures, c.AuthFailureWindow, c.AuthBlock = r.AuthFailures, r.AuthFailureWindow, r.AuthBlock
	return c
}

// checkScript checks a request against its buckets and takes one token
// from each only if every one has one.
//
// KEYS: optionally an AUTH block key first (ARGV[1] == "1"), then the
// buckets. ARGV[2..]: per bucket its emission interval (µs) and burst.
// Returns {allowed, retry_after_ms, index of the deciding key}: a block
// answers its remaining TTL; an overflowing bucket the time until it
// would take the request (the longest when several overflow).
var checkScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local first = 1
if ARGV[1] == '1' then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then return {0, ttl, 1} end
  first = 2
end
local wait, worst = 0, 0
local tats = {}
for i = first, #KEYS do
  local j = 2 + (i - first) * 2
  local interval = tonumber(ARGV[j])
  local burst = tonumber(ARGV[j + 1])
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
  if tat < now then tat = now end
  local new = tat + interval
  local allow_at = new - interval * burst
  if allow_at > now and allow_at - now > wait then
    wait, worst = allow_at - now, i
  end
  tats[i] = new
end
if worst > 0 then return {0, math.ceil(wait / 1000), worst} end
for i = first, #KEYS do
  redis.call('SET', KEYS[i], string.format('%.17g', tats[i]), 'PX', math.ceil((tats[i] - now) / 1000))
end
return {1, 0, 0}
`)

// failScript counts a failed AUTH of an address. KEYS: the failure
// counter, the block key. ARGV: threshold, window (ms), block (ms). The
// window starts at the first failure; reaching the threshold sets the
// block and starts counting afresh. Returns 1 when it set the block.
var failScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if n >= tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

// Scopes of a refusal, as metric labels.
const (
	scopeDevice  = "device"
	scopeIP      = "ip"
	scopeBlocked = "blocked"
)

// logEvery bounds the fail-open log line to one per interval.
const logEvery = 10 * time.Second

// Limiter checks requests against the buckets in Redis. It is safe for
// concurrent use; a nil *Limiter allows everything.
type Limiter struct {
	rdb    Redis
	checks *coalescer
	cfg    Config
	log    *zap.Logger
	m      *limiterMetrics
	now    func() time.Time
	// intervals are the buckets' script arguments, formatted once.
	intervals [NumClasses][2]string

	// pausedUntil (Unix ns) is when the limiter asks Redis again after a
	// failure; lastLog and suppressed rate-limit the failure log line.
	pausedUntil atomic.Int64
	lastLog     atomic.Int64
	suppressed  atomic.Int64
}

// New returns a Limiter over rdb; metrics are registered on reg (nil: not
// registered). It refuses a Config without its timings (start from
// FromConfig).
func New(rdb Redis, cfg Config, log *zap.Logger, reg prometheus.Registerer) (*Limiter, error) {
	if cfg.Timeout <= 0 || cfg.Pause <= 0 {
		return nil, fmt.Errorf("ratelimit: timeout %v and pause %v must be positive", cfg.Timeout, cfg.Pause)
	}
	if log == nil {
		log = zap.NewNop()
	}
	l := &Limiter{rdb: rdb, checks: newCoalescer(rdb, cfg.Timeout), cfg: cfg, log: log, m: newMetrics(reg), now: time.Now}
	for c, lim := range cfg.Classes {
		if lim.Device.on() {
			l.intervals[c][0] = lim.Device.interval()
		}
		if lim.IP.on() {
			l.intervals[c][1] = lim.IP.interval()
		}
	}
	return l, nil
}

// addr is the address part of the keys: the ipkey of the client's real
// address, "-" when the gate did not know it.
func addr(realIP string) string {
	if k := ipkey.Of(realIP); k != "" {
		return k
	}
	return "-"
}

// Allow takes a token of class c from the device's and the address's
// buckets, or neither. It returns nil or a 42901 *errcode.Error whose
// RetryAfter says when the request would pass.
func (l *Limiter) Allow(ctx context.Context, c Class, realIP string, userID int64, deviceID string) error {
	if l == nil || c >= NumClasses {
		return nil
	}
	lim := l.cfg.Classes[c]
	a := addr(realIP)
	keys := make([]string, 0, 2)
	args := make([]any, 1, 5)
	args[0] = "0"
	scopes := make([]string, 0, 2)
	if lim.Device.on() {
		keys = append(keys, rediskey.RateDevice(a, c.String(), userID, deviceID))
		args = append(args, l.intervals[c][0], lim.Device.Burst)
		scopes = append(scopes, scopeDevice)
	}
	if lim.IP.on() {
		keys = append(keys, rediskey.RateIP(a, c.String()))
		args = append(args, l.intervals[c][1], lim.IP.Burst)
		scopes = append(scopes, scopeIP)
	}
	return l.check(ctx, c, keys, args, scopes)
}

// AdmitAuth is the first step of AUTH, before the token is looked at: it
// refuses an address blocked for failed AUTHs (with the block's remaining
// time) and takes a token of the address's AUTH bucket.
func (l *Limiter) AdmitAuth(ctx context.Context, realIP string) error {
	if l == nil {
		return nil
	}
	a := addr(realIP)
	keys := make([]string, 0, 2)
	args := make([]any, 1, 3)
	args[0] = "0"
	scopes := make([]string, 0, 2)
	if l.cfg.AuthFailures > 0 {
		keys = append(keys, rediskey.AuthBlock(a))
		args[0] = "1"
		scopes = append(scopes, scopeBlocked)
	}
	if ip := l.cfg.Classes[Auth].IP; ip.on() {
		keys = append(keys, rediskey.RateIP(a, Auth.String()))
		args = append(args, l.intervals[Auth][1], ip.Burst)
		scopes = append(scopes, scopeIP)
	}
	return l.check(ctx, Auth, keys, args, scopes)
}

// AdmitDevice is the second step of AUTH, once the token is verified and
// before any store lookup: it takes a token of the device's AUTH bucket,
// so a device that reconnects in a loop costs no MySQL.
func (l *Limiter) AdmitDevice(ctx context.Context, realIP string, userID int64, deviceID string) error {
	if l == nil {
		return nil
	}
	dev := l.cfg.Classes[Auth].Device
	if !dev.on() {
		return nil
	}
	return l.check(ctx, Auth, []string{rediskey.RateDevice(addr(realIP), Auth.String(), userID, deviceID)},
		[]any{"0", l.intervals[Auth][0], dev.Burst}, []string{scopeDevice})
}

// AuthFailed counts a failed AUTH (bad, expired, forged or revoked token)
// of the address and blocks the address once it reaches the threshold. It
// reports whether this failure set the block.
func (l *Limiter) AuthFailed(ctx context.Context, realIP string) bool {
	if l == nil || l.cfg.AuthFailures <= 0 {
		return false
	}
	l.m.authFailures.Inc()
	if l.paused() {
		l.m.failOpen[Auth].Inc()
		return false
	}
	a := addr(realIP)
	cctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	n, err := failScript.Run(cctx, l.rdb, []string{rediskey.AuthFailures(a), rediskey.AuthBlock(a)},
		l.cfg.AuthFailures, l.cfg.AuthFailureWindow.Milliseconds(), l.cfg.AuthBlock.Milliseconds()).Int()
	if err != nil {
		l.failed(ctx, Auth, err)
		return false
	}
	if n == 1 {
		l.m.authBlocks.Inc()
		l.log.Warn("address blocked after failed logins", zap.String("real_ip", realIP),
			zap.Int("failures", l.cfg.AuthFailures), zap.Duration("for", l.cfg.AuthBlock))
		return true
	}
	return false
}

// check runs checkScript; keys and scopes are parallel, args starts with
// the block flag.
func (l *Limiter) check(ctx context.Context, c Class, keys []string, args []any, scopes []string) error {
	if len(keys) == 0 {
		return nil
	}
	if l.paused() {
		l.m.failOpen[c].Inc()
		return nil
	}
	res, err := l.checks.run(ctx, keys, args)
	if err != nil {
		l.failed(ctx, c, err)
		return nil
	}
	if res[0] == 1 {
		return nil
	}
	scope := scopeIP
	if i := int(res[2]) - 1; i >= 0 && i < len(scopes) {
		scope = scopes[i]
	}
	l.m.limited[c][scopeIndex(scope)].Inc()
	return errcode.Limited(message(c, scope), time.Duration(res[1])*time.Millisecond)
}

// message is the 42901 text of a refusal.
func message(c Class, scope string) string {
	switch scope {
	case scopeBlocked:
		return "too many failed logins from this address, retry later"
	case scopeDevice:
		return "too many " + what[c] + " from this device, slow down"
	}
	return "too many " + what[c] + " from this address, slow down"
}

// paused reports whether a recent failure makes the limiter fail open
// without asking Redis.
func (l *Limiter) paused() bool {
	until := l.pausedUntil.Load()
	return until != 0 && l.now().UnixNano() < until
}

// failed records a Redis failure: the request passes (fail open), the
// limiter pauses, and a log line says so at most once per logEvery. A
// request whose own context ended is not Redis's failure.
func (l *Limiter) failed(ctx context.Context, c Class, err error) {
	l.m.failOpen[c].Inc()
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return
	}
	now := l.now().UnixNano()
	l.pausedUntil.Store(now + int64(l.cfg.Pause))
	last := l.lastLog.Load()
	if now-last < int64(logEvery) || !l.lastLog.CompareAndSwap(last, now) {
		l.suppressed.Add(1)
		return
	}
	l.log.Warn("rate limiter failing open: Redis did not answer; requests pass unlimited",
		zap.String("class", c.String()), zap.Duration("pause", l.cfg.Pause),
		zap.Int64("suppressed_since_last", l.suppressed.Swap(0)), zap.Error(err))
}

// limiterMetrics are the limiter's counters, children resolved once so
// the hot path touches no label map.
type limiterMetrics struct {
	limited      [NumClasses][3]prometheus.Counter
	failOpen     [NumClasses]prometheus.Counter
	authFailures prometheus.Counter
	authBlocks   prometheus.Counter
}

func scopeIndex(scope string) int {
	switch scope {
	case scopeDevice:
		return 0
	case scopeIP:
		return 1
	}
	return 2
}

func newMetrics(reg prometheus.Registerer) *limiterMetrics {
	limited := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "spark", Subsystem: "logic", Name: "rate_limited_total",
		Help: "Requests refused with 42901, by command class and the bucket that refused (device, ip, blocked: an address blocked for failed AUTHs).",
	}, []string{"class", "scope"})
	failOpen := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "spark", Subsystem: "logic", Name: "rate_limit_fail_open_total",
		Help: "Requests let through unchecked because Redis did not answer the rate limiter, by command class.",
	}, []string{"class"})
	m := &limiterMetrics{
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "logic", Name: "auth_failures_total",
			Help: "Failed AUTHs (bad, expired, forged or revoked tokens) counted against their address.",
		}),
		authBlocks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "spark", Subsystem: "logic", Name: "auth_blocks_total",
			Help: "Addresses blocked from AUTH after logic.rate_limit.auth_failures failures.",
		}),
	}
	for c := Class(0); c < NumClasses; c++ {
		for i, s := range []string{scopeDevice, scopeIP, scopeBlocked} {
			m.limited[c][i] = limited.WithLabelValues(c.String(), s)
		}
		m.failOpen[c] = failOpen.WithLabelValues(c.String())
	}
	if reg != nil {
		reg.MustRegister(limited, failOpen, m.authFailures, m.authBlocks)
	}
	return m
}
