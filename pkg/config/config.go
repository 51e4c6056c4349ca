// Package config loads the configuration shared by every process: one YAML
// file with a section per process, every key overridable by an environment
// variable named IM_ plus the upper-cased key path with "_" for "."
// (IM_LOGIC_MYSQL_DSN sets logic.mysql.dsn). Built-in defaults work on a
// developer machine except for secrets, which have none: production configs
// never inherit the development ones.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// Config is the whole configuration.
type Config struct {
	Log     Log     `mapstructure:"log"`
	Cluster Cluster `mapstructure:"cluster"`
	Queue   Queue   `mapstructure:"queue"`
	Gate    Gate    `mapstructure:"gate"`
	Logic   Logic   `mapstructure:"logic"`
	Deliver Deliver `mapstructure:"deliver"`
}

// Log configures logging.
type Log struct {
	Level string `mapstructure:"level"`
}

// Cluster holds what every process of one cluster shares.
type Cluster struct {
	// Secret authenticates the internal gRPC links.
	Secret string `mapstructure:"secret"`
}

// Queue configures the deliver queue; logic and deliver must agree on it.
type Queue struct {
	Partitions int `mapstructure:"partitions"`
}

// Redis is a Redis endpoint: one server, or a Redis Cluster.
type Redis struct {
	// Addr is a single server's address; ignored when Addrs is set.
	Addr string `mapstructure:"addr"`
	// Addrs are a Redis Cluster's seed nodes (any of its masters; the
	// client discovers the rest). More than one means a cluster.
	Addrs []string `mapstructure:"addrs"`
	// Cluster selects cluster mode with a single seed address, since one
	// address alone cannot tell a cluster node from a plain server.
	Cluster  bool   `mapstructure:"cluster"`
	Password string `mapstructure:"password"`
	// DB is the database index of a single server; a cluster has only 0.
	DB       int `mapstructure:"db"`
	PoolSize int `mapstructure:"pool_size"`
}

// ClusterMode reports whether r names a Redis Cluster.
func (r Redis) ClusterMode() bool { return r.Cluster || len(r.Addrs) > 1 }

// Endpoints are the addresses to dial: Addrs when set, else Addr.
func (r Redis) Endpoints() []string {
	if len(r.Addrs) > 0 {
		return r.Addrs
	}
	if r.Addr == "" {
		return nil
	}
	return []string{r.Addr}
}

// Validate refuses what a Redis Cluster cannot do (a DB other than 0) and
// an endpoint without an address, naming the section (e.g. "logic.redis").
func (r Redis) Validate(section string) error {
	eps := r.Endpoints()
	if len(eps) == 0 {
		return fmt.Errorf("config: %s.addr and %s.addrs are both empty", section, section)
	}
	for _, a := range eps {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("config: %s address %q: %w", section, a, err)
		}
	}
	if r.ClusterMode() && r.DB != 0 {
		// SELECT fails on a cluster node, so a non-zero DB would make
		// every connection fail at dial time, far from the cause.
		return fmt.Errorf("config: %s.db is %d but a Redis Cluster has only DB 0; set %s.db to 0 or name a single server", section, r.DB, section)
	}
	return nil
}

