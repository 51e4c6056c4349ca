package dialog

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/protocol"
)

// Ids are compared as decimal strings (Lua numbers are doubles and lose
// precision above 2^53).
const luaGT = `
local function gt(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local function touch(cid)
  local v = redis.call('INCR', KEYS[3])
  redis.call('ZADD', KEYS[2], v, cid)
  return v
end
`

// applyMessage: KEYS state, list, ver; ARGV cid, msg_id, created_at_ms,
// count ("1" when it counts as unread for this user), preview JSON,
// max_applied. Returns 1 when the state changed, 0 when it was absent (only
// the version was bumped: the next sync rebuilds it), when the message was
// counted before, or when it changes nothing (an older message that does
// not count).
//
// A message that counts is recorded as a field "a:<msg_id>" of the state
// (HSETNX), so a redelivery never counts it twice however many messages
// were applied in between. Only counted ids are recorded: applying any
// other message again is a no-op by itself (last_msg_id only moves up). A
// muted conversation counts nothing (decision 30). When more than
// max_applied ids are recorded the state is dropped instead, and the next
// sync recomputes it exactly from MySQL with an empty record.
var applyMessage = redis.NewScript(luaGT + `
local cid, mid, at, count, preview, maxApplied = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
if redis.call('EXISTS', KEYS[1]) == 0 then
  touch(cid)
  return 0
end
local f = redis.call('HMGET', KEYS[1], 'base', 'last_msg_id', 'last_read', 'muted')
local base, last, lastread, muted = f[1] or '0', f[2] or '0', f[3] or '0', f[4] or '0'
if not gt(mid, base) then return 0 end
local changed = false
if count == '1' and muted ~= '1' and gt(mid, lastread) then
  if redis.call('HSETNX', KEYS[1], 'a:' .. mid, '1') == 0 then return 0 end
  if redis.call('HINCRBY', KEYS[1], 'applied_n', 1) > maxApplied then
    redis.call('DEL', KEYS[1])
    touch(cid)
    return 0
  end
  redis.call('HINCRBY', KEYS[1], 'unread', 1)
  changed = true
end
if gt(mid, last) then
  redis.call('HSET', KEYS[1], 'last_msg_id', mid, 'last_msg_at', at, 'preview', preview)
  changed = true
end
if not changed then return 0 end
touch(cid)
return 1
`)

// invalidate: KEYS state, list, ver; ARGV cid. Drops the state and bumps
// the version, so the next sync recomputes it from MySQL.
var invalidate = redis.NewScript(luaGT + `
redis.call('DEL', KEYS[1])
return touch(ARGV[1])
`)

// writeCold: KEYS state, list, ver; ARGV cid, observed version ("" when the
// conversation was not in the list), field/value pairs. Writes only if the
// version is still the observed one (nothing changed since the MySQL read
// began), else returns 0 and the newer version brings the conversation back
// in a later sync page.
var writeCold = redis.NewScript(luaGT + `
local cur = redis.call('ZSCORE', KEYS[2], ARGV[1])
if ARGV[2] == '' then
  if cur then return 0 end
elseif (not cur) or tonumber(cur) ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
if not cur then touch(ARGV[1]) end
return 1
`)

// ensureMembers: KEYS list, ver, built; ARGV epoch, cids... Adds every
// conversation not yet in the list, then marks the list built (SET NX, so
// racing builds agree on one epoch). Returns the epoch.
var ensureMembers = redis.NewScript(`
for i = 2, #ARGV do
  if not redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    local v = redis.call('INCR', KEYS[2])
    redis.call('ZADD', KEYS[1], v, ARGV[i])
  end
end
redis.call('SET', KEYS[3], ARGV[1], 'NX')
return redis.call('GET', KEYS[3])
`)

// ApplyMessage applies a new message to a user's entry of a conversation.
// count says whether it counts as unread for this user (not the sender's
// own message). It reports whether the state existed and was updated.
func ApplyMessage(ctx context.Context, rdb redis.Scripter, uid, cid, msgID, createdAtMs int64, count bool, p Preview) (bool, error) {
	pj, err := EncodePreview(p)
	if err != nil {
		return false, err
	}
	return ApplyMessageJSON(ctx, rdb, uid, cid, msgID, createdAtMs, count, pj)
}

