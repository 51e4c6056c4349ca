package framework

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TiDBServerEnv names the tidb-server binary (deploy/tidb/build-tidb.sh
// builds it; make test-tidb sets it). When it is set, every private
// server a test asks for (StartMySQL, Options.PrivateMySQL) is a
// tidb-server on unistore in place of mariadbd, so the same tests run on
// TiDB's SQL layer and its pessimistic transactions.
const TiDBServerEnv = "SPARK_TEST_TIDB_SERVER"

// StartTiDB starts a private tidb-server with the in-process unistore
// store on free loopback ports (SQL and status) and stops it when the test
// ends. Its data lives in the test's temporary directory and survives
// Stop and Kill, like a private MariaDB's. Ready in about 3 s here.
func StartTiDB(t testing.TB) *MySQL {
	t.Helper()
	bin := os.Getenv(TiDBServerEnv)
	if bin == "" {
		t.Fatalf("%s is not set: build tidb-server with deploy/tidb/build-tidb.sh (make test-tidb does)", TiDBServerEnv)
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		t.Fatalf("%s=%s: not a tidb-server binary: %v", TiDBServerEnv, bin, err)
	}
	m := &MySQL{Port: FreePort(t), DataDir: filepath.Join(t.TempDir(), "tidb")}
	m.Addr = "127.0.0.1:" + strconv.Itoa(m.Port)
	// The socket path must fit in 108 bytes: a short directory.
	sockDir, err := os.MkdirTemp("", "spark-tidb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	args := []string{
		"-store", "unistore", "-path", m.DataDir,
		"-host", "127.0.0.1", "-P", strconv.Itoa(m.Port),
		"-status", strconv.Itoa(FreePort(t)), "-status-host", "127.0.0.1",
		"-socket", filepath.Join(sockDir, "tidb.sock"),
		"-log-file", filepath.Join(filepath.Dir(m.DataDir), "tidb.log"),
		// Its slow log defaults to the working directory: keep it beside.
		"-log-slow-query", filepath.Join(filepath.Dir(m.DataDir), "tidb-slow.log"),
	}
	m.proc = NewProcess(t, "tidb", bin, args, nil)
	start := time.Now()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("tidb: %s ready in %v", m.Addr, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		_ = m.Resume()
		_ = m.proc.Stop()
	})
	return m
}

// StartPrivateServer starts the private SQL server of a test: tidb-server
// when TiDBServerEnv is set, mariadbd otherwise.
func StartPrivateServer(t testing.TB) *MySQL {
	t.Helper()
	if os.Getenv(TiDBServerEnv) != "" {
		return StartTiDB(t)
	}
	return StartMySQL(t)
}