// Gate configures a gate process.
type Gate struct {
	ID string `mapstructure:"id"`
	// TCPAddr is the client TCP listener.
	TCPAddr string `mapstructure:"tcp_addr"`
	// PushAddr is the listen address of the Push gRPC server, and
	// PushAdvertise the address logic and deliver dial (default PushAddr).
	PushAddr      string `mapstructure:"push_addr"`
	PushAdvertise string `mapstructure:"push_advertise"`
	// ClientAdvertise are the addresses clients connect to
	// ("tcp://host:port"), as the business API's ListGates shows them
	// (default: tcp:// and the bound TCP listener): behind a balancer or
	// NAT the bound address is not the one clients dial.
	ClientAdvertise []string `mapstructure:"client_advertise"`
	AdminAddr       string   `mapstructure:"admin_addr"`
	// LogicAddrs are the logic instances; the gate keeps StreamsPerLogic
	// Gateway streams to each.
	LogicAddrs      []string `mapstructure:"logic_addrs"`
	StreamsPerLogic int      `mapstructure:"streams_per_logic"`
	// MaxInflight bounds requests awaiting an answer per stream; past it
	// the gate answers 50301 itself.
	MaxInflight int `mapstructure:"max_inflight"`
	// MaxInflightPerConn bounds one connection's requests awaiting an
	// answer, so a client pipelining thousands cannot fill its stream's
	// shared max_inflight and starve every other connection on it; past
	// it that connection alone gets 50301.
	MaxInflightPerConn int           `mapstructure:"max_inflight_per_conn"`
	MaxFrameSize       int           `mapstructure:"max_frame_size"`
	AuthTimeout        time.Duration `mapstructure:"auth_timeout"`
	IdleTimeout        time.Duration `mapstructure:"idle_timeout"`
	WriteTimeout       time.Duration `mapstructure:"write_timeout"`
	OutboundQueue      int           `mapstructure:"outbound_queue"`
	Shards             int           `mapstructure:"shards"`
	// RequestTimeout is how long a forwarded request may wait for logic
	// before the gate answers 50301.
	RequestTimeout time.Duration `mapstructure:"request_timeout"`
	// ShutdownKickWindow is how long a gate on SIGTERM takes to send its
	// connections KICK "server_shutdown", spread evenly over the window,
	// so its clients reconnect to the other gates gradually rather than
	// all in the same second (a reconnect storm); 0 kicks them all at
	// once. Shutdown takes at most this plus the drain timeout plus a few
	// seconds to stop the streams (docs/decisions.md 70).
	ShutdownKickWindow time.Duration `mapstructure:"shutdown_kick_window"`
	// ProxyProtocol makes every client connection start with a PROXY
	// protocol v1 or v2 header from an L4 balancer, naming the client's
	// real address. Only peers in ProxyTrustedCIDRs (CIDRs or bare
	// addresses; required when on) may connect, since a header from
	// anyone else would let a client choose its own address; a header
	// that is malformed or not complete within ProxyHeaderTimeout closes
	// the connection.
	ProxyProtocol      bool          `mapstructure:"proxy_protocol"`
	ProxyTrustedCIDRs  []string      `mapstructure:"proxy_trusted_cidrs"`
	ProxyHeaderTimeout time.Duration `mapstructure:"proxy_header_timeout"`
	// TLSCertFile and TLSKeyFile (PEM) turn on the TLS listener at
	// TLSAddr, a second listener beside TCPAddr: plain TCP stays for
	// deployments that terminate TLS in front of the gate, and a client
	// never has to guess which protocol a port speaks. Both or neither
	// must be set. The files are re-read when they change (checked every
	// TLSReloadInterval), so certificates rotate without dropping
	// connections; a bad new pair keeps the old one.
	TLSAddr           string        `mapstructure:"tls_addr"`
	TLSCertFile       string        `mapstructure:"tls_cert_file"`
	TLSKeyFile        string        `mapstructure:"tls_key_file"`
	TLSReloadInterval time.Duration `mapstructure:"tls_reload_interval"`
	// TLSHandshakeTimeout bounds a TLS handshake from its first byte;
	// TLSMaxHandshakes bounds handshakes in progress, each of which holds
	// a goroutine for about a round trip (past it a new connection is
	// closed at once and the client retries).
	TLSHandshakeTimeout time.Duration `mapstructure:"tls_handshake_timeout"`
	TLSMaxHandshakes    int           `mapstructure:"tls_max_handshakes"`
	// WSAddr is the WebSocket listener (upgrade on path /ws), its own
	// port so H5 clients in a browser can reach the gate; "" turns it
	// off. Each binary message carries exactly one Spark frame.
	WSAddr string `mapstructure:"ws_addr"`
	// WSAllowedOrigins, when set, refuses upgrades whose Origin header
	// names another site (403). Empty allows any origin: H5 pages live on
	// the businesses' own domains and the token, not the origin,
	// authenticates. Entries are scheme://host[:port].
	WSAllowedOrigins []string `mapstructure:"ws_allowed_origins"`
	// WSSAddr is the WebSocket listener behind TLS (wss://host/ws), with
	// the certificate files of the TLS listener; it is on when both are
	// set. Browsers on https pages may only open wss://, so an H5
	// deployment without a TLS-terminating front needs it.
	WSSAddr string `mapstructure:"wss_addr"`
	// ProxyProtocolListeners names the listeners ("tcp", "tls", "ws",
	// "wss") that expect a PROXY header when ProxyProtocol is on; empty
	// means all. A front that speaks PROXY on its L4 routes but proxies
	// WebSocket over HTTP (Nginx's http block cannot send PROXY) needs
	// the WebSocket listener left out.
	ProxyProtocolListeners []string `mapstructure:"proxy_protocol_listeners"`
	// WSRealIPHeader names the upgrade request header ("X-Real-IP", or
	// "X-Forwarded-For", whose last entry counts) that carries the client's
	// address when an HTTP proxy terminates WebSocket in front of the
	// gate. It is believed only from peers in ProxyTrustedCIDRs, so a
	// browser talking to the gate directly cannot choose its address.
	WSRealIPHeader string `mapstructure:"ws_real_ip_header"`
	// MaxConnsPerIP bounds the connections one client address (an IPv6
	// client's /64) holds on this gate, authenticated or not; past it a
	// new connection gets one 42901 frame and is closed. 0 turns it off,
	// which a gate behind a balancer that hides client addresses (no
	// PROXY header, no WebSocket real-IP header) needs.
	MaxConnsPerIP int `mapstructure:"max_conns_per_ip"`
	// MaxUnauthenticated bounds the connections that have not (yet)
	// authenticated on this gate, so sockets that never send AUTH cannot
	// crowd out real clients for the whole AUTH deadline; past it a new
	// connection is refused like above. 0 turns it off.
	MaxUnauthenticated int `mapstructure:"max_unauthenticated"`
	// PreAuthMaxFrameSize is the largest frame (header included) a
	// connection may send before it has authenticated: AUTH bodies are
	// small, so a header announcing more closes the connection instead of
	// making the gate buffer up to MaxFrameSize for the AUTH deadline.
	PreAuthMaxFrameSize int `mapstructure:"preauth_max_frame_size"`
}

