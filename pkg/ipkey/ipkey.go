// Package ipkey names the source a per-address limit counts: the gate's
// connection caps and logic's rate-limit buckets use the same key, so "one
// address" means the same thing in both.
package ipkey

import "net/netip"

// Of returns the key of the client address ip (as the gate reports it,
// without port): an IPv4 address (or an IPv4-mapped IPv6 one) as dotted
// quad, an IPv6 address as its /64 prefix ("2001:db8:1:2::/64"), since one
// subscriber gets a whole /64 and picks any address in it at will, and
// anything unparsable as it is (an empty ip stays empty).
func Of(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, err := a.WithZone("").Prefix(64)
	if err != nil {
		return ip
	}
	return p.String()
}
