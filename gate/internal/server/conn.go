package server

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// Connection states (docs/protocol.md §6 Sessions).
const (
	stateConnecting int32 = iota
	stateAuthenticated
	stateClosed
)

// ConnIDs issues connection ids unique per gate id across restarts:
// uint64(start_unix_seconds)<<32 | counter (docs/internals.md).
type ConnIDs struct {
	base uint64
	n    atomic.Uint32
}

// NewConnIDs seeds the ids from the process start time.
func NewConnIDs(start time.Time) *ConnIDs {
	return &ConnIDs{base: uint64(start.Unix()) << 32}
}

// Next returns a new connection id.
func (g *ConnIDs) Next() uint64 { return g.base | uint64(g.n.Add(1)) }

// Conn is one client connection's session. Its inbound side is only
// touched by its transport's read path (netpoll serialises OnRequest per
// connection); everything shared with pushes and logic answers is atomic or
// under mu.
type Conn struct {
	// upLink is what the upstream keeps of the connection: its id and
	// address, the stream it is pinned to, its requests in flight.
	upLink
	tr Transport
	// addrKey is realIP as the per-address cap counts it (pkg/ipkey).
	addrKey   string
	createdAt time.Time

	state      atomic.Int32
	lastActive atomic.Int64 // unix nanos of the last inbound frame
	pushSeq    atomic.Uint32
	// authInflight is set while an AUTH is with logic, so a second AUTH is
	// refused instead of racing the first.
	authInflight atomic.Bool
	// pendingKick is a kick that arrived while AUTH was in flight
	// (logic already wrote the route and then replaced it).
	pendingKick atomic.Pointer[deferredKick]
	// awaiting counts the requests forwarded to logic whose answer (or
	// 50301) is not yet queued on out. It is raised before forwarding and
	// lowered after queueing, unlike inflight, which logic's answer lowers
	// before the answer is queued: a shutdown kick waits for it to reach 0
	// so no answer can land behind the KICK.
	awaiting atomic.Int32
	// leaving is set when the gate is about to kick the connection on
	// shutdown: its new requests are answered 50301 instead of forwarded,
	// so awaiting only falls.
	leaving atomic.Bool

	mu      sync.Mutex
	session *logicv1.Session
	// closeReason is the first reason recorded; kickedFor the kick's own
	// reason when it is closeKicked. Both under mu.
	closeReason closeReason
	kickedFor   string
	// unacked are the MESSAGE pushes that may notify, queued to the
	// connection and not yet PUSH_ACKed (at most maxUnacked, the oldest
	// forgotten first), under mu: reported in the Closed event.
	unacked []unackedPush

	out *Outbound
}

// unackedPush is one MESSAGE push awaiting its PUSH_ACK.
type unackedPush struct {
	seq         uint32
	msgID, conv int64
}

// maxUnacked bounds the pushes a connection remembers: a client that never
// acks costs a fixed few bytes, and a device gone for good is notified of
// its newest messages.
const maxUnacked = 64

// trackPush remembers a MESSAGE push until its PUSH_ACK.
func (c *Conn) trackPush(seq uint32, msgID, conv int64) {
	c.mu.Lock()
	if len(c.unacked) == maxUnacked {
		c.unacked = append(c.unacked[:0], c.unacked[1:]...)
	}
	c.unacked = append(c.unacked, unackedPush{seq: seq, msgID: msgID, conv: conv})
	c.mu.Unlock()
}