// TLSEnabled reports whether the gate terminates TLS on TLSAddr.
func (g Gate) TLSEnabled() bool { return g.TLSCertFile != "" || g.TLSKeyFile != "" }

// MySQL is the database of logic.
type MySQL struct {
	DSN          string `mapstructure:"dsn"`
	MaxOpenConns int    `mapstructure:"max_open_conns"`
	MaxIdleConns int    `mapstructure:"max_idle_conns"`
}

// Logic configures a logic process.
type Logic struct {
	GRPCAddr  string `mapstructure:"grpc_addr"`
	AdminAddr string `mapstructure:"admin_addr"`
	// MachineID is this process's MsgId machine id (0–1023), unique among
	// running logic processes, or -1 to lease a free one from Redis.
	MachineID int    `mapstructure:"machine_id"`
	MySQL     MySQL  `mapstructure:"mysql"`
	Redis     Redis  `mapstructure:"redis"`
	JWTSecret string `mapstructure:"jwt_secret"`
	// TokenTTL is the default lifetime of tokens from IssueToken.
	TokenTTL time.Duration `mapstructure:"token_ttl"`
	// APIKeys are the business API keys accepted in "x-api-key".
	APIKeys []string `mapstructure:"api_keys"`
	// MsgIDWindow is how far a client-supplied msg_id may be from now.
	MsgIDWindow time.Duration `mapstructure:"msg_id_window"`
	// EnqueueRetries bounds XADD attempts before a send answers 50301.
	EnqueueRetries int `mapstructure:"enqueue_retries"`
	// RateLimit is the client front door's request limits, shared by
	// every logic process through Redis.
	RateLimit RateLimit `mapstructure:"rate_limit"`
	// RecallWindow is how long after sending the sender may recall a
	// message.
	RecallWindow time.Duration `mapstructure:"recall_window"`
	// CommitWorkers is the number of group-commit workers of the send
	// path (each runs one transaction at a time, taking the sends waiting
	// at that moment), CommitBatch the most sends one transaction takes.
	// Both must be at least 1: every send goes through the group commit
	// (there is no one-transaction-per-send mode to select), so a 0 or a
	// negative value, e.g. an old "-1 = off", is refused at start rather
	// than silently meaning something else.
	CommitWorkers int `mapstructure:"commit_workers"`
	CommitBatch   int `mapstructure:"commit_batch"`
	// GroupMaxMembers is the member limit a new group gets (its
	// max_members). A send costs one row whatever the group's size, but
	// fan-out, member caches and dissolve notices grow with it.
	GroupMaxMembers int `mapstructure:"group_max_members"`
	// MaxFrameSize is the frame limit of the gates and clients
	// (gate.max_frame_size): a message is accepted only if its MESSAGE
	// push fits, and sync pages stop before it. Keep the two equal.
	MaxFrameSize int `mapstructure:"max_frame_size"`
	// P2PPolicy is who may send one-to-one messages to whom: P2POpen
	// (anyone not blocked either way) or P2PFriendsOnly. Blocks refuse
	// under both.
	P2PPolicy string `mapstructure:"p2p_policy"`
	// SystemUserID is the user id of the system account the business API
	// sends as (SendMessage with system: true): messages show it as their
	// sender, so it must be an id the business never gives a person.
	SystemUserID int64 `mapstructure:"system_user_id"`
}

