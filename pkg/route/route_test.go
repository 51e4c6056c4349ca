package route

import "testing"

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Entry
	}{
		{"three fields, written before the real IP was recorded", "gate-1|18446744073709551615|1764590000000",
			Entry{GateID: "gate-1", ConnID: 18446744073709551615, SinceMs: 1764590000000}},
		{"ipv4", "gate-1|42|1764590000000|203.0.113.7", Entry{GateID: "gate-1", ConnID: 42, SinceMs: 1764590000000, RealIP: "203.0.113.7"}},
		{"ipv6", "g|1|2|2001:db8::1", Entry{GateID: "g", ConnID: 1, SinceMs: 2, RealIP: "2001:db8::1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.in)
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			if got.String() != tc.in {
				t.Fatalf("String() = %q, want %q", got.String(), tc.in)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	for _, bad := range []string{"", "g", "g|1", "|1|2", "g|x|2", "g|1|y", "g|-1|2", "g|1|2|", "g|1|2|a|b"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestKeyOmitsRealIP(t *testing.T) {
	e := Entry{GateID: "g", ConnID: 1, SinceMs: 2, RealIP: "203.0.113.7"}
	if e.Key() != "g|1|2" {
		t.Fatalf("Key() = %q", e.Key())
	}
}

func FuzzParse(f *testing.F) {
	f.Add("gate-1|42|1764590000000")
	f.Add("gate-1|42|1764590000000|203.0.113.7")
	f.Add("g|1|2|2001:db8::1")
	f.Add("g|1|2|")
	f.Add("g||")
	f.Add("|||")
	f.Fuzz(func(t *testing.T, s string) {
		e, err := Parse(s)
		if err != nil {
			return
		}
		back, err := Parse(e.String())
		if err != nil || back != e {
			t.Fatalf("%q -> %+v -> %q (%v)", s, e, e.String(), err)
		}
		if k, err := Parse(e.Key()); err != nil || k.RealIP != "" || k.GateID != e.GateID || k.ConnID != e.ConnID || k.SinceMs != e.SinceMs {
			t.Fatalf("%q: Key() %q parses to %+v (%v)", s, e.Key(), k, err)
		}
	})
}
