package media

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// pngBytes is the start of a real PNG: its signature and IHDR chunk.
var pngBytes = append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"), make([]byte, 40)...)

func newLocal(t *testing.T) (*Local, *httptest.Server) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	l, err := NewLocal(t.TempDir(), "http://"+srv.Listener.Addr().String(), []byte("0123456789abcdef0123"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = l.Handler()
	srv.Start()
	t.Cleanup(srv.Close)
	return l, srv
}

func do(t *testing.T, method, u string, body []byte, ct string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestLocalStoreUploadHeadSniffDownload(t *testing.T) {
	l, _ := newLocal(t)
	ctx := context.Background()
	key, err := NewKey(KindImage)
	if err != nil {
		t.Fatal(err)
	}
	up, err := l.PresignUpload(ctx, key, int64(len(pngBytes)), "image/png", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Head(ctx, key); err != ErrNotFound {
		t.Fatalf("Head before upload = %v, want ErrNotFound", err)
	}
	if code, body := do(t, up.Method, up.URL, pngBytes, up.Headers["Content-Type"]); code != http.StatusOK {
		t.Fatalf("upload: %d %s", code, body)
	}
	obj, err := l.Head(ctx, key)
	if err != nil || obj.Size != int64(len(pngBytes)) || obj.ContentType != "image/png" {
		t.Fatalf("Head = %+v, %v", obj, err)
	}
	head, err := l.ReadHead(ctx, key, SniffLen)
	if err != nil || Sniff(head) != "image/png" {
		t.Fatalf("sniffed %q, %v", Sniff(head), err)
	}
	u, _, err := l.PresignDownload(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	code, body := do(t, http.MethodGet, u, nil, "")
	if code != http.StatusOK || !bytes.Equal(body, pngBytes) {
		t.Fatalf("download: %d, %d bytes", code, len(body))
	}
	if code, _ := do(t, up.Method, up.URL, pngBytes, "image/png"); code != http.StatusConflict {
		t.Fatalf("second upload to the same key: %d, want 409", code)
	}
}

func TestLocalStoreRefusesRequestsOtherThanSigned(t *testing.T) {
	l, _ := newLocal(t)
	ctx := context.Background()
	key, _ := NewKey(KindImage)
	other, _ := NewKey(KindImage)
	size := int64(len(pngBytes))
	up, _ := l.PresignUpload(ctx, key, size, "image/png", time.Minute)
	l.now = func() time.Time { return time.Now().Add(-2 * time.Minute) }
	expired, _ := l.PresignUpload(ctx, key, size, "image/png", time.Minute)
	expiredGet, _, _ := l.PresignDownload(ctx, key, time.Minute)
	l.now = time.Now
	get, _, _ := l.PresignDownload(ctx, key, time.Minute)
	for _, tc := range []struct {
		name   string
		method string
		url    string
		body   []byte
		ct     string
		want   int
	}{
		{"expired upload URL", http.MethodPut, expired.URL, pngBytes, "image/png", http.StatusForbidden},
		{"expired download URL", http.MethodGet, expiredGet, nil, "", http.StatusForbidden},
		{"body shorter than the signed size", http.MethodPut, up.URL, pngBytes[:10], "image/png", http.StatusBadRequest},
		{"body longer than the signed size", http.MethodPut, up.URL, append(pngBytes, 0), "image/png", http.StatusBadRequest},
		{"content type other than signed", http.MethodPut, up.URL, pngBytes, "image/gif", http.StatusBadRequest},
		{"signed size changed in the URL", http.MethodPut, strings.Replace(up.URL, "n=", "n=1", 1), pngBytes, "image/png", http.StatusForbidden},
		{"signed type changed in the URL", http.MethodPut, strings.Replace(up.URL, "t=image%2Fpng", "t=image%2Fgif", 1), pngBytes, "image/gif", http.StatusForbidden},
		{"upload URL pointed at another key", http.MethodPut, strings.Replace(up.URL, key, other, 1), pngBytes, "image/png", http.StatusForbidden},
		{"download URL used to upload", http.MethodPut, get, pngBytes, "image/png", http.StatusForbidden},
		{"upload URL used to download", http.MethodGet, up.URL, nil, "", http.StatusForbidden},
		{"no signature", http.MethodGet, strings.Split(get, "&s=")[0], nil, "", http.StatusForbidden},
		{"path outside the key scheme", http.MethodGet, strings.Replace(get, key, "img/../../etc/passwd", 1), nil, "", http.StatusNotFound},
		{"download before upload", http.MethodGet, get, nil, "", http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := do(t, tc.method, tc.url, tc.body, tc.ct); code != tc.want {
				t.Fatalf("%s: %d %s, want %d", tc.name, code, body, tc.want)
			}
		})
	}
	if _, err := l.Head(ctx, key); err != ErrNotFound {
		t.Fatalf("after refused uploads Head = %v, want ErrNotFound", err)
	}
}

func TestNewLocalRefusesShortSecret(t *testing.T) {
	if _, err := NewLocal(t.TempDir(), "http://x", []byte("short")); err == nil {
		t.Fatal("NewLocal accepted a 5-byte secret")
	}
}
