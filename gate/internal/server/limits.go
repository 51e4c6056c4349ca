package server

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
)

// The gate's admission caps (docs/decisions.md 67): connections per client
// address (gate.max_conns_per_ip; an IPv6 client's /64, pkg/ipkey) and
// connections that have not authenticated (gate.max_unauthenticated). They
// are checked when a session would start, once the client's real address
// is known (after the PROXY header, the TLS handshake, the WebSocket
// upgrade). A connection over a cap never gets a session: the gate writes
// one frame, command AUTH (1) with RequestID 0 and code 42901 naming the
// cap, and closes. netpoll cannot write from OnPrepare, where a plain TCP
// session starts, so there the frame goes out with the connection's first
// bytes (normally its AUTH), and a refused connection that stays silent is
// closed after refuseGrace.

// refuseGrace is how long a refused plain TCP connection may stay open
// waiting for its first bytes, the moment its refusal frame can be
// written.
const refuseGrace = 2 * time.Second

// Refusal reasons, the 42901 message a refused connection reads.
const (
	refusedPerIP  = "too many connections from this address"
	refusedUnauth = "too many connections waiting to authenticate on this server, retry later"
)

// connLimits counts connections per client address and unauthenticated
// connections.
type connLimits struct {
	perIP  int // 0: off
	unauth int // 0: off
	seed   maphash.Seed
	shards [64]ipShard

	// unauthed counts sessions that have not authenticated; it is kept
	// with the cap off too, as a gauge.
	unauthed atomic.Int64

	refusedPerIP    atomic.Uint64
	refusedUnauth   atomic.Uint64
	preAuthTooLarge atomic.Uint64
}

type ipShard struct {
	mu sync.Mutex
	n  map[string]int32
}

func newConnLimits(perIP, unauth int) *connLimits {
	l := &connLimits{perIP: perIP, unauth: unauth, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].n = map[string]int32{}
	}
	return l
}

func (l *connLimits) shard(key string) *ipShard {
	return &l.shards[maphash.String(l.seed, key)%uint64(len(l.shards))]
}

// admit counts a new, unauthenticated connection from address key, or
// returns the reason it is refused (and counts nothing).
func (l *connLimits) admit(key string) string {
	if n := l.unauthed.Add(1); l.unauth > 0 && n > int64(l.unauth) {
		l.unauthed.Add(-1)
		l.refusedUnauth.Add(1)
		return refusedUnauth
	}
	if l.perIP > 0 {
		s := l.shard(key)
		s.mu.Lock()
		if s.n[key] >= int32(l.perIP) {
			s.mu.Unlock()
			l.unauthed.Add(-1)
			l.refusedPerIP.Add(1)
			return refusedPerIP
		}
		s.n[key]++
		s.mu.Unlock()
	}
	return ""
}

// authenticated moves a connection out of the unauthenticated count; the
// session layer calls it exactly once per connection that binds.
func (l *connLimits) authenticated() { l.unauthed.Add(-1) }

// release forgets a closed connection from address key; unauthed says it
// never authenticated.
func (l *connLimits) release(key string, unauthed bool) {
	if unauthed {
		l.unauthed.Add(-1)
	}
	if l.perIP <= 0 {
		return
	}
	s := l.shard(key)
	s.mu.Lock()
	if n := s.n[key] - 1; n > 0 {
		s.n[key] = n
	} else {
		delete(s.n, key)
	}
	s.mu.Unlock()
}

// register exposes the counters on reg.
func (l *connLimits) register(reg prometheus.Registerer) {
	counter := func(name, help string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "spark", Subsystem: "gate", Name: name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "spark", Subsystem: "gate", Name: "unauthenticated_connections",
			Help: "Client connections that have not authenticated (capped by gate.max_unauthenticated)."},
			func() float64 { return float64(l.unauthed.Load()) }),
		counter("conn_per_ip_rejects_total", "Connections refused because their address held gate.max_conns_per_ip.", &l.refusedPerIP),
		counter("conn_unauthenticated_rejects_total", "Connections refused because gate.max_unauthenticated connections had not authenticated.", &l.refusedUnauth),
		counter("preauth_frame_rejects_total", "Connections closed for a frame over gate.preauth_max_frame_size before AUTH.", &l.preAuthTooLarge),
	)
}

// refusal is the session layer's answer to a connection over one of the
// caps: the reason, for the log, and the one frame its carrier writes
// before closing.
type refusal struct {
	reason string
	frame  *frameBatch
}

// refuse builds the refusal for reason: command AUTH (1), RequestID 0,
// code 42901 naming the cap.
func (s *sessions) refuse(reason string) *refusal {
	b := &frameBatch{}
	b.add(frame.Header{Command: protocol.CmdAuth}, envelope.Fail(s.ids.Next(), errcode.RateLimited, reason))
	return &refusal{reason: reason, frame: b}
}
