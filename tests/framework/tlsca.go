package framework

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sparkim/spark/pkg/testca"
)

// TestCA is a throw-away certificate authority made per test (pkg/testca),
// so no private key ever lives in the repository.
type TestCA struct {
	*testca.CA
}

// NewTestCA makes a CA valid for an hour.
func NewTestCA(t testing.TB) *TestCA { return &TestCA{testca.New(t)} }

// GateTLS names a gate certificate and key in PEM files.
type GateTLS struct {
	CertFile, KeyFile string
}

// IssueServer writes a server certificate for 127.0.0.1 and the given
// DNS names, with its key, into dir.
func (ca *TestCA) IssueServer(t testing.TB, dir string, serial int64, names ...string) GateTLS {
	t.Helper()
	g := GateTLS{
		CertFile: filepath.Join(dir, fmt.Sprintf("gate-%d.crt", serial)),
		KeyFile:  filepath.Join(dir, fmt.Sprintf("gate-%d.key", serial)),
	}
	ca.WriteServer(t, g.CertFile, g.KeyFile, serial, names...)
	return g
}
