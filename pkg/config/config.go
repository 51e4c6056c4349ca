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
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"

	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/stdwebhook"
)

// Config is the whole configuration.
type Config struct {
	Log     Log     `mapstructure:"log"`
	Cluster Cluster `mapstructure:"cluster"`
	Queue   Queue   `mapstructure:"queue"`
	Gate    Gate    `mapstructure:"gate"`
	Logic   Logic   `mapstructure:"logic"`
	Deliver Deliver `mapstructure:"deliver"`
	Push    Push    `mapstructure:"push"`
	Tracing Tracing `mapstructure:"tracing"`
}

// Tracing configures OpenTelemetry traces, the same for every process
// (each names itself spark-gate, spark-logic or spark-deliver).
type Tracing struct {
	// Enabled exports spans; off, no span is made (decision 100).
	Enabled bool `mapstructure:"enabled"`
	// Endpoint is the OTLP/HTTP traces URL of a collector.
	Endpoint string `mapstructure:"endpoint"`
	// SampleRatio is the share of sends traced, 0 < ratio ≤ 1; a trace is
	// sampled where it starts (the gate) and followed everywhere after.
	SampleRatio float64 `mapstructure:"sample_ratio"`
	// ServiceName overrides the service.name a process exports under;
	// empty, each names itself (spark-gate, spark-logic, spark-deliver).
	// Set it per process (IM_TRACING_SERVICE_NAME in its unit or pod),
	// since the file is shared, e.g. to tell two regions' gates apart.
	ServiceName string `mapstructure:"service_name"`
}

// Validate checks tracing when it is on.
func (t Tracing) Validate() error {
	if !t.Enabled {
		return nil
	}
	var errs []error
	if u, err := url.Parse(t.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("config: tracing.endpoint %q: want an http or https URL", t.Endpoint))
	}
	if !(t.SampleRatio > 0 && t.SampleRatio <= 1) {
		errs = append(errs, fmt.Errorf("config: tracing.sample_ratio %v: want 0 < ratio <= 1", t.SampleRatio))
	}
	return errors.Join(errs...)
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
	// DrainTimeout bounds how long a connection's requests in flight may
	// take to be answered at shutdown before its KICK.
	DrainTimeout time.Duration `mapstructure:"drain_timeout"`
	// SweepInterval is how often the AUTH and idle deadlines are checked
	// (one pass over the connection table rather than a timer each), so
	// a deadline is enforced up to this late.
	SweepInterval time.Duration `mapstructure:"sweep_interval"`
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
	GRPCAddr string `mapstructure:"grpc_addr"`
	// HTTPAddr is the HTTP/JSON listener of the business API (the same
	// calls as Api over gRPC, and /openapi.json).
	HTTPAddr  string `mapstructure:"http_addr"`
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
	// EditWindow is how long after sending the sender may edit a text
	// message (EDIT_MESSAGE, 24).
	EditWindow time.Duration `mapstructure:"edit_window"`
	// ReactionKinds is the most different emojis one message may carry
	// (REACTION, 25), at most 50 so a message's counts fit any page;
	// ReactionsPerUser the most of them one user may add to it.
	ReactionKinds    int `mapstructure:"reaction_kinds"`
	ReactionsPerUser int `mapstructure:"reactions_per_user"`
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
	// push fits, and sync pages stop before it. The two must be equal
	// (Validate refuses otherwise).
	MaxFrameSize int `mapstructure:"max_frame_size"`
	// RequestTimeout bounds logic's handling of one client request; it
	// must be below gate.request_timeout, so logic answers before the
	// gate gives up and answers 50301 itself.
	RequestTimeout time.Duration `mapstructure:"request_timeout"`
	// P2PPolicy is who may send one-to-one messages to whom: P2POpen
	// (anyone not blocked either way) or P2PFriendsOnly. Blocks refuse
	// under both.
	P2PPolicy string `mapstructure:"p2p_policy"`
	// SystemUserID is the user id of the system account the business API
	// sends as (SendMessage with system: true): messages show it as their
	// sender, so it must be an id the business never gives a person.
	SystemUserID int64 `mapstructure:"system_user_id"`
	// BeforeSend is the business server's synchronous before-send hook
	// (docs/api.md, "Before-send hook"; docs/decisions.md, "A synchronous
	// before-send hook").
	BeforeSend BeforeSend `mapstructure:"before_send"`
	// Webhook is the signed, durable event callbacks to business servers
	// (docs/webhooks.md).
	Webhook Webhook `mapstructure:"webhook"`
	// Upstream is the client-to-business-service path (UPSTREAM, 22):
	// which services exist and how their queue is read
	// (docs/decisions.md 94).
	Upstream Upstream `mapstructure:"upstream"`
	// Media is where uploaded pictures, voice, video and files are kept
	// and how large each kind may be (docs/decisions.md, "Media
	// storage").
	Media Media `mapstructure:"media"`
}

// Media store kinds (logic.media.store).
const (
	// MediaStoreLocal keeps objects in files under logic.media.dir,
	// served by logic itself on its HTTP listener (logic.http_addr, under
	// /media/) with signed URLs:
	// nothing to install.
	MediaStoreLocal = "local"
	// MediaStoreS3 keeps objects in an S3 bucket; clients upload and
	// download with presigned URLs straight to and from it.
	MediaStoreS3 = "s3"
)

