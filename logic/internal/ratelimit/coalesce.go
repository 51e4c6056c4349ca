package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/batch"
)

// Redis is what the limiter needs of a Redis client: its scripts, and
// pipelines, so concurrent checks share one round trip.
type Redis interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// maxCoalesced bounds the checks of one pipeline; at saturation a logic
// process has a few hundred requests in flight, so this rarely binds.
const maxCoalesced = 256

// maxPipelines is how many pipelines may be in flight at once: one being
// answered while the next one fills keeps a batch's wait at about one
// round trip.
const maxPipelines = 2

// check is one script call waiting for its pipeline.
type check struct {
	ctx  context.Context
	keys []string
	args []any
	res  []int64
	err  error
	done chan struct{}
}

// coalescer sends concurrent checkScript calls as pipelines. One call per
// request cost a write and a read system call each in logic and in Redis,
// which at saturation was a quarter of logic's CPU; a pipeline of n calls
// costs about one of each. Batches form by waiting for a pipeline in
// flight, never on a timer, so a lone request goes at once.
type coalescer struct {
	rdb     Redis
	timeout time.Duration
	checks  batch.Coalescer[*check]
}

func newCoalescer(rdb Redis, timeout time.Duration) *coalescer {
	c := &coalescer{rdb: rdb, timeout: timeout}
	c.checks = batch.Coalescer[*check]{MaxInFlight: maxPipelines, MaxSize: maxCoalesced, Send: c.send}
	return c
}

// run sends keys and args through checkScript with whatever other checks
// are waiting, and returns its answer. It returns early with ctx's error
// when ctx ends first.
func (c *coalescer) run(ctx context.Context, keys []string, args []any) ([]int64, error) {
	ch := &check{ctx: ctx, keys: keys, args: args, done: make(chan struct{})}
	c.checks.Add(ch)
	select {
	case <-ch.done:
		return ch.res, ch.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// send runs one pipeline of checks and answers each of them.
func (c *coalescer) send(pending []*check) {
	// The batch is everyone's, so no one caller's cancellation may cut it
	// short; the limiter's timeout bounds it instead.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(pending[0].ctx), c.timeout)
	defer cancel()
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(pending))
	for i, ch := range pending {
		cmds[i] = pipe.EvalSha(ctx, checkScript.Hash(), ch.keys, ch.args...)
	}
	// Each command's error is read below; Exec's is the first of them.
	_, _ = pipe.Exec(ctx)
	for i, ch := range pending {
		ch.res, ch.err = answer(cmds[i])
		if ch.err != nil && isNoScript(ch.err) {
			// Redis lost its script cache (restart, SCRIPT FLUSH): Run
			// loads the script again. Nothing ran, so nothing runs twice.
			ch.res, ch.err = answer(checkScript.Run(ctx, c.rdb, ch.keys, ch.args...))
		}
		close(ch.done)
	}
}

func answer(cmd *redis.Cmd) ([]int64, error) {
	res, err := cmd.Int64Slice()
	if err == nil && len(res) != 3 {
		err = fmt.Errorf("ratelimit: script answered %v", res)
	}
	return res, err
}

func isNoScript(err error) bool { return strings.HasPrefix(err.Error(), "NOSCRIPT") }