// RateLimit configures logic.rate_limit: a bucket per device and one per
// client address for each class of client command, and the block of an
// address that keeps failing AUTH (docs/decisions.md 67).
type RateLimit struct {
	// Enabled turns every limit of the section on or off at once.
	Enabled bool `mapstructure:"enabled"`
	// Auth is AUTH; Send SEND_MESSAGE and GENERATE_MSG_ID; Sync
	// SYNC_INBOX and SYNC_MESSAGES; Edit READ_MESSAGE, RECALL_MESSAGE,
	// DELETE_MESSAGE, CONVERSATION_SETTINGS, RELATION and GROUP.
	Auth RateClass `mapstructure:"auth"`
	Send RateClass `mapstructure:"send"`
	Sync RateClass `mapstructure:"sync"`
	Edit RateClass `mapstructure:"edit"`
	// AuthFailures failed AUTHs (bad, expired, forged or revoked tokens)
	// from one address within AuthFailureWindow block AUTH from that
	// address for AuthBlock. Never the user: a valid device on another
	// address keeps logging in. 0 turns the block off.
	AuthFailures      int           `mapstructure:"auth_failures"`
	AuthFailureWindow time.Duration `mapstructure:"auth_failure_window"`
	AuthBlock         time.Duration `mapstructure:"auth_block"`
}

// RateClass is the two token buckets of one command class: requests a
// second and burst, per device (user and device id) and per client
// address. A rate of 0 turns that bucket off.
type RateClass struct {
	DeviceRate  float64 `mapstructure:"device_rate"`
	DeviceBurst int     `mapstructure:"device_burst"`
	IPRate      float64 `mapstructure:"ip_rate"`
	IPBurst     int     `mapstructure:"ip_burst"`
}

// The values of logic.p2p_policy.
const (
	P2POpen        = "open"
	P2PFriendsOnly = "friends_only"
)

// Deliver configures a deliver process.
type Deliver struct {
	ID        string `mapstructure:"id"`
	AdminAddr string `mapstructure:"admin_addr"`
	Redis     Redis  `mapstructure:"redis"`
	// BatchSize is how many entries one read takes from a partition.
	BatchSize int `mapstructure:"batch_size"`
	// LeaseTTL is how long a partition lease lives without renewal; a
	// crashed instance's partitions are taken over after it.
	LeaseTTL time.Duration `mapstructure:"lease_ttl"`
	// PushTimeout bounds one Push RPC to a gate.
	PushTimeout time.Duration `mapstructure:"push_timeout"`
	// LogicAddrs are the logic instances whose Internal service records
	// mailbox events (MISSED_MESSAGE); any reachable one will do.
	LogicAddrs []string `mapstructure:"logic_addrs"`
	// LogicTimeout bounds one AppendMailbox call, over every logic tried,
	// so an unreachable logic never holds a partition.
	LogicTimeout time.Duration `mapstructure:"logic_timeout"`
}

