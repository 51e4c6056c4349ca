// Package proxyproto parses the PROXY protocol header (v1 text and v2
// binary, haproxy.org/download/2.9/doc/proxy-protocol.txt) an L4 balancer
// sends before the client's bytes, so the gate sees the client's address
// instead of the balancer's.
//
// Parse works on whatever bytes have arrived, like frame.Decode: it reports
// "need more" without consuming anything, and the length of a complete
// header, so a non-blocking reader (netpoll) can take exactly the header and
// leave what follows (frames, or a TLS ClientHello) untouched.
package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
)

const (
	// MaxV1Length is the longest v1 line, "\r\n" included (spec §2.1).
	MaxV1Length = 107
	// MaxV2Length bounds a v2 header, TLVs included. The spec allows
	// 16+65535 bytes; balancers send addresses plus a few small TLVs, and
	// buffering 64 KiB per unauthenticated connection is not worth it.
	MaxV2Length = 16 + 2048
)

var (
	v1Prefix = []byte("PROXY ")
	// v2Sig is the 12-byte v2 signature.
	v2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")
)

// ErrMalformed is wrapped by every error Parse returns: the bytes are not a
// valid PROXY header and the connection must close.
var ErrMalformed = errors.New("proxyproto: malformed header")

// Header is a parsed PROXY header.
type Header struct {
	// Version is 1 or 2.
	Version int
	// Source is the client's address. It is not valid when the header
	// says to keep the socket's address: v1 UNKNOWN, v2 LOCAL (a
	// balancer's health check), or a v2 family other than IPv4/IPv6.
	Source netip.AddrPort
}

// Local reports whether the connection's own address stands.
func (h Header) Local() bool { return !h.Source.IsValid() }

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Parse reads a PROXY header at the start of b. n == 0 with a nil error
// means b is a valid prefix of a header: wait for more bytes. Otherwise n is
// the header's length (the bytes after it belong to the client's stream).
// Any error wraps ErrMalformed, reported as early as the bytes show it.
func Parse(b []byte) (h Header, n int, err error) {
	if len(b) == 0 {
		return Header{}, 0, nil
	}
	switch b[0] {
	case v1Prefix[0]:
		return parseV1(b)
	case v2Sig[0]:
		return parseV2(b)
	}
	return Header{}, 0, malformed("no PROXY signature")
}

func parseV1(b []byte) (Header, int, error) {
	if k := min(len(b), len(v1Prefix)); !bytes.Equal(b[:k], v1Prefix[:k]) {
		return Header{}, 0, malformed("bad v1 prefix")
	}
	end := bytes.IndexByte(b[:min(len(b), MaxV1Length)], '\n')
	if end < 0 {
		if len(b) >= MaxV1Length {
			return Header{}, 0, malformed("v1 line longer than %d bytes", MaxV1Length)
		}
		return Header{}, 0, nil
	}
	if end == 0 || b[end-1] != '\r' {
		return Header{}, 0, malformed("v1 line not ended by CRLF")
	}
	fields := bytes.Split(b[len(v1Prefix):end-1], []byte(" "))
	n := end + 1
	switch string(fields[0]) {
	case "UNKNOWN":
		// The rest of the line is to be ignored (spec §2.1).
		return Header{Version: 1}, n, nil
	case "TCP4", "TCP6":
	default:
		return Header{}, 0, malformed("v1 protocol %q", fields[0])
	}
	if len(fields) != 5 {
		return Header{}, 0, malformed("v1 line has %d fields, want 5", len(fields))
	}
	src, err := netip.ParseAddr(string(fields[1]))
	if err != nil {
		return Header{}, 0, malformed("v1 source address: %v", err)
	}
	dst, err := netip.ParseAddr(string(fields[2]))
	if err != nil {
		return Header{}, 0, malformed("v1 destination address: %v", err)
	}
	v4 := string(fields[0]) == "TCP4"
	if src.Is4() != v4 || dst.Is4() != v4 || src.Zone() != "" || dst.Zone() != "" {
		return Header{}, 0, malformed("v1 address family does not match %s", fields[0])
	}
	sport, err := v1Port(fields[3])
	if err != nil {
		return Header{}, 0, err
	}
	if _, err := v1Port(fields[4]); err != nil {
		return Header{}, 0, err
	}
	return Header{Version: 1, Source: netip.AddrPortFrom(src, sport)}, n, nil
}

// v1Port parses a decimal port without sign or leading zeros.
func v1Port(f []byte) (uint16, error) {
	if len(f) == 0 || len(f) > 5 || (len(f) > 1 && f[0] == '0') || f[0] < '0' || f[0] > '9' {
		return 0, malformed("v1 port %q", f)
	}
	p, err := strconv.ParseUint(string(f), 10, 16)
	if err != nil {
		return 0, malformed("v1 port %q", f)
	}
	return uint16(p), nil
}

// v2 command, family and transport values (spec §2.2).
const (
	v2CmdLocal  = 0x0
	v2CmdProxy  = 0x1
	v2FamUnspec = 0x0
	v2FamInet   = 0x1
	v2FamInet6  = 0x2
	v2FamUnix   = 0x3
)

func parseV2(b []byte) (Header, int, error) {
	if k := min(len(b), len(v2Sig)); !bytes.Equal(b[:k], v2Sig[:k]) {
		return Header{}, 0, malformed("bad v2 signature")
	}
	if len(b) < 16 {
		if len(b) > 12 && b[12]>>4 != 2 {
			return Header{}, 0, malformed("v2 version %d", b[12]>>4)
		}
		return Header{}, 0, nil
	}
	verCmd, famProto := b[12], b[13]
	if verCmd>>4 != 2 {
		return Header{}, 0, malformed("v2 version %d", verCmd>>4)
	}
	cmd, fam, proto := verCmd&0x0f, famProto>>4, famProto&0x0f
	if cmd > v2CmdProxy {
		return Header{}, 0, malformed("v2 command %d", cmd)
	}
	if fam > v2FamUnix || proto > 2 {
		return Header{}, 0, malformed("v2 family/protocol 0x%02x", famProto)
	}
	n := 16 + int(binary.BigEndian.Uint16(b[14:16]))
	if n > MaxV2Length {
		return Header{}, 0, malformed("v2 header of %d bytes, limit %d", n, MaxV2Length)
	}
	if len(b) < n {
		return Header{}, 0, nil
	}
	h := Header{Version: 2}
	if cmd == v2CmdLocal {
		return h, n, nil
	}
	body := b[16:n]
	// TLVs after the addresses are skipped: the gate needs none of them.
	switch fam {
	case v2FamInet:
		if len(body) < 12 {
			return Header{}, 0, malformed("v2 IPv4 addresses need 12 bytes, have %d", len(body))
		}
		ip := netip.AddrFrom4([4]byte(body[0:4]))
		h.Source = netip.AddrPortFrom(ip, binary.BigEndian.Uint16(body[8:10]))
	case v2FamInet6:
		if len(body) < 36 {
			return Header{}, 0, malformed("v2 IPv6 addresses need 36 bytes, have %d", len(body))
		}
		ip := netip.AddrFrom16([16]byte(body[0:16]))
		h.Source = netip.AddrPortFrom(ip, binary.BigEndian.Uint16(body[32:34]))
	case v2FamUnspec, v2FamUnix:
		// No IP to take: keep the socket's address (spec §2.2).
	}
	return h, n, nil
}
