package queue

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// StreamState is a work stream's backlog as its gauges show it. Both
// queues (deliver's and push's) delete an entry when it is acknowledged,
// so the stream's length is its backlog and its first entry the oldest
// unfinished one.
type StreamState struct {
	// Length and Pending are valid when LengthOK and PendingOK: one
	// failed command (a stream or group not created yet) leaves the other
	// figures usable.
	Length, Pending     int64
	LengthOK, PendingOK bool
	// OldestAgeSeconds is now minus the first entry's time (0 when the
	// stream is empty); valid when AgeOK.
	OldestAgeSeconds float64
	AgeOK            bool
}

// Sample reads each stream's length, first entry and group's pending
// count in one pipeline. The error is the first failed command's (nil for
// a missing stream or group, which reads as no backlog).
func Sample(ctx context.Context, rdb redis.Cmdable, streams []string, group string, now time.Time) ([]StreamState, error) {
	pipe := rdb.Pipeline()
	lens := make([]*redis.IntCmd, len(streams))
	firsts := make([]*redis.XMessageSliceCmd, len(streams))
	pends := make([]*redis.XPendingCmd, len(streams))
	for i, s := range streams {
		lens[i] = pipe.XLen(ctx, s)
		firsts[i] = pipe.XRangeN(ctx, s, "-", "+", 1)
		pends[i] = pipe.XPending(ctx, s, group)
	}
	_, execErr := pipe.Exec(ctx)
	out := make([]StreamState, len(streams))
	for i := range streams {
		st := &out[i]
		if n, err := lens[i].Result(); err == nil {
			st.Length, st.LengthOK = n, true
		}
		if msgs, err := firsts[i].Result(); err == nil {
			st.AgeOK = true
			if len(msgs) > 0 {
				st.OldestAgeSeconds = EntryAge(msgs[0].ID, now)
			}
		}
		if p, err := pends[i].Result(); err == nil {
			st.Pending, st.PendingOK = p.Count, true
		}
	}
	if execErr == redis.Nil {
		return out, nil
	}
	return out, execErr
}

// EntryAge is now minus the time in a stream entry ID ("ms-seq"), never
// negative (the Redis host's clock may run ahead of ours).
func EntryAge(id string, now time.Time) float64 {
	ms, _, _ := strings.Cut(id, "-")
	t, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return 0
	}
	return max(now.Sub(time.UnixMilli(t)).Seconds(), 0)
}
