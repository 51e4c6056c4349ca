package message

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/rediskey"
)

// machineLeaseCacheTTL is how long an answer about a machine id's lease is
// reused. A machine id whose lease appeared or lapsed within it may be
// misjudged; either way the send commits (a refused client msg_id is
// replaced, never an error), so a second is plenty.
const machineLeaseCacheTTL = time.Second

// machineLeases tells whether a machine id holds a live MsgId lease in this
// cluster: every logic leases its machine id in Redis
// (rediskey.MachineLease) for as long as it runs, so an id with any other
// machine id was not issued by this cluster's GENERATE_MSG_ID, and keeping
// it could collide with ids a future logic of that machine id issues.
// Answers are cached per machine id, so a send pays at most one EXISTS a
// second per machine id, and never under a lock.
type machineLeases struct {
	rdb redis.Cmdable
	ttl time.Duration

	mu   sync.Mutex
	seen [msgid.MaxMachineID + 1]leaseSeen
}

type leaseSeen struct {
	live bool
	at   time.Time
}

func newMachineLeases(rdb redis.Cmdable) *machineLeases {
	return &machineLeases{rdb: rdb, ttl: machineLeaseCacheTTL}
}

// live reports whether machine holds a lease now (as of at most ttl ago).
// A Redis error answers false: the client's id is then replaced, which is
// always safe.
func (m *machineLeases) live(ctx context.Context, machine int, now time.Time) bool {
	if machine < 0 || machine > msgid.MaxMachineID {
		return false
	}
	m.mu.Lock()
	e := m.seen[machine]
	m.mu.Unlock()
	if !e.at.IsZero() && now.Sub(e.at) < m.ttl {
		return e.live
	}
	n, err := m.rdb.Exists(ctx, rediskey.MachineLease(machine)).Result()
	if err != nil {
		return false
	}
	m.mu.Lock()
	m.seen[machine] = leaseSeen{live: n == 1, at: now}
	m.mu.Unlock()
	return n == 1
}
