package frame

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ErrBadGzip reports a body flagged as gzip that does not inflate.
var ErrBadGzip = errors.New("frame: body is not valid gzip")

// ErrInflatedTooLarge reports a gzip body that inflates past the limit.
var ErrInflatedTooLarge = errors.New("frame: inflated body over the size limit")

var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	return w
}}

var gzipReaders sync.Pool

// Inflate returns the decompressed body, refusing more than limit bytes so a
// small frame cannot expand into a memory bomb.
func Inflate(body []byte, limit int) ([]byte, error) {
	var zr *gzip.Reader
	if v := gzipReaders.Get(); v != nil {
		zr = v.(*gzip.Reader)
		if err := zr.Reset(bytes.NewReader(body)); err != nil {
			gzipReaders.Put(zr)
			return nil, fmt.Errorf("%w: %v", ErrBadGzip, err)
		}
	} else {
		var err error
		if zr, err = gzip.NewReader(bytes.NewReader(body)); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadGzip, err)
		}
	}
	defer gzipReaders.Put(zr)
	out, err := io.ReadAll(io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadGzip, err)
	}
	if len(out) > limit {
		return nil, ErrInflatedTooLarge
	}
	return out, nil
}

// Compress gzips body when it is at least CompressThreshold bytes and the
// result is smaller. It reports whether the returned bytes are compressed.
func Compress(body []byte) ([]byte, bool) {
	if len(body) < CompressThreshold {
		return body, false
	}
	var buf bytes.Buffer
	buf.Grow(len(body) / 2)
	zw := gzipWriters.Get().(*gzip.Writer)
	zw.Reset(&buf)
	_, _ = zw.Write(body)
	err := zw.Close()
	gzipWriters.Put(zw)
	if err != nil || buf.Len() >= len(body) {
		return body, false
	}
	return buf.Bytes(), true
}
