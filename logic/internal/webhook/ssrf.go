package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"syscall"
)

// ErrPrivateAddress is wrapped when an endpoint's host is, or resolves to,
// an address a business server on the internet never has: loopback,
// private, link-local, shared (CGNAT), unspecified, multicast or another
// reserved range. Such a URL would let an API caller make logic probe its
// own network (SSRF).
var ErrPrivateAddress = errors.New("webhook: endpoint address is not public")

// blocked are the ranges refused besides what netip classifies.
var blocked = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (CGNAT)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
}

// PublicAddr reports whether a is an address an endpoint may have.
func PublicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	for _, p := range blocked {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// CheckURL refuses what is not an http or https URL with a host, and,
// unless allowPrivate, a host that is or resolves to a non-public
// address. The dialer checks again at every connection (DNS may answer
// differently later).
func CheckURL(ctx context.Context, raw string, allowPrivate bool, resolver *net.Resolver) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("webhook: url %q: %w", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("webhook: url %q: want http:// or https:// and a host", raw)
	}
	if u.User != nil {
		return fmt.Errorf("webhook: url %q: credentials in the URL are not allowed", raw)
	}
	if len(raw) > 2048 {
		return fmt.Errorf("webhook: url is %d bytes, at most 2048", len(raw))
	}
	if allowPrivate {
		return nil
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		if !PublicAddr(a) {
			return fmt.Errorf("%w: %s", ErrPrivateAddress, host)
		}
		return nil
	}
	addrs, err := resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("webhook: resolve %s: %w", host, err)
	}
	for _, a := range addrs {
		if !PublicAddr(a) {
			return fmt.Errorf("%w: %s resolves to %s", ErrPrivateAddress, host, a)
		}
	}
	return nil
}

// dialControl refuses a connection to a non-public address; it runs after
// DNS resolution, on the address actually dialled.
func dialControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook: dial %s: %w", address, err)
	}
	if !PublicAddr(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrPrivateAddress, ap.Addr())
	}
	return nil
}
