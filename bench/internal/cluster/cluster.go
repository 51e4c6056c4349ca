package cluster

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/redisconn"
)

// Services are the storage servers found the way deploy/dev/services.sh
// finds them.
type Services struct {
	ServerDSN string // DSN without a database
	RedisAddr string
}

// FindServices reads SPARK_TEST_MYSQL_DSN / IM_LOGIC_REDIS_ADDR (set by
// `source .run/services.env`), or else runs deploy/dev/services.sh and
// reads the file it writes.
func FindServices(ctx context.Context, root string) (Services, error) {
	s := Services{ServerDSN: os.Getenv("SPARK_TEST_MYSQL_DSN"), RedisAddr: os.Getenv("IM_LOGIC_REDIS_ADDR")}
	if s.ServerDSN != "" && s.RedisAddr != "" {
		return s, nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "deploy/dev/services.sh"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return s, fmt.Errorf("cluster: services.sh: %w", err)
	}
	f, err := os.Open(filepath.Join(root, ".run/services.env"))
	if err != nil {
		return s, fmt.Errorf("cluster: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, "'")
		switch k {
		case "SPARK_TEST_MYSQL_DSN":
			s.ServerDSN = v
		case "IM_LOGIC_REDIS_ADDR":
			s.RedisAddr = v
		}
	}
	if s.ServerDSN == "" || s.RedisAddr == "" {
		return s, fmt.Errorf("cluster: services.env names no MySQL or Redis")
	}
	return s, nil
}

// Options shape the cluster.
type Options struct {
	Root     string // repository root (bin/ and deploy/ live there)
	Dir      string // scratch directory for config and logs
	Gates    int
	Services Services
	// ExtraEnv is added to every process (e.g. raised send rate limits).
	ExtraEnv []string
}

// Gate is a gate process with its addresses: TCPAddr plain TCP, TLSAddr
// the TLS listener (the run's own certificate, Cluster.CertPEM), WSAddr
// the WebSocket listener (ws://WSAddr/ws).
type Gate struct {
	*Proc
	ID, TCPAddr, TLSAddr, WSAddr, PushAddr, AdminAddr string
}

// Cluster is the running system.
type Cluster struct {
	Opts      Options
	DBName    string
	DSN       string // of DBName
	RedisAddr string
	redisProc *exec.Cmd
	JWTSecret string
	// CertPEM is the self-signed certificate every gate's TLS listener
	// serves, generated for this run; TLS clients trust exactly it.
	CertPEM []byte
	// APIKey is the business API key logic accepts in "x-api-key" (the
	// group scenario creates users and groups through logic.v1.Api).
	APIKey    string
	LogicAddr string
	// LogicAdmin and DeliverAdmin are the admin HTTP addresses (pprof).
	LogicAdmin   string
	DeliverAdmin string
	Logic        *Proc
	Deliver      *Proc
	Gates        []*Gate
	MySQLPID     int // 0 when not visible (remote server)
	RedisPID     int
	db           *sql.DB
	rdb          redis.UniversalClient
	configPath   string
	log          *slog.Logger
	scratchDBs   []string
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Start creates the database, starts a private Redis, migrates
// and starts logic, deliver and the gates.
func Start(ctx context.Context, o Options, log *slog.Logger) (*Cluster, error) {
	c := &Cluster{Opts: o, log: log, JWTSecret: "bench-jwt-" + randHex(8), APIKey: "bench-" + randHex(8)}
	for _, b := range []string{"gate", "logic", "deliver", "migrate"} {
		if _, err := os.Stat(filepath.Join(o.Root, "bin", b)); err != nil {
			return nil, fmt.Errorf("cluster: bin/%s missing (run make build): %w", b, err)
		}
	}
	var err error
	c.db, err = sql.Open("mysql", o.Services.ServerDSN)
	if err != nil {
		return nil, fmt.Errorf("cluster: mysql: %w", err)
	}
	c.DBName = "spark_bench_" + randHex(4)
	c.DSN, err = c.CreateDatabase(ctx, c.DBName)
	if err != nil {
		c.Close()
		return nil, err
	}
	if err := c.startRedis(ctx); err != nil {
		c.Close()
		return nil, err
	}
	cfg := fmt.Sprintf(`log: {level: info}
cluster: {secret: %s}
queue: {partitions: %d}
logic:
  jwt_secret: %s
  api_keys: [%s]
  # The p2p-webhook scenario's endpoint listens in imbench, on loopback.
  webhook: {enabled: true, allow_private_urls: true}
`, "bench-cluster-"+randHex(8), queuePartitions, c.JWTSecret, c.APIKey)
	c.configPath = filepath.Join(o.Dir, "im.yaml")
	if err := os.WriteFile(c.configPath, []byte(cfg), 0o600); err != nil {
		c.Close()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := c.Migrate(ctx, c.DSN); err != nil {
		c.Close()
		return nil, err
	}
	certFile, keyFile := filepath.Join(o.Dir, "gate-cert.pem"), filepath.Join(o.Dir, "gate-key.pem")
	if c.CertPEM, err = writeCert(certFile, keyFile); err != nil {
		c.Close()
		return nil, err
	}
	port := func() string { p, _ := FreePort(); return "127.0.0.1:" + strconv.Itoa(p) }
	common := append([]string{
		"IM_LOGIC_MYSQL_DSN=" + c.DSN, "IM_LOGIC_REDIS_ADDR=" + c.RedisAddr, "IM_DELIVER_REDIS_ADDR=" + c.RedisAddr,
	}, o.ExtraEnv...)
	c.LogicAddr, c.LogicAdmin, c.DeliverAdmin = port(), port(), port()
	c.Logic = &Proc{Name: "logic", Bin: filepath.Join(o.Root, "bin/logic"), Args: []string{"-config", c.configPath},
		LogPath: filepath.Join(o.Dir, "logic.log"),
		Env:     append([]string{"IM_LOGIC_GRPC_ADDR=" + c.LogicAddr, "IM_LOGIC_HTTP_ADDR=" + port(), "IM_LOGIC_ADMIN_ADDR=" + c.LogicAdmin, "IM_LOGIC_MACHINE_ID=" + strconv.Itoa(500+int(randByte())%400)}, common...)}
	c.Deliver = &Proc{Name: "deliver", Bin: filepath.Join(o.Root, "bin/deliver"), Args: []string{"-config", c.configPath},
		LogPath: filepath.Join(o.Dir, "deliver.log"),
		Env:     append([]string{"IM_DELIVER_ID=bench-deliver-1", "IM_DELIVER_ADMIN_ADDR=" + c.DeliverAdmin, "IM_DELIVER_LOGIC_ADDRS=" + c.LogicAddr}, common...)}
	for i := 0; i < o.Gates; i++ {
		g := &Gate{ID: fmt.Sprintf("bench-gate-%d", i+1), TCPAddr: port(), TLSAddr: port(), WSAddr: port(), PushAddr: port(), AdminAddr: port()}
		g.Proc = &Proc{Name: g.ID, Bin: filepath.Join(o.Root, "bin/gate"), Args: []string{"-config", c.configPath},
			LogPath: filepath.Join(o.Dir, g.ID+".log"),
			// Every listener on a free port: the TLS and WebSocket defaults
			// would collide between the gates. TLS is on in every run (the
			// conn scenario's tls variant connects to it); idle, it costs
			// a listener and a stat of the files every few seconds. The
			// scenarios that restart a gate (reconnect: "N clients dropped
			// at once") measure its clients coming back to the same
			// address, so the gate kicks them all at once rather than over
			// the shutdown window meant for moving them to other gates.
			Env: append([]string{"IM_GATE_ID=" + g.ID, "IM_GATE_TCP_ADDR=" + g.TCPAddr, "IM_GATE_PUSH_ADDR=" + g.PushAddr,
				"IM_GATE_ADMIN_ADDR=" + g.AdminAddr, "IM_GATE_WS_ADDR=" + g.WSAddr, "IM_GATE_LOGIC_ADDRS=" + c.LogicAddr,
				"IM_GATE_TLS_ADDR=" + g.TLSAddr, "IM_GATE_TLS_CERT_FILE=" + certFile, "IM_GATE_TLS_KEY_FILE=" + keyFile,
				"IM_GATE_SHUTDOWN_KICK_WINDOW=0s"}, common...)}
		c.Gates = append(c.Gates, g)
	}
	for _, p := range c.procs() {
		if err := p.Start(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	c.findStoragePIDs()
	return c, nil
}

func randByte() byte {
	var b [1]byte
	_, _ = rand.Read(b[:])
	return b[0]
}

func (c *Cluster) procs() []*Proc {
	ps := []*Proc{c.Logic, c.Deliver}
	for _, g := range c.Gates {
		ps = append(ps, g.Proc)
	}
	return ps
}

func (c *Cluster) findStoragePIDs() {
	if cfg, err := mysql.ParseDSN(c.Opts.Services.ServerDSN); err == nil {
		if _, p, ok := strings.Cut(cfg.Addr, ":"); ok {
			n, _ := strconv.Atoi(p)
			c.MySQLPID = listenerPID(n)
		}
	}
}

// CreateDatabase creates database name and returns its DSN; Close drops it.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	if _, err := c.db.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return "", fmt.Errorf("cluster: create database %s: %w", name, err)
	}
	c.scratchDBs = append(c.scratchDBs, name)
	cfg, err := mysql.ParseDSN(c.Opts.Services.ServerDSN)
	if err != nil {
		return "", fmt.Errorf("cluster: dsn: %w", err)
	}
	cfg.DBName = name
	return cfg.FormatDSN(), nil
}

// Migrate applies the migrations to dsn with bin/migrate.
func (c *Cluster) Migrate(ctx context.Context, dsn string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.Opts.Root, "bin/migrate"), "-config", c.configPath)
	cmd.Env = append(os.Environ(), "IM_LOGIC_MYSQL_DSN="+dsn)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("cluster: migrate: %w: %s", err, out)
	}
	return nil
}

