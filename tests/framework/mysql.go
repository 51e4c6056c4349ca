package framework

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MySQL is a private mariadbd for one test: its own datadir under the
// test's temporary directory, a loopback port and a unix socket, so a test
// can stop, kill and restart it without touching the shared server other
// tests use. Root has no password, like the shared development server.
type MySQL struct {
	// Addr is host:port of the TCP listener, the same across restarts.
	Addr string
	// Port is Addr's port.
	Port int
	// DataDir holds the databases; it survives Stop and Kill.
	DataDir string
	proc    *Process
}

// StartMySQL initialises a datadir and starts a private MariaDB on a free
// loopback port. It stops the server when the test ends. On this machine
// the datadir takes about 2.3 s and the start about 0.6 s.
func StartMySQL(t testing.TB) *MySQL {
	t.Helper()
	server, err := findBinary("mariadbd", "mysqld")
	if err != nil {
		t.Fatalf("no MariaDB server binary (apt-get install mariadb-server): %v", err)
	}
	installer, err := findBinary("mariadb-install-db", "mysql_install_db")
	if err != nil {
		t.Fatalf("no MariaDB datadir installer (apt-get install mariadb-server): %v", err)
	}
	m := &MySQL{Port: FreePort(t), DataDir: filepath.Join(t.TempDir(), "data")}
	m.Addr = "127.0.0.1:" + strconv.Itoa(m.Port)
	// A unix socket path must fit in 108 bytes; a test's TempDir, named
	// after the test, may not, so the socket gets a short directory.
	sockDir, err := os.MkdirTemp("", "spark-my-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })

	// Small InnoDB files and pool: the server holds one test's data, and
	// several may run beside the shared one on a small machine.
	light := []string{
		"--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M",
		"--innodb-log-buffer-size=1M", "--performance-schema=OFF",
		"--skip-name-resolve",
	}
	var user []string
	if os.Geteuid() == 0 {
		// mariadbd refuses to run as root unless told to.
		user = []string{"--user=root"}
	}
	install := append(append([]string{"--no-defaults", "--datadir=" + m.DataDir,
		"--auth-root-authentication-method=normal", "--skip-test-db"}, user...), light...)
	start := time.Now()
	if out, err := exec.Command(installer, install...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", filepath.Base(installer), err, out)
	}
	t.Logf("mysql: datadir initialised in %v", time.Since(start).Round(time.Millisecond))

	args := append(append([]string{"--no-defaults", "--datadir=" + m.DataDir,
		"--bind-address=127.0.0.1", "--port=" + strconv.Itoa(m.Port),
		"--socket=" + filepath.Join(sockDir, "mysql.sock"),
		"--pid-file=" + filepath.Join(sockDir, "mysql.pid"),
		"--skip-log-bin", "--max-connections=500",
		// Durability as in production: a committed row survives a kill.
		"--innodb-flush-log-at-trx-commit=1",
	}, user...), light...)
	m.proc = NewProcess(t, "mysql", server, args, nil)
	start = time.Now()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("mysql: %s ready in %v", m.Addr, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		_ = m.Resume() // a paused server would not hear the SIGTERM
		_ = m.proc.Stop()
	})
	return m
}

// findBinary looks the names up in PATH, then in /usr/sbin and /usr/bin,
// where Debian puts MariaDB's server and scripts.
func findBinary(names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	for _, n := range names {
		for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
			p := filepath.Join(dir, n)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("none of %v in PATH, /usr/sbin or /usr/bin", names)
}

// DSN is the server-level DSN (no database) for root over TCP.
func (m *MySQL) DSN() string {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = m.Addr
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	return cfg.FormatDSN()
}

// Start (re)starts the server on the same datadir and port and waits until
// it answers a query.
func (m *MySQL) Start() error {
	if _, err := m.proc.Launch(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg, err := mysql.ParseDSN(m.DSN())
	if err != nil {
		return fmt.Errorf("mysql dsn: %w", err)
	}
	cfg.Timeout = time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return fmt.Errorf("mysql on %s: %w", m.Addr, err)
	}
	defer db.Close()
	for ctx.Err() == nil {
		if !m.proc.Running() {
			return fmt.Errorf("mysql on %s exited during start:\n%s", m.Addr, m.proc.Tail(30))
		}
		if err := db.PingContext(ctx); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("mysql on %s did not start within 60s:\n%s", m.Addr, m.proc.Tail(30))
}

// Stop shuts the server down cleanly (SIGTERM, then waits); the data stays.
func (m *MySQL) Stop() error { return m.proc.Stop() }

// Kill kills the server (SIGKILL), as a crash would; InnoDB recovers the
// committed data on the next Start.
func (m *MySQL) Kill() error { return m.proc.Kill() }

// Pause freezes the server (SIGSTOP): its port still accepts connections
// but nothing answers, as with a hung server or a network partition.
func (m *MySQL) Pause() error { return m.freeze(syscall.SIGSTOP) }

// Resume lets a paused server go on (SIGCONT).
func (m *MySQL) Resume() error { return m.freeze(syscall.SIGCONT) }

func (m *MySQL) freeze(sig syscall.Signal) error {
	m.proc.mu.Lock()
	cmd := m.proc.cmd
	m.proc.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return fmt.Errorf("mysql on %s is not running", m.Addr)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("mysql on %s: %v: %w", m.Addr, sig, err)
	}
	if sig != syscall.SIGSTOP {
		return nil
	}
	// kill(2) returns before the stop takes hold: one thread must be
	// scheduled to begin the group stop, and on a busy machine a
	// connection thread can answer a query meanwhile. Pause returns only
	// once every thread is stopped.
	deadline := time.Now().Add(5 * time.Second)
	for {
		stopped, err := allThreadsStopped(cmd.Process.Pid)
		if err != nil {
			return fmt.Errorf("mysql on %s: %w", m.Addr, err)
		}
		if stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mysql on %s: not every thread stopped within 5s of SIGSTOP", m.Addr)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// allThreadsStopped reports whether every thread of pid is in the stopped
// state ('T') according to /proc.
func allThreadsStopped(pid int) (bool, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("threads of %d: %w", pid, err)
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			if os.IsNotExist(err) {
				continue // the thread ended
			}
			return false, fmt.Errorf("thread %s of %d: %w", task.Name(), pid, err)
		}
		// The state follows the parenthesised command name, which may
		// itself hold spaces or parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			return false, fmt.Errorf("thread %s of %d: unparsable stat %q", task.Name(), pid, stat)
		}
		if stat[i+2] != 'T' {
			return false, nil
		}
	}
	return true, nil
}

// Running reports whether the server process is alive.
func (m *MySQL) Running() bool { return m.proc.Running() }