// ackPush forgets the push a PUSH_ACK names.
func (c *Conn) ackPush(seq uint32) {
	c.mu.Lock()
	for i, u := range c.unacked {
		if u.seq == seq {
			c.unacked = append(c.unacked[:i], c.unacked[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
}

// takeUnacked returns the pushes never acked, for the Closed event.
func (c *Conn) takeUnacked() []*logicv1.UnackedPush {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.unacked) == 0 {
		return nil
	}
	out := make([]*logicv1.UnackedPush, len(c.unacked))
	for i, u := range c.unacked {
		out[i] = &logicv1.UnackedPush{MsgId: u.msgID, ConversationId: u.conv}
	}
	c.unacked = nil
	return out
}

func newConn(id uint64, tr Transport, realIP string, now time.Time) *Conn {
	c := &Conn{upLink: upLink{id: id, realIP: realIP}, tr: tr, createdAt: now}
	c.lastActive.Store(now.UnixNano())
	return c
}

// ID returns the connection id.
func (c *Conn) ID() uint64 { return c.id }

// Authenticated reports whether AUTH succeeded and the connection is open.
func (c *Conn) Authenticated() bool { return c.state.Load() == stateAuthenticated }

// Session returns the bound session, nil before AUTH.
func (c *Conn) Session() *logicv1.Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

// deferredKick is a KICK that reached the connection while its AUTH answer
// was on its way: it applies once the session is bound, if it is for that
// session.
type deferredKick struct {
	userID   int64
	deviceID string
	reason   string
	body     []byte
}

// deferKick records a kick for when the AUTH in flight binds.
func (c *Conn) deferKick(k *deferredKick) { c.pendingKick.Store(k) }

// takeDeferredKick returns the kick recorded for the bound session, if any.
func (c *Conn) takeDeferredKick() *deferredKick {
	k := c.pendingKick.Swap(nil)
	if k == nil || !c.matches(k.userID, k.deviceID) {
		return nil
	}
	return k
}

// bind authenticates the connection; it reports false when it was closed
// or already authenticated meanwhile.
func (c *Conn) bind(s *logicv1.Session) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.state.CompareAndSwap(stateConnecting, stateAuthenticated) {
		return false
	}
	c.session = s
	return true
}

// matches reports whether the connection is authenticated as (user, device):
// a stale route must never reach a connection id reused by someone else.
func (c *Conn) matches(userID int64, deviceID string) bool {
	if !c.Authenticated() {
		return false
	}
	s := c.Session()
	return s != nil && s.UserId == userID && s.DeviceId == deviceID
}

// touch records inbound activity for the idle sweeper.
func (c *Conn) touch(now time.Time) { c.lastActive.Store(now.UnixNano()) }

// nextPushSeq returns the SequenceID of the next push to this connection.
func (c *Conn) nextPushSeq() uint32 { return c.pushSeq.Add(1) }

// setCloseReason records why the connection closes; the first reason wins,
// since later ones are consequences of it.
func (c *Conn) setCloseReason(r closeReason) {
	c.mu.Lock()
	if c.closeReason == closePeer {
		c.closeReason = r
	}
	c.mu.Unlock()
}

// setKicked records a kick for reason as the close reason, unless one is
// recorded already.
func (c *Conn) setKicked(reason string) {
	c.mu.Lock()
	if c.closeReason == closePeer {
		c.closeReason, c.kickedFor = closeKicked, reason
	}
	c.mu.Unlock()
}

// reason returns the recorded close reason and its text for logs and
// logic's Closed event ("kicked: <reason>" for a kick).
func (c *Conn) reason() (closeReason, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closeReason == closeKicked {
		return closeKicked, "kicked: " + c.kickedFor
	}
	return c.closeReason, c.closeReason.String()
}

// Close closes the connection now; queued frames are discarded.
func (c *Conn) Close(r closeReason) {
	c.setCloseReason(r)
	_ = c.tr.Close()
}

// write implements sink through the transport, which returns within the
// write timeout.
func (c *Conn) write(b *frameBatch) error { return c.tr.WriteFrames(b) }

// closing reports whether the connection takes no more frames: it is
// closing once what is queued has been written.
func (c *Conn) closing() bool { return c.out.Closing() }

// shutdown implements sink.
func (c *Conn) shutdown(r closeReason) { c.Close(r) }

// remoteIP is the socket peer's address, the client's real address unless
// a PROXY protocol header names another.
func remoteIP(addr net.Addr) string {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.String()
	case nil:
		return ""
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host
}
