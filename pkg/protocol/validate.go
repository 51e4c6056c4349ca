package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Limits of message content and identifiers.
const (
	MaxContentBytes   = 64 << 10
	MaxClientMsgIDLen = 64
	MaxDeviceIDLen    = 64
)

// Message types (SEND_MESSAGE's message_type): the content's "t".
const (
	MessageText     = 1
	MessageImage    = 2
	MessageVoice    = 3
	MessageVideo    = 4
	MessageSticker  = 5
	MessageGIF      = 6
	MessageFile     = 7
	MessageLocation = 8
	MessageSystem   = 9
)

// Validation errors; callers map them to error codes.
var (
	ErrContentTooLarge = errors.New("content over 64 KiB")
	ErrBadContent      = errors.New("invalid content")
)

// ValidDeviceID reports whether s is 1–64 of [A-Za-z0-9._-].
func ValidDeviceID(s string) bool {
	if len(s) == 0 || len(s) > MaxDeviceIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidClientMsgID reports whether s is a usable idempotency key: 1–64
// printable ASCII characters.
func ValidClientMsgID(s string) bool {
	if len(s) == 0 || len(s) > MaxClientMsgIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// CanonicalContent validates content against messageType and returns its
// compact form, which is what is stored and compared for idempotency.
// content must be a JSON object whose "t" equals messageType (1–9), and the
// compact form must be at most 64 KiB.
func CanonicalContent(messageType int, content []byte) ([]byte, error) {
	if messageType < 1 || messageType > 9 {
		return nil, fmt.Errorf("%w: message_type %d is not 1–9", ErrBadContent, messageType)
	}
	if len(content) == 0 {
		return nil, fmt.Errorf("%w: content missing", ErrBadContent)
	}
	var compact bytes.Buffer
	compact.Grow(len(content))
	if err := json.Compact(&compact, content); err != nil {
		return nil, fmt.Errorf("%w: content is not JSON", ErrBadContent)
	}
	b := compact.Bytes()
	if len(b) > MaxContentBytes {
		return nil, ErrContentTooLarge
	}
	if b[0] != '{' {
		return nil, fmt.Errorf("%w: content must be a JSON object", ErrBadContent)
	}
	var head struct {
		T json.RawMessage `json:"t"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%w: content is not a JSON object", ErrBadContent)
	}
	if head.T == nil {
		return nil, fmt.Errorf("%w: content has no \"t\"", ErrBadContent)
	}
	if t, err := strconv.Atoi(string(head.T)); err != nil || t != messageType {
		return nil, fmt.Errorf("%w: content \"t\" %s does not equal message_type %d", ErrBadContent, head.T, messageType)
	}
	return b, nil
}