// EncodePreview is the stored form of a preview. A fan-out to many
// recipients encodes it once and calls ApplyMessageJSON for each.
func EncodePreview(p Preview) ([]byte, error) {
	pj, err := protocol.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("dialog: preview: %w", err)
	}
	return pj, nil
}

// ApplyMessageJSON is ApplyMessage with the preview already encoded by
// EncodePreview.
func ApplyMessageJSON(ctx context.Context, rdb redis.Scripter, uid, cid, msgID, createdAtMs int64, count bool, previewJSON []byte) (bool, error) {
	c := "0"
	if count {
		c = "1"
	}
	n, err := applyMessage.Run(ctx, rdb, Keys(uid, cid), cid, msgID, createdAtMs, c, previewJSON, MaxApplied).Int()
	if err != nil {
		return false, fmt.Errorf("dialog: apply message %d to user %d: %w", msgID, uid, err)
	}
	return n == 1, nil
}

// Invalidate drops a user's state of a conversation and marks it changed.
func Invalidate(ctx context.Context, rdb redis.Scripter, uid, cid int64) error {
	if err := invalidate.Run(ctx, rdb, Keys(uid, cid), cid).Err(); err != nil {
		return fmt.Errorf("dialog: invalidate conversation %d of user %d: %w", cid, uid, err)
	}
	return nil
}

// WriteCold stores a state computed from MySQL if the conversation's
// version is still observed ("" = absent from the list). It reports
// whether it wrote.
func WriteCold(ctx context.Context, rdb redis.Scripter, uid, cid int64, observed string, s State) (bool, error) {
	args := append([]any{cid, observed}, s.fields()...)
	n, err := writeCold.Run(ctx, rdb, Keys(uid, cid), args...).Int()
	if err != nil {
		return false, fmt.Errorf("dialog: write conversation %d of user %d: %w", cid, uid, err)
	}
	return n == 1, nil
}

// EnsureMembers adds the user's conversations that are missing from the
// list and marks it built; it returns the list's epoch.
func EnsureMembers(ctx context.Context, rdb redis.Scripter, uid int64, newEpoch string, cids []int64) (string, error) {
	args := make([]any, 0, len(cids)+1)
	args = append(args, newEpoch)
	for _, c := range cids {
		args = append(args, c)
	}
	epoch, err := ensureMembers.Run(ctx, rdb, []string{ListKey(uid), VersionKey(uid), BuiltKey(uid)}, args...).Text()
	if err != nil {
		return "", fmt.Errorf("dialog: build list of user %d: %w", uid, err)
	}
	return epoch, nil
}

// Epoch returns the list's epoch, or "" when it is not built.
func Epoch(ctx context.Context, rdb redis.Cmdable, uid int64) (string, error) {
	e, err := rdb.Get(ctx, BuiltKey(uid)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("dialog: epoch of user %d: %w", uid, err)
	}
	return e, nil
}

// Change is one entry of the change log.
type Change struct {
	ConversationID int64
	Version        int64
}

// Changes returns up to limit conversations changed after version, oldest
// change first.
func Changes(ctx context.Context, rdb redis.Cmdable, uid, after int64, limit int) ([]Change, error) {
	zs, err := rdb.ZRangeByScoreWithScores(ctx, ListKey(uid), &redis.ZRangeBy{
		Min: "(" + strconv.FormatInt(after, 10), Max: "+inf", Count: int64(limit),
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("dialog: changes of user %d: %w", uid, err)
	}
	out := make([]Change, 0, len(zs))
	for _, z := range zs {
		cid, err := strconv.ParseInt(fmt.Sprint(z.Member), 10, 64)
		if err != nil {
			continue
		}
		out = append(out, Change{ConversationID: cid, Version: int64(z.Score)})
	}
	return out, nil
}