// Defaults are the built-in values; keys absent here cannot be set from the
// environment.
var defaults = map[string]any{
	"log.level":                     "info",
	"cluster.secret":                "",
	"queue.partitions":              16,
	"gate.id":                       "gate-1",
	"gate.tcp_addr":                 "127.0.0.1:8100",
	"gate.push_addr":                "127.0.0.1:8110",
	"gate.push_advertise":           "",
	"gate.client_advertise":         []string{},
	"gate.admin_addr":               "127.0.0.1:8120",
	"gate.logic_addrs":              []string{"127.0.0.1:9000"},
	"gate.streams_per_logic":        4,
	"gate.max_inflight":             4096,
	"gate.max_inflight_per_conn":    64,
	"gate.max_frame_size":           64 << 10,
	"gate.auth_timeout":             10 * time.Second,
	"gate.idle_timeout":             120 * time.Second,
	"gate.write_timeout":            5 * time.Second,
	"gate.outbound_queue":           256,
	"gate.shards":                   64,
	"gate.request_timeout":          10 * time.Second,
	"gate.shutdown_kick_window":     10 * time.Second,
	"gate.proxy_protocol":           false,
	"gate.proxy_trusted_cidrs":      []string{},
	"gate.proxy_header_timeout":     3 * time.Second,
	"gate.tls_addr":                 "127.0.0.1:8443",
	"gate.tls_cert_file":            "",
	"gate.tls_key_file":             "",
	"gate.tls_reload_interval":      5 * time.Second,
	"gate.tls_handshake_timeout":    10 * time.Second,
	"gate.tls_max_handshakes":       512,
	"gate.ws_addr":                  "127.0.0.1:8180",
	"gate.ws_allowed_origins":       []string{},
	"gate.wss_addr":                 "",
	"gate.ws_real_ip_header":        "",
	"gate.proxy_protocol_listeners": []string{},
	// 5,000 is over twice what one bench source address holds on one gate
	// in the long profile (50,000 connections over 8 addresses and 3
	// gates), and a tenth of the 50,000 a gate is sized for.
	"gate.max_conns_per_ip":       5000,
	"gate.max_unauthenticated":    10000,
	"gate.preauth_max_frame_size": 4 << 10,
	"logic.grpc_addr":             "127.0.0.1:9000",
	"logic.admin_addr":            "127.0.0.1:9020",
	"logic.machine_id":            1,
	"logic.mysql.dsn":             "root@tcp(127.0.0.1:3306)/spark_im?parseTime=true&loc=UTC",
	"logic.mysql.max_open_conns":  64,
	"logic.mysql.max_idle_conns":  64,
	"logic.redis.addr":            "127.0.0.1:6379",
	"logic.redis.addrs":           []string{},
	"logic.redis.cluster":         false,
	"logic.redis.password":        "",
	"logic.redis.db":              0,
	"logic.redis.pool_size":       64,
	"logic.jwt_secret":            "",
	"logic.token_ttl":             7 * 24 * time.Hour,
	"logic.api_keys":              []string{},
	"logic.msg_id_window":         5 * time.Minute,
	"logic.enqueue_retries":       3,
	// Rate limits (docs/decisions.md 67): per device a human's pace with
	// room for a catch-up burst; per address a flood guard sized for many
	// users behind one NAT, and above what the bench sends through each of
	// its 8 loopback addresses at this machine's ceiling.
	"logic.rate_limit.enabled":             true,
	"logic.rate_limit.auth.device_rate":    1.0,
	"logic.rate_limit.auth.device_burst":   30,
	"logic.rate_limit.auth.ip_rate":        200.0,
	"logic.rate_limit.auth.ip_burst":       10000,
	"logic.rate_limit.send.device_rate":    100.0,
	"logic.rate_limit.send.device_burst":   400,
	"logic.rate_limit.send.ip_rate":        5000.0,
	"logic.rate_limit.send.ip_burst":       20000,
	"logic.rate_limit.sync.device_rate":    100.0,
	"logic.rate_limit.sync.device_burst":   1000,
	"logic.rate_limit.sync.ip_rate":        2000.0,
	"logic.rate_limit.sync.ip_burst":       20000,
	"logic.rate_limit.edit.device_rate":    50.0,
	"logic.rate_limit.edit.device_burst":   500,
	"logic.rate_limit.edit.ip_rate":        1000.0,
	"logic.rate_limit.edit.ip_burst":       10000,
	"logic.rate_limit.auth_failures":       10,
	"logic.rate_limit.auth_failure_window": 5 * time.Minute,
	"logic.rate_limit.auth_block":          5 * time.Minute,
	"logic.recall_window":                  2 * time.Minute,
	"logic.commit_workers":                 4, // = message.DefaultCommitWorkers
	"logic.commit_batch":                   256,
	"logic.group_max_members":              10000,
	"logic.max_frame_size":                 64 << 10,
	"logic.p2p_policy":                     P2POpen,
	"logic.system_user_id":                 1,
	"deliver.id":                           "deliver-1",
	"deliver.admin_addr":                   "127.0.0.1:9040",
	"deliver.redis.addr":                   "127.0.0.1:6379",
	"deliver.redis.addrs":                  []string{},
	"deliver.redis.cluster":                false,
	"deliver.redis.password":               "",
	"deliver.redis.db":                     0,
	"deliver.redis.pool_size":              32,
	"deliver.batch_size":                   64,
	"deliver.lease_ttl":                    10 * time.Second,
	"deliver.push_timeout":                 3 * time.Second,
	"deliver.logic_addrs":                  []string{"127.0.0.1:9000"},
	"deliver.logic_timeout":                2 * time.Second,
}

