package media

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Local is the embedded store: objects are files under a directory and
// logic serves them on its own HTTP listener (Handler) with the same
// presigned semantics as S3: a URL carries its expiry and an HMAC-SHA256
// over method, key, expiry and, for uploads, size and content type, so
// a URL can be neither stretched nor pointed at another key, method,
// size or type.
type Local struct {
	dir    string
	base   string
	secret []byte
	now    func() time.Time
}

// NewLocal returns a local store keeping files under dir, whose URLs
// start with base (e.g. "http://127.0.0.1:9095") and are signed with
// secret.
func NewLocal(dir, base string, secret []byte) (*Local, error) {
	if len(secret) < 16 {
		return nil, errors.New("media: local store secret must be at least 16 bytes")
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("media: local store dir: %w", err)
	}
	return &Local{dir: dir, base: strings.TrimRight(base, "/"), secret: secret, now: time.Now}, nil
}

func (l *Local) sign(method, key string, size int64, ct string, exp int64) string {
	m := hmac.New(sha256.New, l.secret)
	// Newline-separated: no field can contain one (keys are base62,
	// content types are checked before signing, sizes are numbers).
	fmt.Fprintf(m, "%s\n%s\n%d\n%s\n%d", method, key, size, ct, exp)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (l *Local) url(method, key string, size int64, ct string, exp time.Time) string {
	q := url.Values{}
	q.Set("e", strconv.FormatInt(exp.Unix(), 10))
	if method == http.MethodPut {
		q.Set("n", strconv.FormatInt(size, 10))
		q.Set("t", ct)
	}
	q.Set("s", l.sign(method, key, size, ct, exp.Unix()))
	return l.base + "/media/" + key + "?" + q.Encode()
}

// PresignUpload implements Storage: a PUT of exactly size bytes with
// Content-Type contentType.
func (l *Local) PresignUpload(_ context.Context, key string, size int64, contentType string, ttl time.Duration) (Upload, error) {
	if _, err := KeyKind(key); err != nil {
		return Upload{}, err
	}
	if strings.ContainsAny(contentType, "\n\r") {
		return Upload{}, fmt.Errorf("media: bad content type %q", contentType)
	}
	exp := l.now().Add(ttl)
	return Upload{
		Method: http.MethodPut, URL: l.url(http.MethodPut, key, size, contentType, exp),
		Headers: map[string]string{"Content-Type": contentType}, Expires: exp,
	}, nil
}

// PresignDownload implements Storage.
func (l *Local) PresignDownload(_ context.Context, key string, ttl time.Duration) (string, time.Time, error) {
	if _, err := KeyKind(key); err != nil {
		return "", time.Time{}, err
	}
	exp := l.now().Add(ttl)
	return l.url(http.MethodGet, key, 0, "", exp), exp, nil
}

type localMeta struct {
	ContentType string `json:"content_type"`
}

func (l *Local) path(key string) string { return filepath.Join(l.dir, filepath.FromSlash(key)) }

// Head implements Storage.
func (l *Local) Head(_ context.Context, key string) (Object, error) {
	if _, err := KeyKind(key); err != nil {
		return Object{}, err
	}
	fi, err := os.Stat(l.path(key))
	if errors.Is(err, os.ErrNotExist) {
		return Object{}, ErrNotFound
	}
	if err != nil {
		return Object{}, fmt.Errorf("media: head %s: %w", key, err)
	}
	raw, err := os.ReadFile(l.path(key) + ".meta")
	if err != nil {
		return Object{}, fmt.Errorf("media: head %s: %w", key, err)
	}
	var m localMeta
	if err := json.Unmarshal(raw, &m); err != nil {
		return Object{}, fmt.Errorf("media: head %s: %w", key, err)
	}
	return Object{Size: fi.Size(), ContentType: m.ContentType}, nil
}

// ReadHead implements Storage.
func (l *Local) ReadHead(_ context.Context, key string, n int64) ([]byte, error) {
	if _, err := KeyKind(key); err != nil {
		return nil, err
	}
	f, err := os.Open(l.path(key))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("media: read %s: %w", key, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, n))
	if err != nil {
		return nil, fmt.Errorf("media: read %s: %w", key, err)
	}
	return b, nil
}