// Media configures logic.media.
type Media struct {
	// Store is MediaStoreLocal or MediaStoreS3.
	Store string `mapstructure:"store"`
	// Dir is the local store's data directory.
	Dir string `mapstructure:"dir"`
	// PublicURL is the base URL clients reach logic's HTTP listener at,
	// where the local store serves /media/ (empty: http:// +
	// logic.http_addr, an unspecified host read as 127.0.0.1).
	PublicURL string `mapstructure:"public_url"`
	// Secret signs the local store's URLs (empty: a random one per
	// process, which suits one logic; several share one secret).
	Secret string `mapstructure:"secret"`
	// UploadTTL and DownloadTTL are the lifetimes of presigned upload
	// and download URLs.
	UploadTTL   time.Duration `mapstructure:"upload_ttl"`
	DownloadTTL time.Duration `mapstructure:"download_ttl"`
	// Limits are the largest object of each kind, in bytes.
	Limits MediaLimits `mapstructure:"limits"`
	// S3 is the bucket when Store is MediaStoreS3.
	S3 MediaS3 `mapstructure:"s3"`
}

// MediaLimits is the size limit of each media kind in bytes.
type MediaLimits struct {
	Image  int64 `mapstructure:"image"`
	Voice  int64 `mapstructure:"voice"`
	Video  int64 `mapstructure:"video"`
	File   int64 `mapstructure:"file"`
	Avatar int64 `mapstructure:"avatar"`
}

// MediaS3 is an S3 endpoint and bucket.
type MediaS3 struct {
	// Endpoint is host:port, without a scheme; Secure selects https.
	Endpoint  string `mapstructure:"endpoint"`
	Secure    bool   `mapstructure:"secure"`
	Region    string `mapstructure:"region"`
	Bucket    string `mapstructure:"bucket"`
	AccessKey string `mapstructure:"access_key"`
	SecretKey string `mapstructure:"secret_key"`
}

// Upstream configures logic.upstream.
type Upstream struct {
	// Services are the business service names a client may address; a
	// frame for any other is refused 40401. Empty: UPSTREAM is refused.
	Services []string `mapstructure:"services"`
	// MaxBody bounds an UPSTREAM body in bytes (41301 beyond).
	MaxBody int `mapstructure:"max_body"`
	// Visibility is how long items handed to a puller stay hidden from
	// the next pull; unacknowledged by then, they are handed out again.
	Visibility time.Duration `mapstructure:"visibility"`
	// MaxWait bounds how long a pull waits for an item (long poll).
	MaxWait time.Duration `mapstructure:"max_wait"`
}

// Webhook configures logic.webhook: which events are recorded, the
// endpoints known from config, and how they are delivered and retried
// (docs/decisions.md 91).
type Webhook struct {
	// Enabled records the rarer events (group, friend, block, recall,
	// online) in t_webhook_events and runs the dispatcher. Messages are
	// read from t_messages and cost nothing on the send path either way.
	Enabled bool `mapstructure:"enabled"`
	// URLs are endpoints created at start when missing, signed with
	// Secret and subscribed to Events (empty: every event).
	URLs   []string `mapstructure:"urls"`
	Secret string   `mapstructure:"secret"`
	Events []string `mapstructure:"events"`
	// AllowPrivateURLs lets an endpoint resolve to a loopback, private,
	// link-local or otherwise internal address; off, such a URL is
	// refused at creation and at every connection (SSRF).
	AllowPrivateURLs bool `mapstructure:"allow_private_urls"`
	// Settle is how old an id must be before the dispatcher reads past
	// it: a transaction that took its id earlier has committed by then.
	// It must exceed logic.request_timeout (see Validate).
	Settle time.Duration `mapstructure:"settle"`
	// PollInterval is how often an idle dispatcher looks for new events
	// and endpoints.
	PollInterval time.Duration `mapstructure:"poll_interval"`
	// Batch is the most events read per query.
	Batch int `mapstructure:"batch"`
	// Timeout bounds one POST.
	Timeout time.Duration `mapstructure:"timeout"`
	// RetryBase is the first retry's delay; each next one is 4 times
	// longer up to RetryMaxInterval, until RetryFor after the first
	// failure, when the endpoint is marked dead.
	RetryBase        time.Duration `mapstructure:"retry_base"`
	RetryMaxInterval time.Duration `mapstructure:"retry_max_interval"`
	RetryFor         time.Duration `mapstructure:"retry_for"`
	// LeaseTTL is the life of an endpoint's dispatcher lease in Redis:
	// one logic at a time sends to an endpoint, another takes over at
	// most this long after it died.
	LeaseTTL time.Duration `mapstructure:"lease_ttl"`
	// GateSweepInterval is how often one logic looks for gates that died
	// (their registry key expired, or they came back as a new process) and
	// removes their routes, recording the user.offline of users left with
	// no device (decision 97).
	GateSweepInterval time.Duration `mapstructure:"gate_sweep_interval"`
}

// BeforeSend configures logic.before_send: an HTTP POST to the business
// server before a send is committed, whose answer allows, rejects or
// rewrites the message.
type BeforeSend struct {
	// URL is the hook's http(s) URL; empty turns the hook off. It is
	// operator config, so loopback and private addresses are allowed.
	URL string `mapstructure:"url"`
	// Secret signs every hook request as Standard Webhooks do
	// ("whsec_" + base64 of 24 to 64 bytes), so the business server can
	// verify it came from logic; required when URL is set.
	Secret string `mapstructure:"secret"`
	// P2P, Group and API select the sends that call the hook: a client's
	// one-to-one and group sends, and the business API's SendMessage
	// (whatever its conversation).
	P2P   bool `mapstructure:"p2p"`
	Group bool `mapstructure:"group"`
	API   bool `mapstructure:"api"`
	// Timeout bounds one call, at most MaxBeforeSendTimeout: the sender
	// waits for it.
	Timeout time.Duration `mapstructure:"timeout"`
	// OnError and OnTimeout are what a send does when the hook fails
	// (transport error, non-200 answer, malformed answer, content that
	// does not validate) or does not answer in time: HookAllow commits
	// the message as sent, HookReject refuses it with 50301. While the
	// breaker is open, OnError applies at once.
	OnError   string `mapstructure:"on_error"`
	OnTimeout string `mapstructure:"on_timeout"`
	// BreakerFailures consecutive failures (errors or timeouts) open the
	// breaker; after BreakerCooldown one probe call is let through
	// (half-open): its success closes the breaker, its failure opens it
	// again.
	BreakerFailures int           `mapstructure:"breaker_failures"`
	BreakerCooldown time.Duration `mapstructure:"breaker_cooldown"`
}

