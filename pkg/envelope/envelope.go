// Package envelope builds the response body every answer and push carries:
// {"code":"0","msg":"ok","request_id":"<11 base62>","data":{}}.
package envelope

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sparkim/spark/pkg/errcode"
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// RequestIDLen is the length of a server request id.
const RequestIDLen = 11

// IDSource issues request ids: 11 base62 characters, unique per process run
// and unpredictable across processes (random prefix, counter suffix).
type IDSource struct {
	prefix uint64
	n      atomic.Uint64
}

// NewIDSource returns an IDSource seeded from crypto/rand.
func NewIDSource() *IDSource {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &IDSource{prefix: binary.BigEndian.Uint64(b[:])}
}

// Next returns a new request id.
func (s *IDSource) Next() string {
	// 62^11 ≈ 5.2e19 > 2^64, so any uint64 fits in 11 digits.
	v := s.prefix ^ (s.n.Add(1) * 0x9E3779B97F4A7C15)
	var out [RequestIDLen]byte
	for i := RequestIDLen - 1; i >= 0; i-- {
		out[i] = base62[v%62]
		v /= 62
	}
	return string(out[:])
}

// Response is the decoded envelope, used by clients.
type Response struct {
	Code      errcode.Code    `json:"code"`
	Msg       string          `json:"msg"`
	RequestID string          `json:"request_id"`
	Data      json.RawMessage `json:"data"`
}

// OK builds a success envelope around data, which must already be JSON (nil
// means {}).
func OK(requestID string, data []byte) []byte {
	return build(make([]byte, 0, 64+len(data)), errcode.OK, errcode.OK.Message(), requestID, data)
}

// Fail builds a failure envelope; data is always {}.
func Fail(requestID string, code errcode.Code, msg string) []byte {
	if msg == "" {
		msg = code.Message()
	}
	return build(make([]byte, 0, 96), code, msg, requestID, nil)
}

// FailRetry builds a failure envelope whose data tells the client how long
// to wait before trying again: {"retry_after_ms":N}, rounded up to a whole
// millisecond. A retryAfter ≤ 0 builds Fail's envelope.
func FailRetry(requestID string, code errcode.Code, msg string, retryAfter time.Duration) []byte {
	if retryAfter <= 0 {
		return Fail(requestID, code, msg)
	}
	if msg == "" {
		msg = code.Message()
	}
	ms := (retryAfter + time.Millisecond - 1) / time.Millisecond
	data := strconv.AppendInt([]byte(`{"retry_after_ms":`), int64(ms), 10)
	return build(make([]byte, 0, 128), code, msg, requestID, append(data, '}'))
}

// RetryAfter is the data of a failure envelope that carries a retry-after
// hint (FailRetry).
type RetryAfter struct {
	RetryAfterMs int64 `json:"retry_after_ms"`
}

// Rejected is the data of a 40302 failure envelope: the business
// server's own code and reason for refusing the message.
type Rejected struct {
	RejectCode   int64  `json:"reject_code"`
	RejectReason string `json:"reject_reason"`
}

// FromError builds the failure envelope for err (see errcode.Of), with
// its retry-after hint or the business's rejection when it has one.
func FromError(requestID string, err error) []byte {
	c, m := errcode.Of(err)
	if r := errcode.RejectionOf(err); r != nil {
		if m == "" {
			m = c.Message()
		}
		// Written without HTML escaping, as every server JSON (docs/protocol.md §3).
		var data bytes.Buffer
		enc := json.NewEncoder(&data)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(Rejected{RejectCode: r.Code, RejectReason: r.Reason})
		return build(make([]byte, 0, 128+data.Len()), c, m, requestID, bytes.TrimSuffix(data.Bytes(), []byte("\n")))
	}
	return FailRetry(requestID, c, m, errcode.RetryAfterOf(err))
}

func build(b []byte, code errcode.Code, msg, requestID string, data []byte) []byte {
	b = append(b, `{"code":"`...)
	b = append(b, code...)
	b = append(b, `","msg":`...)
	b = strconv.AppendQuote(b, msg)
	b = append(b, `,"request_id":"`...)
	b = append(b, requestID...)
	b = append(b, `","data":`...)
	if len(data) == 0 {
		b = append(b, "{}"...)
	} else {
		b = append(b, data...)
	}
	return append(b, '}')
}
