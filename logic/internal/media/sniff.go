package media

import (
	"bytes"
	"net/http"
)

// SniffLen is how many first bytes Sniff looks at.
const SniffLen = 512

// Sniff returns the content type the first bytes of an object show:
// net/http.DetectContentType (the WHATWG sniffing algorithm: images,
// WAV, MP3 with an ID3 tag, Ogg, MP4, WebM) completed with the voice
// formats it does not know (AMR, AAC in ADTS, MP3 without a tag, M4A,
// Opus in Ogg) and QuickTime. Parameters (e.g. "; charset=utf-8") are cut.
func Sniff(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("#!AMR")):
		return "audio/amr"
	case len(b) >= 2 && b[0] == 0xFF && (b[1]&0xF6) == 0xF0:
		// ADTS sync word, layer 00: AAC.
		return "audio/aac"
	case len(b) >= 2 && b[0] == 0xFF && (b[1]&0xE0) == 0xE0 && (b[1]&0x06) != 0:
		// MPEG audio frame sync with a layer set: MP3 without ID3.
		return "audio/mpeg"
	case len(b) >= 12 && bytes.Equal(b[4:8], []byte("ftyp")):
		switch string(b[8:12]) {
		case "M4A ", "M4B ":
			return "audio/mp4"
		case "qt  ":
			return "video/quicktime"
		}
		// Any other ISO base media brand (isom, mp41, mp42, avc1, 3gp…):
		// DetectContentType wants an "mp4" brand, which many encoders
		// leave out.
		return "video/mp4"
	case bytes.HasPrefix(b, []byte("OggS")) && bytes.Contains(b, []byte("OpusHead")),
		bytes.HasPrefix(b, []byte("OggS")) && bytes.Contains(b, []byte("\x01vorbis")):
		return "audio/ogg"
	}
	ct := http.DetectContentType(b)
	if i := bytes.IndexByte([]byte(ct), ';'); i >= 0 {
		ct = ct[:i]
	}
	if ct == "application/ogg" {
		return "audio/ogg"
	}
	return ct
}