// The values of logic.before_send.on_error and on_timeout.
const (
	HookAllow  = "allow"
	HookReject = "reject"
)

// MaxBeforeSendTimeout is the most logic.before_send.timeout may be: the
// sender's SEND_ACK waits for the hook, and logic.request_timeout must
// leave room for the commit after it.
const MaxBeforeSendTimeout = 5 * time.Second

// RateLimit configures logic.rate_limit: a bucket per device and one per
// client address for each class of client command, and the block of an
// address that keeps failing AUTH (docs/decisions.md 67).
type RateLimit struct {
	// Enabled turns every limit of the section on or off at once.
	Enabled bool `mapstructure:"enabled"`
	// Auth is AUTH; Send SEND_MESSAGE and GENERATE_MSG_ID; Sync
	// SYNC_INBOX and SYNC_MESSAGES; Edit READ_MESSAGE, RECALL_MESSAGE,
	// DELETE_MESSAGE, CONVERSATION_SETTINGS, RELATION, GROUP and PUSH_SETTINGS;
	// Signal SIGNAL (typing and custom signals: cheap, never stored, but a
	// flood of them fans out to every online member).
	Auth   RateClass `mapstructure:"auth"`
	Send   RateClass `mapstructure:"send"`
	Sync   RateClass `mapstructure:"sync"`
	Edit   RateClass `mapstructure:"edit"`
	Signal RateClass `mapstructure:"signal"`
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
	// GateAddrTTL is how long a gate's resolved push address is trusted:
	// short, so a gate restarted on a new port is found again quickly.
	GateAddrTTL time.Duration `mapstructure:"gate_addr_ttl"`
	// MemberCacheIDs bounds the group member ids held in memory over every
	// group (8 bytes each).
	MemberCacheIDs int `mapstructure:"member_cache_ids"`
}

// Push configures offline push: deliver queues the notifications of
// offline devices (docs/decisions.md 90) and logic sends them through the
// providers configured here. Credentials are read from files, never
// written in the config; with none configured nothing is sent.
type Push struct {
	// Enabled turns the push queue on: deliver queues notification work
	// and logic sends it. Off, offline devices get nothing (sync still
	// brings every message).
	Enabled bool `mapstructure:"enabled"`
	// Partitions is the number of push streams; deliver and logic must
	// agree on it.
	Partitions int `mapstructure:"partitions"`
	// CollapseInterval is the least time between two notifications of one
	// conversation to one user: a group storm makes one notification per
	// interval, not one per message.
	CollapseInterval time.Duration `mapstructure:"collapse_interval"`
	// TTL is how long a provider keeps trying to reach a device
	// (apns-expiration, FCM ttl).
	TTL time.Duration `mapstructure:"ttl"`
	// ClaimIdle is how long a notification job may wait unacknowledged
	// before another logic takes it over (a crashed worker's jobs).
	ClaimIdle time.Duration `mapstructure:"claim_idle"`
	// SendTimeout bounds one provider request.
	SendTimeout time.Duration `mapstructure:"send_timeout"`
	// MaxAttempts bounds the tries of one notification a provider answers
	// 429 or 5xx (honouring Retry-After between them).
	MaxAttempts int `mapstructure:"max_attempts"`
	// CAFile, when set, is a PEM bundle trusted for the providers' TLS
	// instead of the system roots (a private gateway, a test).
	CAFile string `mapstructure:"ca_file"`
	APNs   APNs   `mapstructure:"apns"`
	FCM    FCM    `mapstructure:"fcm"`
	// Gateways are the push gateways devices may name, "name=https://url"
	// each; their requests are Standard Webhooks signed with
	// GatewaySecretFile's secret.
	Gateways []string `mapstructure:"gateways"`
	// GatewaySecretFile holds the signing secret ("whsec_" + base64).
	GatewaySecretFile string `mapstructure:"gateway_secret_file"`
}

// APNs configures Apple Push Notification service with a token (.p8) key.
type APNs struct {
	// KeyFile is the .p8 signing key (PEM, PKCS #8 EC P-256); empty: APNs
	// tokens are not served.
	KeyFile string `mapstructure:"key_file"`
	KeyID   string `mapstructure:"key_id"`
	TeamID  string `mapstructure:"team_id"`
	// Endpoint and SandboxEndpoint are the production and development
	// hosts.
	Endpoint        string `mapstructure:"endpoint"`
	SandboxEndpoint string `mapstructure:"sandbox_endpoint"`
}

// FCM configures Firebase Cloud Messaging HTTP v1.
type FCM struct {
	// CredentialsFile is the service-account JSON key (its project_id,
	// client_email, private_key and token_uri); empty: FCM tokens are not
	// served.
	CredentialsFile string `mapstructure:"credentials_file"`
	// Endpoint is the FCM API host.
	Endpoint string `mapstructure:"endpoint"`
}