// Load reads path (empty: defaults and environment only) and applies the
// environment overrides.
func Load(path string) (*Config, error) {
	v := viper.New()
	for k, val := range defaults {
		v.SetDefault(k, val)
	}
	v.SetEnvPrefix("IM")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	if path != "" {
		v.SetConfigFile(path)
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("config: read %s: %w", path, err)
		}
	}
	var c Config
	err := v.Unmarshal(&c, viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		mapstructure.StringToTimeDurationHookFunc(),
		mapstructure.StringToSliceHookFunc(","),
	)))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if c.Gate.PushAdvertise == "" {
		c.Gate.PushAdvertise = c.Gate.PushAddr
	}
	if c.Gate.TLSEnabled() {
		if c.Gate.TLSCertFile == "" || c.Gate.TLSKeyFile == "" {
			return nil, errors.New("config: gate.tls_cert_file and gate.tls_key_file must be set together")
		}
		if c.Gate.TLSAddr == "" {
			return nil, errors.New("config: gate.tls_addr is empty while gate.tls_cert_file is set")
		}
		if c.Gate.TLSMaxHandshakes < 1 {
			return nil, errors.New("config: gate.tls_max_handshakes must be at least 1")
		}
	}
	if err := validateWS(c.Gate); err != nil {
		return nil, err
	}
	if err := validateGateLimits(c.Gate); err != nil {
		return nil, err
	}
	if err := validateRateLimit(c.Logic.RateLimit); err != nil {
		return nil, err
	}
	if err := c.Logic.Redis.Validate("logic.redis"); err != nil {
		return nil, err
	}
	if err := c.Deliver.Redis.Validate("deliver.redis"); err != nil {
		return nil, err
	}
	if c.Queue.Partitions < 1 {
		return nil, errors.New("config: queue.partitions must be at least 1")
	}
	if c.Logic.CommitWorkers < 1 || c.Logic.CommitBatch < 1 {
		return nil, fmt.Errorf("config: logic.commit_workers (%d) and logic.commit_batch (%d) must be at least 1: every send goes through the group commit",
			c.Logic.CommitWorkers, c.Logic.CommitBatch)
	}
	if c.Logic.MaxFrameSize < 4<<10 {
		return nil, errors.New("config: logic.max_frame_size must be at least 4096 bytes")
	}
	if c.Logic.GroupMaxMembers < 1 {
		return nil, errors.New("config: logic.group_max_members must be at least 1")
	}
	if c.Logic.SystemUserID < 1 {
		return nil, errors.New("config: logic.system_user_id must be a positive user id")
	}
	switch c.Logic.P2PPolicy {
	case P2POpen, P2PFriendsOnly:
	default:
		// A typo must not silently open a friends-only deployment.
		return nil, fmt.Errorf("config: logic.p2p_policy is %q; want %q or %q", c.Logic.P2PPolicy, P2POpen, P2PFriendsOnly)
	}
	return &c, nil
}

