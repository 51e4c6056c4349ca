package framework

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/go-sql-driver/mysql" // the MySQL driver for database/sql

	"github.com/sparkim/spark/pkg/token"
)

// Secrets of every test cluster.
const (
	ClusterSecret = "e2e-cluster-secret"
	JWTSecret     = "e2e-jwt-secret"
	APIKey        = "e2e-api-key"
)

// Options shape a cluster.
type Options struct {
	Gates, Logics, Delivers int
	Partitions              int
	// Env is added to every Spark process (e.g. SPARK_FAILPOINTS).
	Env []string
	// GateEnv, LogicEnv and DeliverEnv are added to that kind only.
	GateEnv, LogicEnv, DeliverEnv []string
	// GateTLS, when set, gives every gate a TLS listener (GateProc.TLSAddr)
	// and a WebSocket-over-TLS listener (GateProc.WSSAddr) with this
	// certificate.
	GateTLS *GateTLS
	// PrivateMySQL gives the cluster its own mariadbd (Cluster.MySQL) in
	// place of the shared server, so a test can stop, kill and restart it
	// (a tidb-server on unistore when SPARK_TEST_TIDB_SERVER is set).
	PrivateMySQL bool
	// Galera puts the cluster's database on a private three-node MariaDB
	// Galera cluster (Cluster.Galera); logic writes to node 1 until
	// FailOverTo moves it.
	Galera bool
	// Unstarted leaves every process unstarted: the test starts them
	// (Process.Launch, Start) in the order it checks, e.g. gates before
	// logic.
	Unstarted bool
}

// GateProc is a gate with its addresses.
type GateProc struct {
	*Process
	ID, TCPAddr, PushAddr, AdminAddr string
	// TLSAddr is the TLS listener and WSSAddr the WebSocket-over-TLS
	// one (wss://WSSAddr/ws), "" unless Options.GateTLS is set.
	TLSAddr, WSSAddr string
	// WSAddr is the WebSocket listener (ws://WSAddr/ws); every gate has
	// one on a free port, so gates never collide on the default.
	WSAddr string
}

// LogicProc is a logic process with its addresses.
type LogicProc struct {
	*Process
	GRPCAddr, HTTPAddr, AdminAddr string
	MachineID                     int
}

// DeliverProc is a deliver process.
type DeliverProc struct {
	*Process
	ID, AdminAddr string
}

// Cluster is a running system: private Redis, a fresh MySQL database,
// logic, deliver and gate processes.
type Cluster struct {
	t     testing.TB
	Bins  Binaries
	Redis *Redis
	// MySQL is the private server when Options.PrivateMySQL is set, nil
	// when the cluster uses the shared one.
	MySQL *MySQL
	// Galera is the cluster's Galera cluster when Options.Galera is set;
	// Writer is the index of the node logic writes to.
	Galera   *Galera
	Writer   int
	DBName   string
	MySQLDSN string
	Config   string
	Logics   []*LogicProc
	Delivers []*DeliverProc
	Gates    []*GateProc
	db       *sql.DB
}