// Default returns the built-in configuration with every field filled: the
// one place a default is written. It works on a developer machine except
// for the secrets, which have none, so production configs never inherit
// the development ones. The processes take their sections from a loaded,
// validated Config and do not re-default any field.
func Default() *Config {
	return &Config{
		Log:     Log{Level: "info"},
		Tracing: Tracing{Enabled: false, Endpoint: "http://127.0.0.1:4318/v1/traces", SampleRatio: 1},
		Cluster: Cluster{Secret: ""},
		Queue:   Queue{Partitions: 16},
		Gate: Gate{
			ID:                 "gate-1",
			TCPAddr:            "127.0.0.1:8100",
			PushAddr:           "127.0.0.1:8110",
			PushAdvertise:      "",
			ClientAdvertise:    []string{},
			AdminAddr:          "127.0.0.1:8120",
			LogicAddrs:         []string{"127.0.0.1:9000"},
			StreamsPerLogic:    4,
			MaxInflight:        4096,
			MaxInflightPerConn: 64,
			MaxFrameSize:       64 << 10,
			AuthTimeout:        10 * time.Second,
			IdleTimeout:        120 * time.Second,
			WriteTimeout:       5 * time.Second,
			OutboundQueue:      256,
			Shards:             64,
			// Above logic.request_timeout, so logic answers (or gives up
			// with an error of its own) before the gate answers 50301.
			RequestTimeout:     10 * time.Second,
			ShutdownKickWindow: 10 * time.Second,
			DrainTimeout:       5 * time.Second,
			SweepInterval:      time.Second,
			ProxyProtocol:      false,
			ProxyTrustedCIDRs:  []string{},
			// A balancer sends the PROXY header with the connection, at
			// once.
			ProxyHeaderTimeout: 3 * time.Second,
			TLSAddr:            "127.0.0.1:8443",
			TLSCertFile:        "",
			TLSKeyFile:         "",
			// A rotation shows within seconds, and two stat calls every
			// few seconds cost nothing.
			TLSReloadInterval:      5 * time.Second,
			TLSHandshakeTimeout:    10 * time.Second,
			TLSMaxHandshakes:       512,
			WSAddr:                 "127.0.0.1:8180",
			WSAllowedOrigins:       []string{},
			WSSAddr:                "",
			WSRealIPHeader:         "",
			ProxyProtocolListeners: []string{},
			// 5,000 is over twice what one bench source address holds on
			// one gate in the long profile (50,000 connections over 8
			// addresses and 3 gates), and a tenth of the 50,000 a gate is
			// sized for.
			MaxConnsPerIP:       5000,
			MaxUnauthenticated:  10000,
			PreAuthMaxFrameSize: 4 << 10,
		},
		Logic: Logic{
			GRPCAddr:  "127.0.0.1:9000",
			HTTPAddr:  "127.0.0.1:9010",
			AdminAddr: "127.0.0.1:9020",
			MachineID: 1,
			MySQL: MySQL{
				DSN:          "root@tcp(127.0.0.1:3306)/spark_im?parseTime=true&loc=UTC",
				MaxOpenConns: 64,
				MaxIdleConns: 64,
			},
			Redis: Redis{
				Addr: "127.0.0.1:6379", Addrs: []string{}, Cluster: false, Password: "", DB: 0, PoolSize: 64,
			},
			JWTSecret:      "",
			TokenTTL:       7 * 24 * time.Hour,
			APIKeys:        []string{},
			MsgIDWindow:    5 * time.Minute,
			EnqueueRetries: 3,
			// Rate limits (docs/decisions.md 67): per device a human's
			// pace with room for a catch-up burst; per address a flood
			// guard sized for many users behind one NAT, and above what
			// the bench sends through each of its 8 loopback addresses at
			// this machine's ceiling.
			RateLimit: RateLimit{
				Enabled:           true,
				Auth:              RateClass{DeviceRate: 1, DeviceBurst: 30, IPRate: 200, IPBurst: 10000},
				Send:              RateClass{DeviceRate: 100, DeviceBurst: 400, IPRate: 5000, IPBurst: 20000},
				Sync:              RateClass{DeviceRate: 100, DeviceBurst: 1000, IPRate: 2000, IPBurst: 20000},
				Edit:              RateClass{DeviceRate: 50, DeviceBurst: 500, IPRate: 1000, IPBurst: 10000},
				Signal:            RateClass{DeviceRate: 5, DeviceBurst: 20, IPRate: 1000, IPBurst: 10000},
				AuthFailures:      10,
				AuthFailureWindow: 5 * time.Minute,
				AuthBlock:         5 * time.Minute,
			},
			RecallWindow:     2 * time.Minute,
			EditWindow:       48 * time.Hour,
			ReactionKinds:    20,
			ReactionsPerUser: 10,
			CommitWorkers:    4,
			CommitBatch:      256,
			GroupMaxMembers:  10000,
			MaxFrameSize:     64 << 10,
			// Below gate.request_timeout (10 s): see Validate.
			RequestTimeout: 8 * time.Second,
			P2PPolicy:      P2POpen,
			SystemUserID:   1,
			// Off until a URL is set; when set, every kind of send calls
			// it, and a failing hook lets messages through (a chat that
			// stops because a moderation service is down is the worse
			// outage; an operator who must moderate every message sets
			// reject).
			BeforeSend: BeforeSend{
				URL: "", P2P: true, Group: true, API: true,
				Timeout: 1500 * time.Millisecond, OnError: HookAllow, OnTimeout: HookAllow,
				BreakerFailures: 5, BreakerCooldown: 10 * time.Second,
			},
			Webhook: Webhook{
				Enabled: false, URLs: []string{}, Secret: "", Events: []string{}, AllowPrivateURLs: false,
				// Above logic.request_timeout (8 s): see Validate.
				Settle:       10 * time.Second,
				PollInterval: 500 * time.Millisecond,
				Batch:        200,
				Timeout:      10 * time.Second,
				// 5 s, 20 s, 80 s, 5 m, 21 m, 85 m, 5.7 h, then every
				// 12 h: about 3 days in all (the Standard Webhooks
				// schedule's span).
				RetryBase:         5 * time.Second,
				RetryMaxInterval:  12 * time.Hour,
				RetryFor:          72 * time.Hour,
				LeaseTTL:          10 * time.Second,
				GateSweepInterval: 5 * time.Second,
			},
			Upstream: Upstream{
				Services: []string{}, MaxBody: 16 << 10,
				Visibility: 30 * time.Second, MaxWait: 30 * time.Second,
			},
			Media: Media{
				Store: MediaStoreLocal, Dir: ".run/media", PublicURL: "", Secret: "",
				UploadTTL: 15 * time.Minute, DownloadTTL: 5 * time.Minute,
				Limits: MediaLimits{Image: 20 << 20, Voice: 5 << 20, Video: 200 << 20, File: 100 << 20, Avatar: 2 << 20},
				S3:     MediaS3{Endpoint: "", Secure: false, Region: "us-east-1", Bucket: "", AccessKey: "", SecretKey: ""},
			},
		},
		Deliver: Deliver{
			ID:        "deliver-1",
			AdminAddr: "127.0.0.1:9040",
			Redis: Redis{
				Addr: "127.0.0.1:6379", Addrs: []string{}, Cluster: false, Password: "", DB: 0, PoolSize: 32,
			},
			BatchSize:    64,
			LeaseTTL:     10 * time.Second,
			PushTimeout:  3 * time.Second,
			LogicAddrs:   []string{"127.0.0.1:9000"},
			LogicTimeout: 2 * time.Second,
			GateAddrTTL:  2 * time.Second,
			// 2 million ids are 16 MiB.
			MemberCacheIDs: 2_000_000,
		},
		Push: Push{
			Enabled:    false,
			Partitions: 4,
			// A chatty group buzzes the phone at most once in 10 s.
			CollapseInterval: 10 * time.Second,
			TTL:              24 * time.Hour,
			ClaimIdle:        30 * time.Second,
			// Under half of claim_idle (Validate).
			SendTimeout: 10 * time.Second,
			MaxAttempts: 5,
			CAFile:      "",
			APNs: APNs{
				KeyFile: "", KeyID: "", TeamID: "",
				Endpoint:        "https://api.push.apple.com",
				SandboxEndpoint: "https://api.sandbox.push.apple.com",
			},
			FCM:               FCM{CredentialsFile: "", Endpoint: "https://fcm.googleapis.com"},
			Gateways:          []string{},
			GatewaySecretFile: "",
		},
	}
}