// RequireSecret fails when a secret the process needs is empty.
func RequireSecret(name, value string) error {
	if value == "" {
		return fmt.Errorf("config: %s is empty; set it in the config file or IM_%s", name, strings.ToUpper(strings.ReplaceAll(name, ".", "_")))
	}
	return nil
}

// validateWS checks the WebSocket listeners' addresses, origin list and
// proxy settings at load, so a typo fails the gate's start instead of
// refusing every browser.
func validateWS(g Gate) error {
	if g.WSAddr != "" {
		if _, _, err := net.SplitHostPort(g.WSAddr); err != nil {
			return fmt.Errorf("config: gate.ws_addr %q: %w", g.WSAddr, err)
		}
	}
	if g.WSSAddr != "" {
		if _, _, err := net.SplitHostPort(g.WSSAddr); err != nil {
			return fmt.Errorf("config: gate.wss_addr %q: %w", g.WSSAddr, err)
		}
	}
	for _, l := range g.ProxyProtocolListeners {
		switch l {
		case "tcp", "tls", "ws", "wss":
		default:
			return fmt.Errorf("config: gate.proxy_protocol_listeners entry %q: want tcp, tls, ws or wss", l)
		}
	}
	if g.WSRealIPHeader != "" && len(g.ProxyTrustedCIDRs) == 0 {
		return errors.New("config: gate.ws_real_ip_header is set but gate.proxy_trusted_cidrs is empty: no proxy would be believed")
	}
	for _, o := range g.WSAllowedOrigins {
		u, err := url.Parse(o)
		if err != nil {
			return fmt.Errorf("config: gate.ws_allowed_origins %q: %w", o, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return fmt.Errorf("config: gate.ws_allowed_origins %q: want scheme://host[:port]", o)
		}
	}
	return nil
}

// validateGateLimits checks the shutdown kick window, the gate's
// connection caps and the pre-AUTH frame limit.
func validateGateLimits(g Gate) error {
	if g.ShutdownKickWindow < 0 {
		return fmt.Errorf("config: gate.shutdown_kick_window %v must be 0 (kick all at once) or positive", g.ShutdownKickWindow)
	}
	if g.MaxConnsPerIP < 0 || g.MaxUnauthenticated < 0 {
		return fmt.Errorf("config: gate.max_conns_per_ip (%d) and gate.max_unauthenticated (%d) must be 0 (off) or positive",
			g.MaxConnsPerIP, g.MaxUnauthenticated)
	}
	// An AUTH frame is the 23-byte header and a JSON body with a token
	// of a few hundred bytes: below 256 no client could log in.
	if g.PreAuthMaxFrameSize < 256 || (g.MaxFrameSize > 0 && g.PreAuthMaxFrameSize > g.MaxFrameSize) {
		return fmt.Errorf("config: gate.preauth_max_frame_size %d must be between 256 and gate.max_frame_size (%d)",
			g.PreAuthMaxFrameSize, g.MaxFrameSize)
	}
	return nil
}

// validateRateLimit checks logic.rate_limit: a bucket that is on needs a
// burst of at least one request, and the AUTH failure block needs its
// window and duration.
func validateRateLimit(r RateLimit) error {
	for _, c := range []struct {
		name string
		rc   RateClass
	}{{"auth", r.Auth}, {"send", r.Send}, {"sync", r.Sync}, {"edit", r.Edit}} {
		for _, b := range []struct {
			scope string
			rate  float64
			burst int
		}{{"device", c.rc.DeviceRate, c.rc.DeviceBurst}, {"ip", c.rc.IPRate, c.rc.IPBurst}} {
			if b.rate < 0 || (b.rate > 0 && b.burst < 1) {
				return fmt.Errorf("config: logic.rate_limit.%s.%s_rate %v needs %s_burst ≥ 1 (got %d); a rate of 0 turns the bucket off",
					c.name, b.scope, b.rate, b.scope, b.burst)
			}
		}
	}
	if r.AuthFailures < 0 {
		return fmt.Errorf("config: logic.rate_limit.auth_failures %d must be 0 (off) or positive", r.AuthFailures)
	}
	if r.AuthFailures > 0 && (r.AuthFailureWindow <= 0 || r.AuthBlock <= 0) {
		return errors.New("config: logic.rate_limit.auth_failure_window and auth_block must be positive when auth_failures is set")
	}
	return nil
}