// startRedis runs a private redis-server (the system's binary, the one
// services.sh installs) on a free port. The shared Redis holds whatever
// `make run` and other work on the machine left in it, so the benchmark's
// routes, queues and leases get a server of their own, as every test does.
func (c *Cluster) startRedis(ctx context.Context) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("cluster: redis-server not found (deploy/dev/services.sh installs it): %w", err)
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	c.RedisAddr = "127.0.0.1:" + strconv.Itoa(port)
	c.redisProc = exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--dir", c.Opts.Dir, "--logfile", filepath.Join(c.Opts.Dir, "redis.log"))
	c.redisProc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.redisProc.Start(); err != nil {
		return fmt.Errorf("cluster: start redis: %w", err)
	}
	c.RedisPID = c.redisProc.Process.Pid
	if c.rdb, err = redisconn.Open(config.Redis{Addr: c.RedisAddr}, redisconn.Options{}); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	for i := 0; i < 100; i++ {
		if err := c.rdb.Ping(ctx).Err(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("cluster: private redis on %s does not answer", c.RedisAddr)
}

// queuePartitions is queue.partitions of the system under test.
const queuePartitions = 16

// QueuePartitions is the number of deliver streams im:deliver:{p}.
func (c *Cluster) QueuePartitions() int { return queuePartitions }

// DB is a handle on the server (no default database).
func (c *Cluster) DB() *sql.DB { return c.db }

// Redis is a client of the private Redis.
func (c *Cluster) Redis() redis.UniversalClient { return c.rdb }

// RestartGate stops gate i with sig and starts it again on the same
// ports; down returns when the old process has exited.
func (c *Cluster) RestartGate(ctx context.Context, i int, sig syscall.Signal, down func()) error {
	g := c.Gates[i]
	if err := g.Signal(sig); err != nil {
		return fmt.Errorf("cluster: signal %s: %w", g.ID, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := g.Wait(wctx); err != nil {
		return fmt.Errorf("cluster: %s did not exit: %w", g.ID, err)
	}
	if down != nil {
		down()
	}
	return g.Start(ctx)
}

// Close stops every process and drops what the benchmark created.
func (c *Cluster) Close() {
	ps := c.procs()
	for i := len(ps) - 1; i >= 0; i-- {
		if ps[i] != nil {
			_ = ps[i].Stop(syscall.SIGTERM)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c.rdb != nil {
		_ = c.rdb.Close()
	}
	if c.redisProc != nil && c.redisProc.Process != nil {
		_ = c.redisProc.Process.Signal(syscall.SIGTERM)
		_ = c.redisProc.Wait()
	}
	if c.db != nil {
		for _, name := range c.scratchDBs {
			if _, err := c.db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
				c.log.Warn("drop database", "db", name, "err", err)
			}
		}
		_ = c.db.Close()
	}
}