// Setting is one configuration key with its built-in value.
type Setting struct {
	// Key is the dotted path ("logic.mysql.dsn").
	Key string
	// Default is the value Default gives it.
	Default any
}

// Env is the environment variable that overrides the key.
func (s Setting) Env() string { return EnvName(s.Key) }

// EnvName is the environment variable that overrides key: IM_ and the key
// upper-cased with "_" for ".".
func EnvName(key string) string {
	return "IM_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// Settings lists every key of c in declaration order with its value,
// walking the mapstructure tags, so the keys viper knows (and lets the
// environment override) are exactly the fields of Config. Settings of
// Default() are the built-in values.
func Settings(c *Config) []Setting {
	var out []Setting
	walk(reflect.ValueOf(c).Elem(), "", &out)
	return out
}

func walk(v reflect.Value, prefix string, out *[]Setting) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("mapstructure")
		if tag == "" || tag == "-" {
			continue
		}
		key := prefix + tag
		fv := v.Field(i)
		if fv.Kind() == reflect.Struct {
			walk(fv, key+".", out)
			continue
		}
		if fv.Kind() == reflect.Slice && fv.IsNil() {
			// A nil default would leave the key unknown to viper, so
			// its environment variable would be ignored.
			fv = reflect.MakeSlice(fv.Type(), 0, 0)
		}
		*out = append(*out, Setting{Key: key, Default: fv.Interface()})
	}
}

