package media

import (
	"bytes"
	"testing"
)

func TestNewKeyHasKindPrefixAndRandomName(t *testing.T) {
	for _, k := range []Kind{KindImage, KindVoice, KindVideo, KindFile, KindAvatar} {
		a, err := NewKey(k)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := NewKey(k)
		if a == b {
			t.Fatalf("two keys of %s are equal: %s", k, a)
		}
		got, err := KeyKind(a)
		if err != nil || got != k {
			t.Fatalf("KeyKind(%s) = %s, %v; want %s", a, got, err, k)
		}
	}
	if _, err := NewKey("sticker"); err == nil {
		t.Fatal("NewKey accepted an unknown kind")
	}
}

func TestKeyKindRefusesKeysLogicDidNotMake(t *testing.T) {
	for _, key := range []string{
		"", "img/", "img/abc", "img/0123456789012345678901/x", "img/../../../../etc/passwd",
		"xyz/0123456789012345678901", "img/012345678901234567890.", "/img/0123456789012345678901",
		"img/01234567890123456789012", "42/img/0123456789012345678901",
	} {
		if k, err := KeyKind(key); err == nil {
			t.Errorf("KeyKind(%q) = %s, want an error", key, k)
		}
	}
}

func TestKindAcceptsItsContentTypes(t *testing.T) {
	for _, tc := range []struct {
		kind Kind
		ct   string
		want bool
	}{
		{KindImage, "image/png", true},
		{KindImage, "image/svg+xml", false}, // scripts inside: never an image message
		{KindImage, "text/html", false},
		{KindAvatar, "image/gif", false},
		{KindVoice, "audio/ogg", true},
		{KindVoice, "video/mp4", false},
		{KindVideo, "video/mp4", true},
		{KindFile, "application/pdf", true},
		{KindFile, "", false},
	} {
		if got := tc.kind.Accepts(tc.ct); got != tc.want {
			t.Errorf("%s.Accepts(%q) = %v, want %v", tc.kind, tc.ct, got, tc.want)
		}
	}
}

func TestSniffKnowsImagesVoiceAndVideo(t *testing.T) {
	ftyp := func(brand string) []byte {
		return append([]byte("\x00\x00\x00\x18ftyp"+brand), make([]byte, 12)...)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"png", pngBytes, "image/png"},
		{"jpeg", []byte("\xFF\xD8\xFF\xE0\x00\x10JFIF\x00"), "image/jpeg"},
		{"gif", []byte("GIF89a\x01\x00\x01\x00"), "image/gif"},
		{"webp", []byte("RIFF\x24\x00\x00\x00WEBPVP8 "), "image/webp"},
		{"amr", []byte("#!AMR\n\x3c"), "audio/amr"},
		{"aac adts", []byte{0xFF, 0xF1, 0x50, 0x80, 0x02, 0x1F, 0xFC}, "audio/aac"},
		{"mp3 without id3", []byte{0xFF, 0xFB, 0x90, 0x64, 0x00}, "audio/mpeg"},
		{"mp3 with id3", []byte("ID3\x03\x00\x00\x00\x00\x00\x00"), "audio/mpeg"},
		{"m4a", ftyp("M4A "), "audio/mp4"},
		{"mp4", ftyp("isom"), "video/mp4"},
		{"quicktime", ftyp("qt  "), "video/quicktime"},
		{"ogg opus", append([]byte("OggS\x00\x02"), append(make([]byte, 22), []byte("OpusHead")...)...), "audio/ogg"},
		{"webm", []byte("\x1A\x45\xDF\xA3\x9F\x42\x86\x81\x01\x42\xF7\x81\x01\x42\xF2\x81\x04\x42\xF3\x81\x08\x42\x82\x84webm"), "video/webm"},
		{"wav", []byte("RIFF\x24\x00\x00\x00WAVEfmt "), "audio/wave"},
		{"html pretending", []byte("<html><script>alert(1)</script>"), "text/html"},
		{"pdf", []byte("%PDF-1.7\n"), "application/pdf"},
		{"empty", nil, "text/plain"},
	} {
		if got := Sniff(tc.b); got != tc.want {
			t.Errorf("Sniff(%s) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func FuzzSniff(f *testing.F) {
	f.Add(pngBytes)
	f.Add([]byte("#!AMR\n"))
	f.Add([]byte{0xFF, 0xF1})
	f.Fuzz(func(t *testing.T, b []byte) {
		ct := Sniff(b)
		if ct == "" || bytes.ContainsAny([]byte(ct), ";\n") {
			t.Fatalf("Sniff gave %q", ct)
		}
	})
}

func FuzzKeyKind(f *testing.F) {
	f.Add("img/0123456789012345678901")
	f.Add("img/../x")
	f.Fuzz(func(t *testing.T, key string) {
		if k, err := KeyKind(key); err == nil {
			if len(key) != 26 || bytes.ContainsAny([]byte(key), ".\\") || prefixes[k] != key[:3] {
				t.Fatalf("KeyKind accepted %q as %s", key, k)
			}
		}
	})
}
