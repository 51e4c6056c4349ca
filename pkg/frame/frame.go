// Package frame implements the Spark binary frame: a fixed 23-byte
// big-endian header followed by a JSON body that may be gzipped.
//
//	0  Magic      u16  0x5350 ("SP")
//	2  Version    u8   1
//	3  Command    u16
//	5  Flags      u16  bit0 = body is gzip
//	7  RequestID  u64  client's pairing number, echoed back
//	15 SequenceID u32  request/response pairing
//	19 BodyLength u32  bytes of body as sent
//	23 Body
//
// The decoder works on a caller-owned buffer and never copies the body, so
// a server can decode straight out of its socket buffer.
package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
)

const (
	// HeaderSize is the fixed size of a frame header.
	HeaderSize = 23
	// Magic is "SP".
	Magic uint16 = 0x5350
	// Version is the only protocol version.
	Version uint8 = 1
	// FlagGzip marks a gzip-compressed body.
	FlagGzip uint16 = 1 << 0
	// DefaultMaxFrameSize is the default limit of a whole frame, header included.
	DefaultMaxFrameSize = 64 << 10
	// CompressThreshold is the smallest body worth trying to gzip.
	CompressThreshold = 512
)

// Errors that make a stream of frames unreadable: the connection must close.
var (
	ErrBadMagic   = errors.New("frame: bad magic")
	ErrBadVersion = errors.New("frame: unsupported version")
	ErrTooLarge   = errors.New("frame: over the size limit")
)

// Header is a decoded frame header.
type Header struct {
	Command    uint16
	Flags      uint16
	RequestID  uint64
	SequenceID uint32
	BodyLength uint32
}

// Gzip reports whether the body is gzip-compressed.
func (h Header) Gzip() bool { return h.Flags&FlagGzip != 0 }

// ParseHeader decodes and validates the header at the start of b, which must
// hold at least HeaderSize bytes. maxFrame limits header plus body; 0 means
// DefaultMaxFrameSize.
func ParseHeader(b []byte, maxFrame int) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("frame: header needs %d bytes, have %d", HeaderSize, len(b))
	}
	if binary.BigEndian.Uint16(b[0:2]) != Magic {
		return Header{}, ErrBadMagic
	}
	if b[2] != Version {
		return Header{}, ErrBadVersion
	}
	h := Header{
		Command:    binary.BigEndian.Uint16(b[3:5]),
		Flags:      binary.BigEndian.Uint16(b[5:7]),
		RequestID:  binary.BigEndian.Uint64(b[7:15]),
		SequenceID: binary.BigEndian.Uint32(b[15:19]),
		BodyLength: binary.BigEndian.Uint32(b[19:23]),
	}
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrameSize
	}
	if uint64(h.BodyLength)+HeaderSize > uint64(maxFrame) {
		return Header{}, ErrTooLarge
	}
	return h, nil
}

// Decode reads one frame from the start of buf. When buf does not yet hold a
// whole frame it returns n == 0 and a nil error: wait for more bytes. On
// success body aliases buf and n is the number of bytes the frame used. A
// non-nil error means the stream is broken and must be closed; it is reported
// as soon as the header is complete, without waiting for the body.
func Decode(buf []byte, maxFrame int) (h Header, body []byte, n int, err error) {
	if len(buf) < HeaderSize {
		// Reject garbage early: a bad magic or version is visible before the
		// whole header has arrived.
		if len(buf) >= 2 && binary.BigEndian.Uint16(buf[0:2]) != Magic {
			return Header{}, nil, 0, ErrBadMagic
		}
		if len(buf) >= 3 && buf[2] != Version {
			return Header{}, nil, 0, ErrBadVersion
		}
		return Header{}, nil, 0, nil
	}
	h, err = ParseHeader(buf, maxFrame)
	if err != nil {
		return Header{}, nil, 0, err
	}
	total := HeaderSize + int(h.BodyLength)
	if len(buf) < total {
		return h, nil, 0, nil
	}
	return h, buf[HeaderSize:total:total], total, nil
}

// PutHeader writes h into the first HeaderSize bytes of dst.
func PutHeader(dst []byte, h Header) {
	_ = dst[HeaderSize-1]
	binary.BigEndian.PutUint16(dst[0:2], Magic)
	dst[2] = Version
	binary.BigEndian.PutUint16(dst[3:5], h.Command)
	binary.BigEndian.PutUint16(dst[5:7], h.Flags)
	binary.BigEndian.PutUint64(dst[7:15], h.RequestID)
	binary.BigEndian.PutUint32(dst[15:19], h.SequenceID)
	binary.BigEndian.PutUint32(dst[19:23], h.BodyLength)
}

// Append appends the frame of h and body to dst; h.BodyLength is set from body.
func Append(dst []byte, h Header, body []byte) []byte {
	h.BodyLength = uint32(len(body))
	n := len(dst)
	dst = append(dst, make([]byte, HeaderSize)...)
	PutHeader(dst[n:], h)
	return append(dst, body...)
}

// Encode returns a new buffer holding the frame of h and body.
func Encode(h Header, body []byte) []byte {
	return Append(make([]byte, 0, HeaderSize+len(body)), h, body)
}