// Load builds the configuration: Default, then the file at path (empty:
// none), then the IM_* environment, then Validate.
func Load(path string) (*Config, error) {
	v := viper.New()
	for _, s := range Settings(Default()) {
		v.SetDefault(s.Key, s.Default)
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
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate refuses every value the processes cannot run with, naming the
// key, so a bad config fails at start rather than being replaced by a
// default far from its cause. It checks every section, and the rules that
// span processes (every process loads the same file).
func (c *Config) Validate() error {
	errs := []error{
		c.Gate.Validate(),
		c.Logic.Validate(),
		c.Deliver.Validate(),
		c.Push.Validate(),
		c.Tracing.Validate(),
		validateCrossProcess(c),
	}
	if c.Queue.Partitions < 1 {
		errs = append(errs, errors.New("config: queue.partitions must be at least 1"))
	}
	return errors.Join(errs...)
}

// validateCrossProcess checks the rules between the gate's and logic's
// sections.
func validateCrossProcess(c *Config) error {
	var errs []error
	if c.Gate.MaxFrameSize != c.Logic.MaxFrameSize {
		// logic sizes MESSAGE pushes and sync pages for the clients'
		// limit; a gate with another limit would close clients on frames
		// logic accepted, or refuse sends logic would take.
		errs = append(errs, fmt.Errorf("config: gate.max_frame_size (%d) and logic.max_frame_size (%d) must be equal",
			c.Gate.MaxFrameSize, c.Logic.MaxFrameSize))
	}
	if c.Logic.RequestTimeout >= c.Gate.RequestTimeout {
		// logic must answer (with its own error) before the gate gives
		// up on the request and answers 50301 itself.
		errs = append(errs, fmt.Errorf("config: logic.request_timeout (%v) must be below gate.request_timeout (%v)",
			c.Logic.RequestTimeout, c.Gate.RequestTimeout))
	}
	return errors.Join(errs...)
}

// positive appends an error for each named value that is not above zero.
func positive[T int | int64 | time.Duration](errs []error, vals ...struct {
	key string
	v   T
}) []error {
	for _, x := range vals {
		if x.v <= 0 {
			errs = append(errs, fmt.Errorf("config: %s must be positive (got %v)", x.key, x.v))
		}
	}
	return errs
}

type intKey = struct {
	key string
	v   int
}

type durKey = struct {
	key string
	v   time.Duration
}

// Validate checks the gate section.
func (g Gate) Validate() error {
	var errs []error
	if g.ID == "" {
		errs = append(errs, errors.New("config: gate.id is empty"))
	}
	if len(g.LogicAddrs) == 0 {
		errs = append(errs, errors.New("config: gate.logic_addrs is empty"))
	}
	errs = positive(errs,
		intKey{"gate.streams_per_logic", g.StreamsPerLogic},
		intKey{"gate.max_inflight", g.MaxInflight},
		intKey{"gate.max_inflight_per_conn", g.MaxInflightPerConn},
		intKey{"gate.outbound_queue", g.OutboundQueue},
		intKey{"gate.shards", g.Shards},
		intKey{"gate.tls_max_handshakes", g.TLSMaxHandshakes},
	)
	errs = positive(errs,
		durKey{"gate.auth_timeout", g.AuthTimeout},
		durKey{"gate.idle_timeout", g.IdleTimeout},
		durKey{"gate.write_timeout", g.WriteTimeout},
		durKey{"gate.request_timeout", g.RequestTimeout},
		durKey{"gate.drain_timeout", g.DrainTimeout},
		durKey{"gate.sweep_interval", g.SweepInterval},
		durKey{"gate.proxy_header_timeout", g.ProxyHeaderTimeout},
		durKey{"gate.tls_reload_interval", g.TLSReloadInterval},
		durKey{"gate.tls_handshake_timeout", g.TLSHandshakeTimeout},
	)
	if g.MaxFrameSize < 4<<10 {
		errs = append(errs, fmt.Errorf("config: gate.max_frame_size must be at least 4096 bytes (got %d)", g.MaxFrameSize))
	}
	if g.TLSEnabled() {
		if g.TLSCertFile == "" || g.TLSKeyFile == "" {
			errs = append(errs, errors.New("config: gate.tls_cert_file and gate.tls_key_file must be set together"))
		}
		if g.TLSAddr == "" {
			errs = append(errs, errors.New("config: gate.tls_addr is empty while gate.tls_cert_file is set"))
		}
	} else if g.WSSAddr != "" {
		errs = append(errs, errors.New("config: gate.wss_addr needs gate.tls_cert_file and gate.tls_key_file"))
	}
	errs = append(errs, validateWS(g), validateGateLimits(g))
	return errors.Join(errs...)
}

// Validate checks the logic section.
func (l Logic) Validate() error {
	var errs []error
	errs = append(errs, validateRateLimit(l.RateLimit), l.Redis.Validate("logic.redis"))
	if l.CommitWorkers < 1 || l.CommitBatch < 1 {
		errs = append(errs, fmt.Errorf("config: logic.commit_workers (%d) and logic.commit_batch (%d) must be at least 1: every send goes through the group commit",
			l.CommitWorkers, l.CommitBatch))
	}
	if l.MaxFrameSize < 4<<10 {
		errs = append(errs, errors.New("config: logic.max_frame_size must be at least 4096 bytes"))
	}
	if l.HTTPAddr == "" {
		errs = append(errs, errors.New("config: logic.http_addr must be set (the HTTP/JSON business API listens there)"))
	}
	if l.GroupMaxMembers < 1 {
		errs = append(errs, errors.New("config: logic.group_max_members must be at least 1"))
	}
	if l.ReactionKinds < 1 || l.ReactionKinds > protocol.MaxReactionKinds {
		errs = append(errs, fmt.Errorf("config: logic.reaction_kinds is %d; want 1 to %d", l.ReactionKinds, protocol.MaxReactionKinds))
	}
	if l.ReactionsPerUser < 1 || l.ReactionsPerUser > l.ReactionKinds {
		errs = append(errs, fmt.Errorf("config: logic.reactions_per_user is %d; want 1 to logic.reaction_kinds (%d)", l.ReactionsPerUser, l.ReactionKinds))
	}
	if l.SystemUserID < 1 {
		errs = append(errs, errors.New("config: logic.system_user_id must be a positive user id"))
	}
	errs = append(errs, l.validateWebhook(), l.validateUpstream(), l.Media.Validate())
	errs = positive(errs, intKey{"logic.enqueue_retries", l.EnqueueRetries})
	errs = positive(errs,
		durKey{"logic.token_ttl", l.TokenTTL},
		durKey{"logic.msg_id_window", l.MsgIDWindow},
		durKey{"logic.recall_window", l.RecallWindow}, durKey{"logic.edit_window", l.EditWindow},
		durKey{"logic.request_timeout", l.RequestTimeout},
	)
	switch l.P2PPolicy {
	case P2POpen, P2PFriendsOnly:
	default:
		// A typo must not silently open a friends-only deployment.
		errs = append(errs, fmt.Errorf("config: logic.p2p_policy is %q; want %q or %q", l.P2PPolicy, P2POpen, P2PFriendsOnly))
	}
	errs = append(errs, l.BeforeSend.Validate())
	if l.BeforeSend.Timeout >= l.RequestTimeout {
		// The send waits for the hook, then commits: both within the
		// request's own deadline.
		errs = append(errs, fmt.Errorf("config: logic.before_send.timeout (%v) must be below logic.request_timeout (%v)",
			l.BeforeSend.Timeout, l.RequestTimeout))
	}
	return errors.Join(errs...)
}

// Validate checks logic.before_send. The URL may name any host, loopback
// and private ranges included (an operator's own service); it must parse
// as an absolute http(s) URL.
func (b BeforeSend) Validate() error {
	var errs []error
	if b.URL != "" {
		u, err := url.Parse(b.URL)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("config: logic.before_send.url: %w", err))
		case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			errs = append(errs, fmt.Errorf("config: logic.before_send.url %q: want an http:// or https:// URL with a host", b.URL))
		}
		if _, err := stdwebhook.ParseSecret(b.Secret); err != nil {
			errs = append(errs, fmt.Errorf("config: logic.before_send.secret (required with logic.before_send.url): %w", err))
		}
	}
	if b.Timeout <= 0 || b.Timeout > MaxBeforeSendTimeout {
		errs = append(errs, fmt.Errorf("config: logic.before_send.timeout %v must be above 0 and at most %v", b.Timeout, MaxBeforeSendTimeout))
	}
	for _, p := range []struct{ key, v string }{{"on_error", b.OnError}, {"on_timeout", b.OnTimeout}} {
		if p.v != HookAllow && p.v != HookReject {
			errs = append(errs, fmt.Errorf("config: logic.before_send.%s is %q; want %q or %q", p.key, p.v, HookAllow, HookReject))
		}
	}
	errs = positive(errs, intKey{"logic.before_send.breaker_failures", b.BreakerFailures})
	errs = positive(errs, durKey{"logic.before_send.breaker_cooldown", b.BreakerCooldown})
	return errors.Join(errs...)
}

