package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCanonicalContent(t *testing.T) {
	big := `{"t":1,"text":"` + strings.Repeat("a", MaxContentBytes) + `"}`
	tests := []struct {
		name    string
		typ     int
		in      string
		want    string
		wantErr error
	}{
		{"text", 1, `{"t":1,"text":"hi"}`, `{"t":1,"text":"hi"}`, nil},
		{"compacts", 1, "{ \"t\" : 1 ,\n \"text\":\"a b\" }", `{"t":1,"text":"a b"}`, nil},
		{"image", 2, `{"t":2,"key":"img/1.png","w":10}`, `{"t":2,"key":"img/1.png","w":10}`, nil},
		{"system", 9, `{"t":9,"text":"x"}`, `{"t":9,"text":"x"}`, nil},
		{"type zero", 0, `{"t":0}`, "", ErrBadContent},
		{"type ten", 10, `{"t":10}`, "", ErrBadContent},
		{"t mismatch", 1, `{"t":2,"text":"hi"}`, "", ErrBadContent},
		{"t as string", 1, `{"t":"1"}`, "", ErrBadContent},
		{"t fraction", 1, `{"t":1.5}`, "", ErrBadContent},
		{"no t", 1, `{"text":"hi"}`, "", ErrBadContent},
		{"array", 1, `[1]`, "", ErrBadContent},
		{"string", 1, `"x"`, "", ErrBadContent},
		{"invalid json", 1, `{"t":1`, "", ErrBadContent},
		{"empty", 1, ``, "", ErrBadContent},
		{"too large", 1, big, "", ErrContentTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalContent(tt.typ, []byte(tt.in))
			if !errors.Is(err, tt.wantErr) || (err == nil && string(got) != tt.want) {
				t.Fatalf("got %q err %v, want %q err %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestValidDeviceID(t *testing.T) {
	tests := map[string]bool{
		"3f2a9c1e-7d4b-4e8a-9c61-2b5d8f0a1c3e": true,
		"a":                                    true,
		"dev.1_x-Y":                            true,
		"":                                     false,
		strings.Repeat("a", 64):                true,
		strings.Repeat("a", 65):                false,
		"has space":                            false,
		"slash/":                               false,
		"ü":                                    false,
	}
	for in, want := range tests {
		if ValidDeviceID(in) != want {
			t.Errorf("%q: want %v", in, want)
		}
	}
}

func TestValidClientMsgID(t *testing.T) {
	tests := map[string]bool{"c-1": true, "": false, "a b": false, strings.Repeat("x", 65): false, "\x00": false}
	for in, want := range tests {
		if ValidClientMsgID(in) != want {
			t.Errorf("%q: want %v", in, want)
		}
	}
}

func FuzzCanonicalContent(f *testing.F) {
	f.Add(1, []byte(`{"t":1,"text":"hi"}`))
	f.Add(2, []byte(`{"t":2,"key":"k"}`))
	f.Add(1, []byte(`{"t":1.0}`))
	f.Add(1, []byte(`[]`))
	f.Fuzz(func(t *testing.T, typ int, in []byte) {
		out, err := CanonicalContent(typ, in)
		if err != nil {
			return
		}
		// Canonical form is a fixed point and always valid for the same type.
		again, err := CanonicalContent(typ, out)
		if err != nil || string(again) != string(out) {
			t.Fatalf("not idempotent: %q -> %q (%v)", out, again, err)
		}
	})
}

// Marshal keeps `<`, `>` and `&` as one byte each, in strings and in raw
// content alike, and adds no trailing newline.
func TestMarshalWithoutHTMLEscaping(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"string", map[string]string{"text": "<b>&</b>"}, `{"text":"<b>&</b>"}`},
		{"raw content", Message{MessageType: 1, Content: json.RawMessage(`{"t":1,"text":"<&>"}`)}, `"content":{"t":1,"text":"<&>"}`},
		{"control characters still escaped", map[string]string{"text": "a\nb\"c"}, `{"text":"a\nb\"c"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte(tc.want)) || bytes.HasSuffix(b, []byte("\n")) {
				t.Fatalf("got %s, want it to contain %s and no trailing newline", b, tc.want)
			}
		})
	}
}
