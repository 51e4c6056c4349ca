package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// fileStamp identifies one version of a file well enough to notice that it
// was replaced (by a write, a rename or a symlink swap, as Kubernetes
// secret volumes do).
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, fmt.Errorf("certs: stat %s: %w", path, err)
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}

// certStore holds the gate's current certificate and reloads it when its
// files change. Handshakes read it through GetCertificate, so a reload
// affects only connections that start afterwards: live ones keep the
// session they negotiated. A pair that does not load (unreadable, not PEM,
// key not matching) keeps the previous one and is logged as an error, so
// a half-finished rotation never takes TLS down.
type certStore struct {
	certFile, keyFile string
	log               *zap.Logger
	metrics           *Metrics

	cur atomic.Pointer[tls.Certificate]
	// certStamp and keyStamp are the versions last tried; only the
	// watcher goroutine touches them after newCertStore.
	certStamp, keyStamp fileStamp
}

// newCertStore loads the pair once; at start-up a bad pair is an error,
// since there is no previous certificate to keep.
func newCertStore(certFile, keyFile string, log *zap.Logger, m *Metrics) (*certStore, error) {
	c := &certStore{certFile: certFile, keyFile: keyFile, log: log, metrics: m}
	cs, err := stampOf(certFile)
	if err != nil {
		return nil, err
	}
	ks, err := stampOf(keyFile)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certs: load %s and %s: %w", certFile, keyFile, err)
	}
	c.cur.Store(&cert)
	c.certStamp, c.keyStamp = cs, ks
	return c, nil
}

// getCertificate is the tls.Config hook: every handshake takes the
// certificate current at its start.
func (c *certStore) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.cur.Load(), nil
}

// check reloads the pair if either file changed since the last attempt.
// It reports whether a new certificate was installed.
func (c *certStore) check() (bool, error) {
	cs, err := stampOf(c.certFile)
	if err != nil {
		return false, err
	}
	ks, err := stampOf(c.keyFile)
	if err != nil {
		return false, err
	}
	if cs == c.certStamp && ks == c.keyStamp {
		return false, nil
	}
	// Remember what was tried, so a bad pair is reported once, not on
	// every tick; the next change of either file (say, the key written
	// after the certificate) tries again.
	c.certStamp, c.keyStamp = cs, ks
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return false, fmt.Errorf("certs: reload %s and %s: %w", c.certFile, c.keyFile, err)
	}
	c.cur.Store(&cert)
	return true, nil
}

// watch checks the files every interval (gate.tls_reload_interval,
// positive) until ctx ends.
func (c *certStore) watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := c.check()
		switch {
		case err != nil:
			c.metrics.CertReloadFailures.Add(1)
			c.log.Error("tls certificate reload failed, keeping the current one", zap.Error(err))
		case changed:
			c.metrics.CertReloads.Add(1)
			fields := []zap.Field{zap.String("cert_file", c.certFile)}
			if leaf := c.cur.Load().Leaf; leaf != nil {
				fields = append(fields, zap.String("subject", leaf.Subject.String()), zap.Time("not_after", leaf.NotAfter))
			}
			c.log.Info("tls certificate reloaded", fields...)
		}
	}
}