// NewCluster starts a cluster and stops it when the test ends.
func NewCluster(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Gates == 0 {
		o.Gates = 2
	}
	if o.Logics == 0 {
		o.Logics = 1
	}
	if o.Delivers == 0 {
		o.Delivers = 1
	}
	if o.Partitions == 0 {
		o.Partitions = 8
	}
	bins, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, Bins: bins}
	// A Redis Cluster's nodes start now and join after the database is
	// made: their 2 s writable delay passes meanwhile.
	var redisReady func()
	c.Redis, redisReady = launchRedis(t)
	switch {
	case o.Galera:
		c.Galera = StartGalera(t, 3)
	case o.PrivateMySQL:
		c.MySQL = StartPrivateServer(t)
	}
	c.createDatabase()

	dir := t.TempDir()
	c.Config = filepath.Join(dir, "im.yaml")
	yaml := fmt.Sprintf(`log: {level: info}
cluster: {secret: %s}
queue: {partitions: %d}
logic:
  mysql: {dsn: "%s", max_open_conns: 24, max_idle_conns: 24}
  redis: %s
  jwt_secret: %s
  api_keys: [%s]
  media: {dir: "%s"}
deliver:
  redis: %s
  lease_ttl: 3s
`, ClusterSecret, o.Partitions, c.MySQLDSN, c.Redis.ConfigYAML(), JWTSecret, APIKey, filepath.Join(dir, "media"), c.Redis.ConfigYAML())
	if err := os.WriteFile(c.Config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c.migrate()
	redisReady()

	port := func() string { return "127.0.0.1:" + strconv.Itoa(FreePort(t)) }
	var logicAddrs []string
	for i := 0; i < o.Logics; i++ {
		l := &LogicProc{GRPCAddr: port(), HTTPAddr: port(), AdminAddr: port(), MachineID: i + 1}
		env := append(append([]string{
			"IM_LOGIC_GRPC_ADDR=" + l.GRPCAddr, "IM_LOGIC_HTTP_ADDR=" + l.HTTPAddr, "IM_LOGIC_ADMIN_ADDR=" + l.AdminAddr,
			"IM_LOGIC_MACHINE_ID=" + strconv.Itoa(l.MachineID),
		}, o.Env...), o.LogicEnv...)
		l.Process = NewProcess(t, fmt.Sprintf("logic-%d", i+1), bins.Logic, []string{"-config", c.Config}, env)
		c.Logics = append(c.Logics, l)
		logicAddrs = append(logicAddrs, l.GRPCAddr)
	}
	for i := 0; i < o.Delivers; i++ {
		d := &DeliverProc{ID: fmt.Sprintf("deliver-%d", i+1), AdminAddr: port()}
		env := append(append([]string{"IM_DELIVER_ID=" + d.ID, "IM_DELIVER_ADMIN_ADDR=" + d.AdminAddr,
			"IM_DELIVER_LOGIC_ADDRS=" + strings.Join(logicAddrs, ",")}, o.Env...), o.DeliverEnv...)
		d.Process = NewProcess(t, d.ID, bins.Deliver, []string{"-config", c.Config}, env)
		c.Delivers = append(c.Delivers, d)
	}
	for i := 0; i < o.Gates; i++ {
		g := &GateProc{ID: fmt.Sprintf("gate-%d", i+1), TCPAddr: port(), PushAddr: port(), AdminAddr: port(), WSAddr: port()}
		env := append(append([]string{
			"IM_GATE_ID=" + g.ID, "IM_GATE_TCP_ADDR=" + g.TCPAddr, "IM_GATE_PUSH_ADDR=" + g.PushAddr,
			"IM_GATE_ADMIN_ADDR=" + g.AdminAddr, "IM_GATE_LOGIC_ADDRS=" + strings.Join(logicAddrs, ","),
			"IM_GATE_WS_ADDR=" + g.WSAddr,
			// Connections left open at a test's end are kicked at once
			// when the cluster stops, not over the 10 s default window;
			// a test of the window sets it in GateEnv (the last wins).
			"IM_GATE_SHUTDOWN_KICK_WINDOW=0s",
		}, o.Env...), o.GateEnv...)
		if o.GateTLS != nil {
			g.TLSAddr, g.WSSAddr = port(), port()
			env = append(env, "IM_GATE_TLS_ADDR="+g.TLSAddr, "IM_GATE_WSS_ADDR="+g.WSSAddr,
				"IM_GATE_TLS_CERT_FILE="+o.GateTLS.CertFile, "IM_GATE_TLS_KEY_FILE="+o.GateTLS.KeyFile)
		}
		g.Process = NewProcess(t, g.ID, bins.Gate, []string{"-config", c.Config}, env)
		c.Gates = append(c.Gates, g)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	t.Cleanup(c.stopAll)
	if o.Unstarted {
		return c
	}
	// Logic first, as before: the others dial it at start. Then deliver
	// and the gates together, each waited for in its own goroutine, so a
	// cluster takes the slowest start, not their sum.
	ps := c.all()
	for _, group := range [][]*Process{ps[:len(c.Logics)], ps[len(c.Logics):]} {
		if err := startTogether(ctx, group); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// startTogether starts the processes at once and waits until each is
// ready; the error names every one that is not.
func startTogether(ctx context.Context, ps []*Process) error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.Start(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Cluster) all() []*Process {
	var ps []*Process
	for _, l := range c.Logics {
		ps = append(ps, l.Process)
	}
	for _, d := range c.Delivers {
		ps = append(ps, d.Process)
	}
	for _, g := range c.Gates {
		ps = append(ps, g.Process)
	}
	return ps
}

func (c *Cluster) stopAll() {
	ps := c.all()
	for i := len(ps) - 1; i >= 0; i-- {
		if err := ps[i].Stop(); err != nil {
			c.t.Logf("%s: %v", ps[i].Name, err)
		}
	}
	if c.t.Failed() {
		for _, p := range ps {
			c.t.Logf("---- %s log tail ----\n%s", p.Name, p.Tail(40))
		}
	}
	if c.db != nil {
		if os.Getenv("SPARK_KEEP_DB") == "" {
			_, _ = c.db.Exec("DROP DATABASE IF EXISTS `" + c.DBName + "`")
		}
		_ = c.db.Close()
	}
}

func serverDSN() string {
	if v := os.Getenv("SPARK_TEST_MYSQL_DSN"); v != "" {
		return v
	}
	return "root@tcp(127.0.0.1:3306)/?parseTime=true&loc=UTC"
}

func (c *Cluster) createDatabase() {
	server := serverDSN()
	switch {
	case c.Galera != nil:
		server = c.Galera.Nodes[c.Writer].DSN()
	case c.MySQL != nil:
		server = c.MySQL.DSN()
	}
	c.DBName, c.MySQLDSN = CreateDatabase(c.t, server)
	var err error
	if c.db, err = sql.Open("mysql", c.MySQLDSN); err != nil {
		c.t.Fatal(err)
	}
}

// CreateDatabase makes a randomly named, empty database on the MySQL
// server at serverDSN ("" : SPARK_TEST_MYSQL_DSN or the shared one) and
// returns its name and a DSN for it. Tests that build a cluster of their
// own (tests/deploy) use it; the caller drops it, or DropDatabase does.
func CreateDatabase(t testing.TB, server string) (name, dsn string) {
	t.Helper()
	if server == "" {
		server = serverDSN()
	}
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		t.Fatalf("SPARK_TEST_MYSQL_DSN: %v", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name = "spark_e2e_" + hex.EncodeToString(b[:])
	cfg.DBName = name
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	dsn = cfg.FormatDSN()
	root, err := sql.Open("mysql", server)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4"); err != nil {
		t.Fatalf("MySQL at %s not usable (make test starts one): %v", server, err)
	}
	return name, dsn
}

// DropDatabaseOnCleanup drops the database named name on the server of
// dsn when t ends (unless SPARK_KEEP_DB is set).
func DropDatabaseOnCleanup(t testing.TB, dsn, name string) {
	t.Cleanup(func() {
		if os.Getenv("SPARK_KEEP_DB") != "" {
			return
		}
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return
		}
		defer db.Close()
		_, _ = db.Exec("DROP DATABASE IF EXISTS `" + name + "`")
	})
}

func (c *Cluster) migrate() {
	cmd := exec.Command(c.Bins.Migrate, "-config", c.Config)
	cmd.Env = inheritedEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("migrate: %v\n%s", err, out)
	}
}

// DB is the cluster's MySQL database.
func (c *Cluster) DB() *sql.DB { return c.db }

// FailOverTo moves the cluster's writes to Galera node i, as an operator
// does after the writer died: every logic is stopped and started again
// with the node's address (its DSN for this cluster's database), one at a
// time, and DB reads from the node from then on. Deliver and the gates
// have no database and keep running.
func (c *Cluster) FailOverTo(ctx context.Context, i int) error {
	if c.Galera == nil {
		return fmt.Errorf("failover: the cluster has no Galera cluster")
	}
	cfg, err := mysql.ParseDSN(c.Galera.Nodes[i].DSN())
	if err != nil {
		return err
	}
	cfg.DBName = c.DBName
	dsn := cfg.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	old := c.db
	c.db, c.Writer, c.MySQLDSN = db, i, dsn
	_ = old.Close()
	for _, l := range c.Logics {
		l.SetEnv("IM_LOGIC_MYSQL_DSN=" + dsn)
		if err := l.Stop(); err != nil {
			// A logic stuck on the dead node is killed, as an operator would.
			if kerr := l.Kill(); kerr != nil {
				return fmt.Errorf("failover: stop %s: %w (kill: %v)", l.Name, err, kerr)
			}
		}
		if err := l.Start(ctx); err != nil {
			return fmt.Errorf("failover: start %s on node %d: %w", l.Name, i+1, err)
		}
	}
	return nil
}

// Token mints a client token for a user (and device, when not empty).
func (c *Cluster) Token(userID int64, deviceID string) string {
	tok, _, err := token.Mint([]byte(JWTSecret), userID, deviceID, time.Hour, time.Now())
	if err != nil {
		c.t.Fatal(err)
	}
	return tok
}

// CountRows runs a COUNT(*) query.
func (c *Cluster) CountRows(query string, args ...any) int {
	var n int
	if err := c.db.QueryRow(query, args...).Scan(&n); err != nil {
		c.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// Failpoint arms (action "off" disarms) a failpoint in a running process
// through its admin port.
func Failpoint(adminAddr, name, action string) error {
	req, err := http.NewRequest(http.MethodPut, "http://"+adminAddr+"/debug/failpoints", strings.NewReader(name+"="+action))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("failpoint %s=%s: %w", name, action, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("failpoint %s=%s: %s (binaries built without -tags failpoints?)", name, action, resp.Status)
	}
	return nil
}
