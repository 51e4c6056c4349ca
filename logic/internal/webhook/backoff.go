package webhook

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Schedule is the retry schedule of an endpoint whose next event fails:
// Base, then 4 times longer each attempt up to MaxInterval, until For
// after the first failure, when the endpoint is dead.
type Schedule struct {
	Base, MaxInterval, For time.Duration
}

// Delay is the wait after the attempts-th failed attempt (1 = the first).
func (s Schedule) Delay(attempts int) time.Duration {
	d := s.Base
	for i := 1; i < attempts && d < s.MaxInterval; i++ {
		d *= 4
	}
	return min(d, s.MaxInterval)
}

// Next is when to try again after the attempts-th failure of an event
// failing since since, given a Retry-After the endpoint asked for (0:
// none; it lengthens the wait, up to MaxInterval, never shortens it).
// dead: the next attempt would fall beyond For.
func (s Schedule) Next(attempts int, since, now time.Time, retryAfter time.Duration) (next time.Time, dead bool) {
	d := s.Delay(attempts)
	if retryAfter > d {
		d = min(retryAfter, s.MaxInterval)
	}
	next = now.Add(d)
	return next, next.Sub(since) > s.For
}

// ParseRetryAfter reads a Retry-After header: delay seconds or an HTTP
// date. ok is false when it is absent or malformed; a date in the past is
// a zero wait.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		// Beyond a year is no schedule anyone means; it also keeps the
		// multiplication from overflowing.
		return time.Duration(min(n, 365*24*3600)) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}
