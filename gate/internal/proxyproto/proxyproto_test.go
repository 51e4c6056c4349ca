package proxyproto

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

// v2 builds a v2 header: command, family/protocol byte, address block and
// TLV bytes.
func v2(cmd, famProto byte, addrs []byte, tlvs []byte) []byte {
	b := append([]byte(nil), v2Sig...)
	b = append(b, 0x20|cmd, famProto, 0, 0)
	binary.BigEndian.PutUint16(b[14:16], uint16(len(addrs)+len(tlvs)))
	b = append(b, addrs...)
	return append(b, tlvs...)
}

func inet4(src, dst string, sport, dport uint16) []byte {
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	b := append(s[:], d[:]...)
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(b, sport), dport)
}

func inet6(src, dst string, sport, dport uint16) []byte {
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	b := append(s[:], d[:]...)
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(b, sport), dport)
}

func TestParse(t *testing.T) {
	tlv := []byte{0x04, 0x00, 0x03, 'a', 'b', 'c'} // PP2_TYPE_NOOP, skipped
	cases := []struct {
		name    string
		in      []byte
		source  string // "" = keep the socket's address
		version int
	}{
		{"v1 TCP4", []byte("PROXY TCP4 203.0.113.7 10.0.0.1 51234 8100\r\n"), "203.0.113.7:51234", 1},
		{"v1 TCP6", []byte("PROXY TCP6 2001:db8::7 2001:db8::1 443 8100\r\n"), "[2001:db8::7]:443", 1},
		{"v1 UNKNOWN", []byte("PROXY UNKNOWN\r\n"), "", 1},
		{"v1 UNKNOWN with addresses", []byte("PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n"), "", 1},
		{"v2 PROXY IPv4", v2(1, 0x11, inet4("203.0.113.7", "10.0.0.1", 51234, 8100), nil), "203.0.113.7:51234", 2},
		{"v2 PROXY IPv4 with TLVs", v2(1, 0x11, inet4("198.51.100.2", "10.0.0.1", 1, 8100), tlv), "198.51.100.2:1", 2},
		{"v2 PROXY IPv6", v2(1, 0x21, inet6("2001:db8::7", "2001:db8::1", 40000, 8100), tlv), "[2001:db8::7]:40000", 2},
		{"v2 LOCAL", v2(0, 0x00, nil, nil), "", 2},
		{"v2 LOCAL with addresses", v2(0, 0x11, inet4("1.2.3.4", "5.6.7.8", 1, 2), nil), "", 2},
		{"v2 PROXY UNSPEC", v2(1, 0x00, nil, nil), "", 2},
		{"v2 PROXY unix", v2(1, 0x31, make([]byte, 216), nil), "", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The client's first frame follows the header and must be left.
			in := append(append([]byte(nil), tc.in...), 0x53, 0x50, 0x01)
			h, n, err := Parse(in)
			if err != nil || n != len(tc.in) {
				t.Fatalf("Parse = n %d err %v, want n %d", n, err, len(tc.in))
			}
			if h.Version != tc.version {
				t.Fatalf("version %d, want %d", h.Version, tc.version)
			}
			if tc.source == "" {
				if !h.Local() {
					t.Fatalf("source %v, want the socket's", h.Source)
				}
			} else if h.Source.String() != tc.source {
				t.Fatalf("source %v, want %s", h.Source, tc.source)
			}
			// Every strict prefix asks for more bytes, never fails: the
			// gate feeds the header as it arrives.
			for k := range len(tc.in) {
				if _, n, err := Parse(tc.in[:k]); n != 0 || err != nil {
					t.Fatalf("prefix of %d bytes: n %d err %v", k, n, err)
				}
			}
		})
	}
}

func TestParseMalformed(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
	}{
		{"a Spark frame without a header", []byte{0x53, 0x50, 0x01, 0x00, 0x01}},
		{"TLS ClientHello without a header", []byte{0x16, 0x03, 0x01, 0x02, 0x00}},
		{"v1 lower case", []byte("proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n")},
		{"v1 bad protocol", []byte("PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n")},
		{"v1 missing port", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n")},
		{"v1 IPv6 under TCP4", []byte("PROXY TCP4 ::1 ::1 1 2\r\n")},
		{"v1 IPv4 under TCP6", []byte("PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n")},
		{"v1 port out of range", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n")},
		{"v1 port with leading zero", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n")},
		{"v1 bare LF", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n")},
		{"v1 truncated line then a frame", []byte("PROXY TCP4 1.2.3.4\r\n")},
		{"v1 too long", append([]byte("PROXY UNKNOWN "), make([]byte, MaxV1Length)...)},
		{"v2 bad signature", []byte("\r\n\r\n\x00\r\nQUIT!")},
		{"v2 version 1", append(append([]byte(nil), v2Sig...), 0x11, 0x11, 0, 0)},
		{"v2 command 2", v2(2, 0x11, inet4("1.2.3.4", "5.6.7.8", 1, 2), nil)},
		{"v2 family 4", v2(1, 0x41, nil, nil)},
		{"v2 IPv4 block too short", v2(1, 0x11, make([]byte, 11), nil)},
		{"v2 IPv6 block too short", v2(1, 0x21, make([]byte, 35), nil)},
		{"v2 over the size limit", v2(1, 0x11, make([]byte, MaxV2Length), nil)[:16]},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, n, err := Parse(tc.in); !errors.Is(err, ErrMalformed) || n != 0 {
				t.Fatalf("Parse(%q) = n %d err %v, want ErrMalformed", tc.in, n, err)
			}
		})
	}
}

func TestParseIncomplete(t *testing.T) {
	full := v2(1, 0x11, inet4("1.2.3.4", "5.6.7.8", 1, 2), nil)
	for _, in := range [][]byte{nil, []byte("P"), []byte("PROXY TCP4 1.2.3.4"), v2Sig[:5], full[:13], full[:16], full[:27]} {
		if _, n, err := Parse(in); n != 0 || err != nil {
			t.Fatalf("Parse(%q) = n %d err %v, want need-more", in, n, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("PROXY TCP4 203.0.113.7 10.0.0.1 51234 8100\r\nSP"))
	f.Add([]byte("PROXY TCP6 2001:db8::7 2001:db8::1 443 8100\r\n"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(v2(1, 0x11, inet4("203.0.113.7", "10.0.0.1", 51234, 8100), []byte{0x04, 0, 1, 0}))
	f.Add(v2(1, 0x21, inet6("2001:db8::7", "2001:db8::1", 1, 2), nil))
	f.Add(v2(0, 0x00, nil, nil))
	f.Add(v2(1, 0x31, make([]byte, 216), nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := Parse(b)
		if err != nil {
			if n != 0 || !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v with n %d", err, n)
			}
			return
		}
		if n == 0 {
			if len(b) >= MaxV2Length {
				t.Fatalf("%d bytes still incomplete", len(b))
			}
			return
		}
		if n > len(b) || n > MaxV2Length || (h.Version == 1 && n > MaxV1Length) {
			t.Fatalf("n %d of %d bytes, version %d", n, len(b), h.Version)
		}
		// The header alone parses the same, and none of its prefixes
		// fails: an incremental reader never sees a false error.
		h2, n2, err := Parse(b[:n])
		if err != nil || n2 != n || h2 != h {
			t.Fatalf("header alone: %v %d %v, first %v %d", h2, n2, err, h, n)
		}
		for k := range n {
			if _, n, err := Parse(b[:k]); n != 0 || err != nil {
				t.Fatalf("prefix %d: n %d err %v", k, n, err)
			}
		}
	})
}
