package server

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/sparkim/spark/pkg/config"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"

	"github.com/sparkim/spark/gate/internal/proxyproto"
)

// proxyPolicy is the PROXY protocol stage of the client listeners: which
// listeners expect a header, which peers may send one, and how long they
// have to send it.
type proxyPolicy struct {
	trusted peerSet
	timeout time.Duration
	// listeners are the carriers that expect a header; nil means all.
	listeners map[carrier]bool
}

// newProxyPolicy takes the parsed gate.proxy_trusted_cidrs (shared with
// the WebSocket real-IP header, see newTrustedPeers) and parses
// gate.proxy_protocol_listeners. The PROXY stage without trusted peers
// would refuse every connection, so an empty set is a configuration
// error.
func newProxyPolicy(trusted peerSet, timeout time.Duration, listeners []string) (*proxyPolicy, error) {
	if timeout <= 0 {
		return nil, fmt.Errorf("server: gate.proxy_header_timeout %v must be positive", timeout)
	}
	p := &proxyPolicy{timeout: timeout}
	if len(trusted) == 0 {
		return nil, errors.New("server: gate.proxy_protocol is on but gate.proxy_trusted_cidrs is empty")
	}
	p.trusted = trusted
	if len(listeners) > 0 {
		p.listeners = make(map[carrier]bool, len(listeners))
		for _, l := range listeners {
			switch k := carrier(l); k {
			case carrierTCP, carrierTLS, carrierWS, carrierWSS:
				p.listeners[k] = true
			default:
				return nil, fmt.Errorf("server: gate.proxy_protocol_listeners entry %q: want tcp, tls, ws or wss", l)
			}
		}
	}
	return p, nil
}

// on reports whether connections accepted on a kind of listener start
// with a PROXY header.
func (p *proxyPolicy) on(kind carrier) bool {
	return p != nil && (p.listeners == nil || p.listeners[kind])
}

// trusts reports whether the socket peer may send a PROXY header.
func (p *proxyPolicy) trusts(addr net.Addr) bool { return p.trusted.contains(addr) }

// peerSet is a list of trusted networks: the balancers and proxies whose
// word on a client's address the gate believes.
type peerSet []netip.Prefix

// newTrustedPeers parses gate.proxy_trusted_cidrs once for both policies
// that believe a proxy's word on the client's address (the PROXY header
// and the WebSocket real-IP header). The list is parsed only when one of
// them is on, so a stale entry in an unused list does not stop the gate.
func newTrustedPeers(cfg *config.Gate) (peerSet, error) {
	if !cfg.ProxyProtocol && cfg.WSRealIPHeader == "" {
		return nil, nil
	}
	return parsePeerSet(cfg.ProxyTrustedCIDRs)
}

// parsePeerSet parses CIDRs; a bare address means that one host.
func parsePeerSet(cidrs []string) (peerSet, error) {
	var set peerSet
	for _, c := range cidrs {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		var pfx netip.Prefix
		var err error
		if strings.Contains(c, "/") {
			pfx, err = netip.ParsePrefix(c)
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(c)
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
		if err != nil {
			return nil, fmt.Errorf("server: gate.proxy_trusted_cidrs entry %q: %w", c, err)
		}
		set = append(set, pfx.Masked())
	}
	return set, nil
}

// contains reports whether a socket peer is inside the set.
func (p peerSet) contains(addr net.Addr) bool {
	a := addrOf(addr)
	if !a.IsValid() {
		return false
	}
	for _, pfx := range p {
		if pfx.Contains(a) {
			return true
		}
	}
	return false
}

// addrOf returns the IP of a socket address, IPv4-mapped addresses as IPv4.
func addrOf(addr net.Addr) netip.Addr {
	if a, ok := addr.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	if addr == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// armProxy starts the PROXY stage of an accepted socket, or, when its
// listener expects no header, takes the socket's peer as the client. The
// session starts only once the header names the client, so nothing (logs,
// logic's real_ip) ever sees the balancer's address. It reports false
// when the peer may not send a header and the socket is closing.
func (sk *socket) armProxy() bool {
	p := sk.l.proxy
	if p == nil {
		sk.realIP = remoteIP(sk.nc.RemoteAddr())
		return true
	}
	if !p.trusts(sk.nc.RemoteAddr()) {
		sk.proxyReject("untrusted source", nil)
		return false
	}
	sk.awaiting.Store(true)
	sk.proxyTimer.arm(p.timeout, func() {
		if sk.awaiting.Load() {
			sk.proxyReject("header timeout", nil)
		}
	})
	return true
}

// proxyReject closes a socket that failed the PROXY stage.
func (sk *socket) proxyReject(reason string, err error) {
	sk.l.metrics.ProxyRejects.Add(1)
	sk.l.log.Debug("proxy header refused, closing", zap.String("peer", remoteIP(sk.nc.RemoteAddr())),
		zap.String("reason", reason), zap.Error(err))
	_ = sk.nc.Close()
}

// readProxyHeader consumes the PROXY header from r without blocking and
// without reading past it, so whatever follows (frames, a TLS ClientHello,
// an HTTP upgrade) stays in r. A partial header is moved to sk.proxyBuf, since
// netpoll must never be left with unread bytes. It returns the client's
// address once the header is complete, "" while it is not.
func (sk *socket) readProxyHeader(r netpoll.Reader) (string, error) {
	avail := min(r.Len(), proxyproto.MaxV2Length-len(sk.proxyBuf))
	if avail == 0 {
		return "", nil
	}
	peek, err := r.Peek(avail)
	if err != nil {
		return "", fmt.Errorf("proxy: peek: %w", err)
	}
	// buf is always the connection's own memory, never netpoll's.
	buf := append(sk.proxyBuf, peek...)
	h, n, err := proxyproto.Parse(buf)
	if err != nil {
		return "", err
	}
	if n == 0 {
		if err := r.Skip(avail); err != nil {
			return "", fmt.Errorf("proxy: skip: %w", err)
		}
		sk.proxyBuf = buf
		return "", nil
	}
	if err := r.Skip(n - len(sk.proxyBuf)); err != nil {
		return "", fmt.Errorf("proxy: skip: %w", err)
	}
	sk.proxyBuf = nil
	if h.Local() {
		// LOCAL (a balancer's own check) or UNKNOWN: the socket's
		// address stands.
		return remoteIP(sk.nc.RemoteAddr()), nil
	}
	return h.Source.Addr().Unmap().String(), nil
}