// validateWebhook checks logic.webhook.
// ClientMsgIDWindow is how old a client-supplied msg_id may be and still
// be kept: logic.msg_id_window, and with webhooks on at most
// logic.webhook.settle less logic.request_timeout. The webhook dispatcher
// reads past an id once it is settle old; a send commits within a
// request's life of being accepted, so a kept id is committed before the
// dispatcher reaches it. An older id is replaced, as any unusable client
// id is (docs/decisions.md 14, 93).
func (l Logic) ClientMsgIDWindow() time.Duration {
	if !l.Webhook.Enabled {
		return l.MsgIDWindow
	}
	return min(l.MsgIDWindow, l.Webhook.Settle-l.RequestTimeout)
}

func (l Logic) validateWebhook() error {
	w := l.Webhook
	var errs []error
	errs = positive(errs, intKey{"logic.webhook.batch", w.Batch})
	errs = positive(errs,
		durKey{"logic.webhook.poll_interval", w.PollInterval},
		durKey{"logic.webhook.timeout", w.Timeout},
		durKey{"logic.webhook.retry_base", w.RetryBase},
		durKey{"logic.webhook.retry_max_interval", w.RetryMaxInterval},
		durKey{"logic.webhook.retry_for", w.RetryFor},
		durKey{"logic.webhook.lease_ttl", w.LeaseTTL},
		durKey{"logic.webhook.gate_sweep_interval", w.GateSweepInterval},
	)
	if w.Settle <= l.RequestTimeout {
		// A send or change may commit up to a request's life after it
		// took its id; a dispatcher reading past that id sooner would
		// skip it for good.
		errs = append(errs, fmt.Errorf("config: logic.webhook.settle (%v) must exceed logic.request_timeout (%v)", w.Settle, l.RequestTimeout))
	}
	if w.RetryMaxInterval < w.RetryBase {
		errs = append(errs, fmt.Errorf("config: logic.webhook.retry_max_interval (%v) must be at least logic.webhook.retry_base (%v)", w.RetryMaxInterval, w.RetryBase))
	}
	if len(w.URLs) > 0 {
		if _, err := stdwebhook.ParseSecret(w.Secret); err != nil {
			errs = append(errs, fmt.Errorf("config: logic.webhook.secret (needed by logic.webhook.urls): %w", err))
		}
		for _, u := range w.URLs {
			pu, err := url.Parse(u)
			if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
				errs = append(errs, fmt.Errorf("config: logic.webhook.urls entry %q: want an http or https URL", u))
			}
		}
	}
	return errors.Join(errs...)
}

