// Package rediskey names every Redis key. Keys are prefixed "im:" and put
// the part that must stay in one Redis Cluster slot in a {hash tag}.
package rediskey

import "strconv"

// Prefix starts every key.
const Prefix = "im:"

// Route is the HASH device_id → "gate_id|conn_id|since_ms" of a user.
func Route(userID int64) string { return Prefix + "route:{" + strconv.FormatInt(userID, 10) + "}" }

// Gate is the HASH (push_addr, started_at) of a live gate, with a TTL.
func Gate(gateID string) string { return Prefix + "gate:{" + gateID + "}" }

// Gates is the ZSET of gate ids (score: last refresh, Unix ms), so the
// business API can list the live gates without scanning keys; an id is
// live while its Gate key exists.
func Gates() string { return Prefix + "gates" }

// GateRoutes is the SET of the routes one incarnation of a gate holds
// (members "user_id|device_id|gate_id|conn_id|since_ms"), written at AUTH
// before the route and trimmed at close, so that when the gate dies its
// routes can be swept without scanning every user's. An incarnation is
// the high 32 bits of the gate's connection ids: its start, in Unix
// seconds. It shares the Gate key's hash tag.
func GateRoutes(gateID string, incarnation uint32) string {
	return Prefix + "gate:{" + gateID + "}:routes:" + strconv.FormatUint(uint64(incarnation), 10)
}

// GateRouteSets is the ZSET of the GateRoutes sets in use (members
// "<incarnation>:<gate_id>", score: first use, Unix ms), read by the sweep.
func GateRouteSets() string { return Prefix + "gate-route-sets" }

// GateRouteSweep is the lease of the one logic process sweeping dead
// gates' routes.
func GateRouteSweep() string { return Prefix + "gate-route-sets:sweep" }

// Deliver is the deliver STREAM of partition p.
func Deliver(p int) string { return Prefix + "deliver:{" + strconv.Itoa(p) + "}" }

// DeliverLease is the lease a deliver instance holds on partition p. It
// shares the stream's hash tag so a lease check and a stream read can run in
// one script.
func DeliverLease(p int) string { return Prefix + "deliver:{" + strconv.Itoa(p) + "}:lease" }

// DeliverDone marks a message whose fan-out completed, so a job enqueued
// again by a client retry is not pushed twice.
func DeliverDone(p int, msgID int64) string {
	return Prefix + "deliver:{" + strconv.Itoa(p) + "}:done:" + strconv.FormatInt(msgID, 10)
}

// RecallPushed marks a recalled message whose push (P2P) or deliver job
// (group) was queued, so a repeated recall does nothing more.
func RecallPushed(msgID int64) string {
	return Prefix + "recall:pushed:" + strconv.FormatInt(msgID, 10)
}

// DeliverMembers is the ZSET of live deliver instances (score: last seen ms).
func DeliverMembers() string { return Prefix + "deliver:members" }

// MachineLease is the lease on a MsgId machine id held by one logic process.
func MachineLease(machineID int) string { return Prefix + "msgid:machine:" + strconv.Itoa(machineID) }

// WebhookLease is the lease of the one logic process delivering to a
// webhook endpoint.
func WebhookLease(endpointID int64) string {
	return Prefix + "webhook:endpoint:" + strconv.FormatInt(endpointID, 10)
}

// DeliverGroup is the consumer group of the deliver streams.
const DeliverGroup = "deliver"

// Push is the push STREAM of push partition p: deliver appends the
// notification work of offline devices, logic's push workers read it
// (consumer group PushGroup).
func Push(p int) string { return Prefix + "push:{p" + strconv.Itoa(p) + "}" }

// PushGroup is the consumer group of the push streams.
const PushGroup = "push"

// PushSent is the idempotency key of one message's notification to one
// device: it holds the worker that is sending it while it does, then
// "sent" for a day, so a job taken over or queued twice never notifies a
// device twice for one message.
func PushSent(msgID, userID int64, deviceID string) string {
	return Prefix + "push:sent:{" + strconv.FormatInt(userID, 10) + "}:" + strconv.FormatInt(msgID, 10) + ":" + deviceID
}

// PushCollapse holds the msg_id of the last notification of a
// conversation to a user, for push.collapse_interval: later messages of
// the conversation in that time send none.
func PushCollapse(userID, conversationID int64) string {
	return Prefix + "push:collapse:{" + strconv.FormatInt(userID, 10) + "}:" + strconv.FormatInt(conversationID, 10)
}

// Partition maps a conversation to its deliver partition: a 64-bit mix
// of the id, modulo partitions. Conversation ids are MsgIds, whose low
// bits are the issuing logic's machine id, so the id itself modulo
// partitions would put every conversation one logic created into one
// partition (decision 77).
func Partition(conversationID int64, partitions int) int {
	if partitions <= 1 {
		return 0
	}
	// splitmix64's finaliser: every input bit moves every output bit.
	x := uint64(conversationID)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return int(x % uint64(partitions))
}

// The rate-limit keys (logic/internal/ratelimit) share the client
// address's hash tag, so one script checks a request's device and address
// buckets atomically on a Redis Cluster too; a device's bucket is thus
// per (address, device), which is per device while it stays on one
// address. addr is an ipkey.Of key.

// RateIP is the token bucket (GCRA theoretical arrival time) of a command
// class for one client address.
func RateIP(addr, class string) string { return Prefix + "rl:{" + addr + "}:" + class }

// RateDevice is the token bucket of a command class for one user's device
// on one client address.
func RateDevice(addr, class string, userID int64, deviceID string) string {
	return Prefix + "rl:{" + addr + "}:" + class + ":" + strconv.FormatInt(userID, 10) + ":" + deviceID
}

// AuthFailures counts the failed AUTHs of a client address in the current
// window.
func AuthFailures(addr string) string { return Prefix + "rl:{" + addr + "}:authfail" }

// AuthBlock exists, with a TTL, while AUTH from a client address is
// blocked after too many failures.
func AuthBlock(addr string) string { return Prefix + "rl:{" + addr + "}:authblock" }
