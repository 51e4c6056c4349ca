package frame

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"testing"
)

type vector struct {
	Name       string `json:"name"`
	Hex        string `json:"hex"`
	Valid      bool   `json:"valid"`
	Command    uint16 `json:"command"`
	Flags      uint16 `json:"flags"`
	RequestID  string `json:"request_id"`
	SequenceID uint32 `json:"sequence_id"`
	Body       string `json:"body"`
	Why        string `json:"why"`
}

func loadVectors(t testing.TB) []vector {
	t.Helper()
	raw, err := os.ReadFile("testdata/frames.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Frames []vector `json:"frames"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Frames) == 0 {
		t.Fatal("no vectors")
	}
	return doc.Frames
}

func TestVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			raw, err := hex.DecodeString(v.Hex)
			if err != nil {
				t.Fatal(err)
			}
			h, body, n, err := Decode(raw, DefaultMaxFrameSize)
			if v.Valid {
				if err != nil || n != len(raw) {
					t.Fatalf("Decode = n %d err %v, want whole frame", n, err)
				}
				rid, _ := strconv.ParseUint(v.RequestID, 10, 64)
				if h.Command != v.Command || h.Flags != v.Flags || h.RequestID != rid || h.SequenceID != v.SequenceID {
					t.Fatalf("header %+v, want cmd %d flags %d rid %d seq %d", h, v.Command, v.Flags, rid, v.SequenceID)
				}
				if h.Gzip() {
					if body, err = Inflate(body, DefaultMaxFrameSize); err != nil {
						t.Fatal(err)
					}
				}
				if string(body) != v.Body {
					t.Fatalf("body %q, want %q", body, v.Body)
				}
				if !h.Gzip() {
					if re := Encode(h, body); !bytes.Equal(re, raw) {
						t.Fatalf("re-encoded %x, want %x", re, raw)
					}
				}
				return
			}
			switch v.Name {
			case "truncated header":
				if err != nil || n != 0 {
					t.Fatalf("truncated header: n %d err %v, want wait for more", n, err)
				}
			case "gzip flag on a body that is not gzip":
				if err != nil || n != len(raw) {
					t.Fatalf("framing must succeed: n %d err %v", n, err)
				}
				if _, err := Inflate(body, DefaultMaxFrameSize); !errors.Is(err, ErrBadGzip) {
					t.Fatalf("Inflate err %v, want ErrBadGzip", err)
				}
			default:
				if err == nil {
					t.Fatalf("Decode accepted an invalid frame (%s)", v.Why)
				}
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	good := Encode(Header{Command: 2, SequenceID: 1}, nil)
	over := Encode(Header{Command: 4}, nil)
	over[19], over[20], over[21], over[22] = 0, 1, 0, 0 // 65536 bytes of body
	tests := []struct {
		name    string
		in      []byte
		max     int
		wantErr error
		wantN   int
	}{
		{"empty", nil, 0, nil, 0},
		{"one byte", []byte{0x53}, 0, nil, 0},
		{"bad magic on two bytes", []byte{0x12, 0x50}, 0, ErrBadMagic, 0},
		{"bad version on three bytes", []byte{0x53, 0x50, 9}, 0, ErrBadVersion, 0},
		{"whole heartbeat", good, 0, nil, HeaderSize},
		{"heartbeat plus next header byte", append(append([]byte{}, good...), 0x53), 0, nil, HeaderSize},
		{"over default limit", over, 0, ErrTooLarge, 0},
		{"exactly at custom limit", Encode(Header{}, make([]byte, 77)), HeaderSize + 77, nil, HeaderSize + 77},
		{"one over custom limit", Encode(Header{}, make([]byte, 78)), HeaderSize + 77, ErrTooLarge, 0},
		{"body not yet complete", Encode(Header{}, make([]byte, 10))[:HeaderSize+5], 0, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, n, err := Decode(tt.in, tt.max)
			if !errors.Is(err, tt.wantErr) || n != tt.wantN {
				t.Fatalf("Decode = n %d err %v, want n %d err %v", n, err, tt.wantN, tt.wantErr)
			}
		})
	}
}

func TestDecodeStream(t *testing.T) {
	var stream []byte
	for i := 0; i < 50; i++ {
		stream = Append(stream, Header{Command: uint16(i), SequenceID: uint32(i)}, bytes.Repeat([]byte{'x'}, i*7))
	}
	// Feed the stream one byte at a time, as a slow socket would.
	var buf []byte
	got := 0
	for _, b := range stream {
		buf = append(buf, b)
		for {
			h, body, n, err := Decode(buf, 0)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if int(h.Command) != got || len(body) != got*7 {
				t.Fatalf("frame %d: cmd %d body %d", got, h.Command, len(body))
			}
			got++
			buf = buf[n:]
		}
	}
	if got != 50 || len(buf) != 0 {
		t.Fatalf("decoded %d frames, %d bytes left", got, len(buf))
	}
}

func TestCompressRoundTrip(t *testing.T) {
	small := []byte(`{"a":1}`)
	if out, ok := Compress(small); ok || !bytes.Equal(out, small) {
		t.Fatal("small body must not be compressed")
	}
	big := bytes.Repeat([]byte(`{"t":1,"text":"hello"}`), 100)
	out, ok := Compress(big)
	if !ok || len(out) >= len(big) {
		t.Fatal("repetitive body must compress")
	}
	back, err := Inflate(out, len(big))
	if err != nil || !bytes.Equal(back, big) {
		t.Fatalf("round trip: %v", err)
	}
	if _, err := Inflate(out, len(big)-1); !errors.Is(err, ErrInflatedTooLarge) {
		t.Fatalf("limit not enforced: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, v := range loadVectors(f) {
		raw, _ := hex.DecodeString(v.Hex)
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, body, n, err := Decode(data, DefaultMaxFrameSize)
		if err != nil {
			if n != 0 || body != nil {
				t.Fatal("error with consumed bytes")
			}
			return
		}
		if n == 0 {
			return
		}
		if n != HeaderSize+int(h.BodyLength) || n > len(data) || len(body) != int(h.BodyLength) {
			t.Fatalf("inconsistent n %d len %d body %d", n, h.BodyLength, len(body))
		}
		if re := Encode(h, body); !bytes.Equal(re, data[:n]) {
			t.Fatal("re-encode differs")
		}
		if h.Gzip() {
			_, _ = Inflate(body, DefaultMaxFrameSize)
		}
	})
}
