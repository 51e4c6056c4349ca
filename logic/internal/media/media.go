// Package media provides the media domain's storage half: the kinds of
// media and their limits, the object keys logic chooses, content sniffing
// and the Storage interface with its local implementation (files under a
// data directory, served by logic with HMAC-signed, expiring URLs).
package media

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strings"
	"time"

	"github.com/sparkim/spark/pkg/config"
)

// Kind is what a media object is for; it decides the key prefix, the
// size limit and the content types accepted.
type Kind string

// The media kinds.
const (
	KindImage  Kind = "image"
	KindVoice  Kind = "voice"
	KindVideo  Kind = "video"
	KindFile   Kind = "file"
	KindAvatar Kind = "avatar"
)

// prefixes maps each kind to its key prefix. Short and fixed: a key says
// what it holds and nothing about who uploaded it.
var prefixes = map[Kind]string{
	KindImage: "img", KindVoice: "voc", KindVideo: "vid", KindFile: "fil", KindAvatar: "avt",
}

// types are the content types each kind accepts; a file takes any.
var types = map[Kind][]string{
	KindImage:  {"image/jpeg", "image/png", "image/gif", "image/webp"},
	KindAvatar: {"image/jpeg", "image/png", "image/webp"},
	KindVoice:  {"audio/ogg", "audio/mpeg", "audio/mp4", "audio/aac", "audio/amr", "audio/wave", "audio/webm"},
	KindVideo:  {"video/mp4", "video/webm", "video/quicktime"},
}

// ParseKind returns the kind named s.
func ParseKind(s string) (Kind, error) {
	k := Kind(s)
	if _, ok := prefixes[k]; !ok {
		return "", fmt.Errorf("media: unknown kind %q", s)
	}
	return k, nil
}

// Accepts reports whether kind k may hold content type ct.
func (k Kind) Accepts(ct string) bool {
	allowed, ok := types[k]
	if !ok {
		return k == KindFile && ct != ""
	}
	for _, a := range allowed {
		if a == ct {
			return true
		}
	}
	return false
}

// Limits are the size limits of each kind.
type Limits config.MediaLimits

// Max returns the largest object of kind k in bytes.
func (l Limits) Max(k Kind) int64 {
	switch k {
	case KindImage:
		return l.Image
	case KindVoice:
		return l.Voice
	case KindVideo:
		return l.Video
	case KindAvatar:
		return l.Avatar
	default:
		return l.File
	}
}

const (
	base62   = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	nameSize = 22 // 22 base62 digits: ~131 random bits, not guessable
)

var keyPattern = regexp.MustCompile(`^(img|voc|vid|fil|avt)/[0-9A-Za-z]{22}$`)

// NewKey returns a fresh object key for kind k: its prefix, a slash and
// 22 random base62 digits.
func NewKey(k Kind) (string, error) {
	p, ok := prefixes[k]
	if !ok {
		return "", fmt.Errorf("media: unknown kind %q", k)
	}
	var b strings.Builder
	b.WriteString(p)
	b.WriteByte('/')
	max := big.NewInt(int64(len(base62)))
	for i := 0; i < nameSize; i++ {
		n, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", fmt.Errorf("media: random key: %w", err)
		}
		b.WriteByte(base62[n.Int64()])
	}
	return b.String(), nil
}

// KeyKind returns the kind of a key logic made, or an error for anything
// else (which also keeps path separators and dots out of file names).
func KeyKind(key string) (Kind, error) {
	if !keyPattern.MatchString(key) {
		return "", fmt.Errorf("media: malformed key %q", key)
	}
	p := key[:3]
	for k, kp := range prefixes {
		if kp == p {
			return k, nil
		}
	}
	return "", fmt.Errorf("media: malformed key %q", key)
}

// Upload is how a client puts one object: an HTTP request to URL with
// Method, the Headers given (which the signature binds) and, for POST, a
// multipart form of Fields followed by the file.
type Upload struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
	Fields  map[string]string `json:"fields,omitempty"`
	Expires time.Time         `json:"-"`
}

// Object is what the store knows of an uploaded object.
type Object struct {
	Size        int64
	ContentType string
}

// ErrNotFound is returned by Head and Sniff for a key with no object.
var ErrNotFound = errors.New("media: no such object")

// Storage keeps media objects. Uploads and downloads go straight between
// the client and the store by presigned URL; logic only signs, checks and
// records.
type Storage interface {
	// PresignUpload returns a request that uploads exactly size bytes of
	// contentType to key, valid for ttl.
	PresignUpload(ctx context.Context, key string, size int64, contentType string, ttl time.Duration) (Upload, error)
	// PresignDownload returns a URL that reads key, valid for ttl.
	PresignDownload(ctx context.Context, key string, ttl time.Duration) (string, time.Time, error)
	// Head returns the object's size and stored content type.
	Head(ctx context.Context, key string) (Object, error)
	// ReadHead returns up to n first bytes of the object, for sniffing.
	ReadHead(ctx context.Context, key string, n int64) ([]byte, error)
}
