package media

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"

	"github.com/sparkim/spark/pkg/config"
)

// Opened is the store logic.media selects; Handler is non-nil when logic
// itself serves the store's URLs (the local store, under /media/ on the
// HTTP listener).
type Opened struct {
	Storage Storage
	Handler http.Handler
	// Check, when not nil, reports whether the store is usable (the S3
	// bucket exists): logic waits for it at start like for MySQL.
	Check func(ctx context.Context) error
}

// Open builds the store of cfg. httpAddr is logic's HTTP listener, the
// local store's default public address.
func Open(cfg config.Media, httpAddr string) (Opened, error) {
	switch cfg.Store {
	case config.MediaStoreLocal:
		secret := []byte(cfg.Secret)
		if len(secret) == 0 {
			// Each URL points at the logic that signed it, so a key per
			// process serves several logic processes sharing one dir.
			secret = make([]byte, 32)
			if _, err := rand.Read(secret); err != nil {
				return Opened{}, fmt.Errorf("media: local store secret: %w", err)
			}
		}
		base := cfg.PublicURL
		if base == "" {
			host, port, err := net.SplitHostPort(httpAddr)
			if err != nil {
				return Opened{}, fmt.Errorf("media: logic.http_addr %q: %w", httpAddr, err)
			}
			if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
				host = "127.0.0.1"
			}
			base = "http://" + net.JoinHostPort(host, port)
		}
		l, err := NewLocal(cfg.Dir, base, secret)
		if err != nil {
			return Opened{}, err
		}
		return Opened{Storage: l, Handler: l.Handler()}, nil
	case config.MediaStoreS3:
		s, err := NewS3(cfg.S3)
		if err != nil {
			return Opened{}, err
		}
		return Opened{Storage: s, Check: s.Check}, nil
	}
	return Opened{}, fmt.Errorf("media: unknown logic.media.store %q", cfg.Store)
}
