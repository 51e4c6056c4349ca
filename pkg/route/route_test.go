package route

import "testing"

func TestRoundTrip(t *testing.T) {
	e := Entry{GateID: "gate-1", ConnID: 18446744073709551615, SinceMs: 1764590000000}
	got, err := Parse(e.String())
	if err != nil || got != e {
		t.Fatalf("got %+v err %v", got, err)
	}
	for _, bad := range []string{"", "g", "g|1", "|1|2", "g|x|2", "g|1|y", "g|-1|2"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("gate-1|42|1764590000000")
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
	})
}
