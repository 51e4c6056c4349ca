package ipkey

import "testing"

func TestOf(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"ipv4 as is", "203.0.113.7", "203.0.113.7"},
		{"ipv4-mapped ipv6 is the ipv4 address", "::ffff:203.0.113.7", "203.0.113.7"},
		{"ipv6 counts its /64", "2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"},
		{"two addresses of one /64 share a key", "2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"zone dropped", "fe80::1%eth0", "fe80::/64"},
		{"loopback v4", "127.0.0.3", "127.0.0.3"},
		{"unparsable kept", "not-an-ip", "not-an-ip"},
		{"empty kept", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Of(tt.in); got != tt.want {
				t.Fatalf("Of(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
