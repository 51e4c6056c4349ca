// Package route encodes the route table entries that say which gate holds a
// device: im:route:{uid} is a HASH device_id →
// "gate_id|conn_id|since_ms|real_ip" (decision 87). The real_ip field is
// optional: entries written before it existed have three fields, and entries
// restored by Rebind after a Redis loss have none to give.
package route

import (
	"fmt"
	"strconv"
	"strings"
)

// Entry is one device's route.
type Entry struct {
	GateID  string
	ConnID  uint64
	SinceMs int64
	// RealIP is the client's address as the gate saw it (PROXY-aware);
	// empty when unknown.
	RealIP string
}

// Key is the entry without its real IP, "gate_id|conn_id|since_ms": what
// names one connection, compared by CloseScript and CompareAndDeleteScript
// so entries with and without the IP field are deleted alike.
func (e Entry) Key() string {
	return e.GateID + "|" + strconv.FormatUint(e.ConnID, 10) + "|" + strconv.FormatInt(e.SinceMs, 10)
}

// String encodes e as "gate_id|conn_id|since_ms|real_ip", or Key() when
// the IP is unknown.
func (e Entry) String() string {
	if e.RealIP == "" {
		return e.Key()
	}
	return e.Key() + "|" + e.RealIP
}

// Parse decodes a route value.
func Parse(s string) (Entry, error) {
	a, rest, ok := strings.Cut(s, "|")
	b, rest, ok2 := strings.Cut(rest, "|")
	c, ip, hasIP := strings.Cut(rest, "|")
	if !ok || !ok2 || a == "" || (hasIP && (ip == "" || strings.Contains(ip, "|"))) {
		return Entry{}, fmt.Errorf("route: malformed entry %q", s)
	}
	conn, err := strconv.ParseUint(b, 10, 64)
	if err != nil {
		return Entry{}, fmt.Errorf("route: malformed conn id in %q", s)
	}
	since, err := strconv.ParseInt(c, 10, 64)
	if err != nil {
		return Entry{}, fmt.Errorf("route: malformed since in %q", s)
	}
	return Entry{GateID: a, ConnID: conn, SinceMs: since, RealIP: ip}, nil
}

// CompareAndDeleteScript deletes a device's route only while it still names
// the given connection, so a late close of an old connection never removes
// the route of its replacement. KEYS[1] route key, ARGV[1] device, ARGV[2]
// the entry's Key() (it matches the entry with or without its real IP).
const CompareAndDeleteScript = `
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v and (v == ARGV[2] or string.sub(v, 1, #ARGV[2] + 1) == ARGV[2] .. '|') then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0`

// SwapScript sets a device's route and returns {the previous value or
// "", the user's routes after it}, atomically, so exactly one AUTH sees
// each old connection to kick, and exactly one sees the user's first
// device come online (no previous value, one route).
// The hash has no TTL: a connection may live for days, and entries left by a
// crashed gate are removed by deliver when that gate reports them missing.
// KEYS[1] route key, ARGV[1] device, ARGV[2] new value.
const SwapScript = `
local old = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {old or '', redis.call('HLEN', KEYS[1])}`

// CloseScript is CompareAndDeleteScript for a connection's own close: it
// returns the user's routes left after the delete, or -1 when the route
// named another connection and nothing was deleted, so exactly one close
// sees the user's last device go offline (0).
// KEYS[1] route key, ARGV[1] device, ARGV[2] the entry's Key().
const CloseScript = `
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v and (v == ARGV[2] or string.sub(v, 1, #ARGV[2] + 1) == ARGV[2] .. '|') then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return redis.call('HLEN', KEYS[1])
end
return -1`