// Handler serves the signed URLs: PUT /media/KEY uploads, GET reads.
// Refusals are plain HTTP statuses, as from S3: 403 for a bad or expired
// signature, 400 for a size or type other than the signed ones, 409 for
// a key already written, 404 for none.
func (l *Local) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/media/", l.serve)
	return mux
}

func (l *Local) serve(w http.ResponseWriter, r *http.Request) {
	// Any origin: the signature is the credential, not the page that
	// holds it, and a browser app is served from its own origin.
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	if r.Method == http.MethodOptions {
		h.Set("Access-Control-Allow-Methods", "GET, HEAD, PUT")
		h.Set("Access-Control-Allow-Headers", "Content-Type")
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	key := strings.TrimPrefix(r.URL.Path, "/media/")
	if _, err := KeyKind(key); err != nil {
		http.Error(w, "no such key", http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	exp, err := strconv.ParseInt(q.Get("e"), 10, 64)
	if err != nil {
		http.Error(w, "missing expiry", http.StatusForbidden)
		return
	}
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	var size int64
	ct := ""
	if method == http.MethodPut {
		if size, err = strconv.ParseInt(q.Get("n"), 10, 64); err != nil {
			http.Error(w, "missing size", http.StatusForbidden)
			return
		}
		ct = q.Get("t")
	}
	want := l.sign(method, key, size, ct, exp)
	if !hmac.Equal([]byte(want), []byte(q.Get("s"))) {
		http.Error(w, "signature does not match", http.StatusForbidden)
		return
	}
	if l.now().Unix() > exp {
		http.Error(w, "request has expired", http.StatusForbidden)
		return
	}
	switch method {
	case http.MethodGet:
		l.get(w, r, key)
	case http.MethodPut:
		l.put(w, r, key, size, ct)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (l *Local) get(w http.ResponseWriter, r *http.Request, key string) {
	obj, err := l.Head(r.Context(), key)
	if errors.Is(err, ErrNotFound) {
		http.Error(w, "no such key", http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, "read failed", http.StatusInternalServerError)
		return
	}
	f, err := os.Open(l.path(key))
	if err != nil {
		http.Error(w, "read failed", http.StatusInternalServerError)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", obj.ContentType)
	// Served as a download, never rendered as a page of this origin.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "sandbox")
	http.ServeContent(w, r, "", time.Time{}, f)
}

func (l *Local) put(w http.ResponseWriter, r *http.Request, key string, size int64, ct string) {
	if r.ContentLength != size {
		http.Error(w, fmt.Sprintf("content length must be %d", size), http.StatusBadRequest)
		return
	}
	if r.Header.Get("Content-Type") != ct {
		http.Error(w, fmt.Sprintf("content type must be %s", ct), http.StatusBadRequest)
		return
	}
	p := l.path(key)
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		http.Error(w, "write failed", http.StatusInternalServerError)
		return
	}
	if _, err := os.Stat(p); err == nil {
		// A key is written once: what logic sniffed and recorded stays
		// what is downloaded.
		http.Error(w, "key already written", http.StatusConflict)
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".up-*")
	if err != nil {
		http.Error(w, "write failed", http.StatusInternalServerError)
		return
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, io.LimitReader(r.Body, size+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil || n != size {
		http.Error(w, fmt.Sprintf("body must be %d bytes", size), http.StatusBadRequest)
		return
	}
	meta, _ := json.Marshal(localMeta{ContentType: ct})
	if err := os.WriteFile(p+".meta", meta, 0o640); err != nil {
		http.Error(w, "write failed", http.StatusInternalServerError)
		return
	}
	// The meta file first: an object file never exists without it.
	if err := os.Link(tmp.Name(), p); err != nil {
		http.Error(w, "key already written", http.StatusConflict)
		return
	}
	w.WriteHeader(http.StatusOK)
}