// upstreamService is what a logic.upstream.services name may be: short
// enough that its event type, "upstream." and the name, fits
// t_webhook_events.event_type (32).
var upstreamService = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,22}$`)

// validateUpstream checks logic.upstream.
func (l Logic) validateUpstream() error {
	u := l.Upstream
	var errs []error
	errs = positive(errs, intKey{"logic.upstream.max_body", u.MaxBody})
	errs = positive(errs, durKey{"logic.upstream.visibility", u.Visibility}, durKey{"logic.upstream.max_wait", u.MaxWait})
	if u.MaxBody > l.MaxFrameSize/2 {
		// The body travels JSON-escaped inside a frame of at most
		// max_frame_size; half leaves room for escaping and the envelope.
		errs = append(errs, fmt.Errorf("config: logic.upstream.max_body (%d) must be at most half of logic.max_frame_size (%d)", u.MaxBody, l.MaxFrameSize))
	}
	seen := map[string]bool{}
	for _, s := range u.Services {
		if !upstreamService.MatchString(s) {
			errs = append(errs, fmt.Errorf("config: logic.upstream.services entry %q: want 1-23 of a-z, 0-9, _ and -, starting with a letter or digit", s))
		}
		if seen[s] {
			errs = append(errs, fmt.Errorf("config: logic.upstream.services names %q twice", s))
		}
		seen[s] = true
	}
	return errors.Join(errs...)
}

// Validate checks logic.media.
func (m Media) Validate() error {
	var errs []error
	errs = positive(errs, durKey{"logic.media.upload_ttl", m.UploadTTL}, durKey{"logic.media.download_ttl", m.DownloadTTL})
	for _, l := range []struct {
		key string
		n   int64
	}{{"image", m.Limits.Image}, {"voice", m.Limits.Voice}, {"video", m.Limits.Video}, {"file", m.Limits.File}, {"avatar", m.Limits.Avatar}} {
		if l.n < 1 {
			errs = append(errs, fmt.Errorf("config: logic.media.limits.%s must be at least 1 byte", l.key))
		}
	}
	switch m.Store {
	case MediaStoreLocal:
		if m.Dir == "" {
			errs = append(errs, errors.New("config: logic.media.dir must be set for the local media store"))
		}
		if m.PublicURL != "" {
			if u, err := url.Parse(m.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, fmt.Errorf("config: logic.media.public_url %q must be an absolute http(s) URL", m.PublicURL))
			}
		}
	case MediaStoreS3:
		if m.S3.Endpoint == "" || m.S3.Bucket == "" || m.S3.AccessKey == "" || m.S3.SecretKey == "" {
			errs = append(errs, errors.New("config: logic.media.s3.endpoint, bucket, access_key and secret_key must be set for the s3 media store"))
		}
	default:
		// A typo must not silently keep media on one machine's disk.
		errs = append(errs, fmt.Errorf("config: logic.media.store is %q; want %q or %q", m.Store, MediaStoreLocal, MediaStoreS3))
	}
	return errors.Join(errs...)
}

// Validate checks the deliver section.
func (d Deliver) Validate() error {
	var errs []error
	errs = append(errs, d.Redis.Validate("deliver.redis"))
	if d.ID == "" {
		errs = append(errs, errors.New("config: deliver.id is empty"))
	}
	if len(d.LogicAddrs) == 0 {
		errs = append(errs, errors.New("config: deliver.logic_addrs is empty"))
	}
	errs = positive(errs, intKey{"deliver.batch_size", d.BatchSize}, intKey{"deliver.member_cache_ids", d.MemberCacheIDs})
	errs = positive(errs,
		durKey{"deliver.lease_ttl", d.LeaseTTL},
		durKey{"deliver.push_timeout", d.PushTimeout},
		durKey{"deliver.logic_timeout", d.LogicTimeout},
		durKey{"deliver.gate_addr_ttl", d.GateAddrTTL},
	)
	return errors.Join(errs...)
}

// Validate checks the push section. Credentials are checked when logic
// loads them: a key file it cannot read fails its start.
func (p Push) Validate() error {
	var errs []error
	errs = positive(errs, intKey{"push.partitions", p.Partitions}, intKey{"push.max_attempts", p.MaxAttempts})
	errs = positive(errs,
		durKey{"push.collapse_interval", p.CollapseInterval},
		durKey{"push.ttl", p.TTL},
		durKey{"push.claim_idle", p.ClaimIdle},
		durKey{"push.send_timeout", p.SendTimeout},
	)
	if p.SendTimeout >= p.ClaimIdle/2 {
		// A worker renews its claim on a notification before each try.
		errs = append(errs, fmt.Errorf("config: push.send_timeout %v must be under half of push.claim_idle %v", p.SendTimeout, p.ClaimIdle))
	}
	if p.APNs.KeyFile != "" && (p.APNs.KeyID == "" || p.APNs.TeamID == "") {
		errs = append(errs, errors.New("config: push.apns.key_file needs push.apns.key_id and push.apns.team_id"))
	}
	for _, u := range []struct{ key, v string }{
		{"push.apns.endpoint", p.APNs.Endpoint}, {"push.apns.sandbox_endpoint", p.APNs.SandboxEndpoint}, {"push.fcm.endpoint", p.FCM.Endpoint},
	} {
		if err := httpsURL(u.key, u.v); err != nil {
			errs = append(errs, err)
		}
	}
	seen := map[string]bool{}
	for _, g := range p.Gateways {
		name, u, ok := strings.Cut(g, "=")
		if !ok || name == "" || seen[name] {
			errs = append(errs, fmt.Errorf("config: push.gateways entry %q: want a unique name=https://url", g))
			continue
		}
		seen[name] = true
		if err := httpsURL("push.gateways "+name, u); err != nil {
			errs = append(errs, err)
		}
	}
	if len(p.Gateways) > 0 && p.GatewaySecretFile == "" {
		errs = append(errs, errors.New("config: push.gateways needs push.gateway_secret_file (requests are signed)"))
	}
	return errors.Join(errs...)
}

// httpsURL refuses a provider address that is not an https URL: tokens
// and message previews never travel in clear.
func httpsURL(key, v string) error {
	u, err := url.Parse(v)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("config: %s is %q; want an https:// URL", key, v)
	}
	return nil
}

// RequireSecret fails when a secret the process needs is empty.
func RequireSecret(name, value string) error {
	if value == "" {
		return fmt.Errorf("config: %s is empty; set it in the config file or %s", name, EnvName(name))
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
	}{{"auth", r.Auth}, {"send", r.Send}, {"sync", r.Sync}, {"edit", r.Edit}, {"signal", r.Signal}} {
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
