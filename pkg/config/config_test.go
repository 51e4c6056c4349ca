package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "im.yaml")
	if err := os.WriteFile(path, []byte("logic:\n  jwt_secret: from-file\n  machine_id: 5\ngate:\n  idle_timeout: 30s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("IM_LOGIC_MYSQL_DSN", "u@tcp(db:3306)/x")
	t.Setenv("IM_LOGIC_MACHINE_ID", "9")
	t.Setenv("IM_GATE_LOGIC_ADDRS", "a:1,b:2")
	t.Setenv("IM_LOGIC_API_KEYS", "k1")
	t.Setenv("IM_DELIVER_LOGIC_ADDRS", "l1:9000,l2:9000")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		got, want any
	}{
		{"file value", c.Logic.JWTSecret, "from-file"},
		{"env beats file", c.Logic.MachineID, 9},
		{"env string", c.Logic.MySQL.DSN, "u@tcp(db:3306)/x"},
		{"file duration", c.Gate.IdleTimeout, 30 * time.Second},
		{"default duration", c.Gate.AuthTimeout, 10 * time.Second},
		{"env list", len(c.Gate.LogicAddrs), 2},
		{"env single list", len(c.Logic.APIKeys), 1},
		{"advertise defaults to listen", c.Gate.PushAdvertise, c.Gate.PushAddr},
		{"no default secret", c.Cluster.Secret, ""},
		{"deliver logic addrs from env", len(c.Deliver.LogicAddrs), 2},
		{"deliver logic timeout default", c.Deliver.LogicTimeout, 2 * time.Second},
		{"group member limit default", c.Logic.GroupMaxMembers, 10000},
		{"p2p policy default", c.Logic.P2PPolicy, P2POpen},
		{"system user default", c.Logic.SystemUserID, int64(1)},
		{"http addr default", c.Logic.HTTPAddr, "127.0.0.1:9010"},
		{"group commit on by default", c.Logic.CommitWorkers, 4},
		{"commit batch default", c.Logic.CommitBatch, 256},
		{"no client advertise by default", len(c.Gate.ClientAdvertise), 0},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v want %v", tt.name, tt.got, tt.want)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("missing file accepted")
	}
	for _, tt := range []struct {
		policy  string
		wantErr bool
	}{{"open", false}, {"friends_only", false}, {"friends", true}, {"OPEN", true}} {
		t.Setenv("IM_LOGIC_P2P_POLICY", tt.policy)
		c, err := Load("")
		if (err != nil) != tt.wantErr {
			t.Errorf("p2p_policy %q: err = %v, want error %v", tt.policy, err, tt.wantErr)
		}
		if err == nil && c.Logic.P2PPolicy != tt.policy {
			t.Errorf("p2p_policy %q loaded as %q", tt.policy, c.Logic.P2PPolicy)
		}
	}
	t.Setenv("IM_LOGIC_P2P_POLICY", "open")
	for _, tt := range []struct {
		id      string
		wantErr bool
	}{{"7", false}, {"0", true}, {"-3", true}} {
		t.Setenv("IM_LOGIC_SYSTEM_USER_ID", tt.id)
		if _, err := Load(""); (err != nil) != tt.wantErr {
			t.Errorf("system_user_id %s: err = %v, want error %v", tt.id, err, tt.wantErr)
		}
	}
	t.Setenv("IM_LOGIC_SYSTEM_USER_ID", "1")
	for _, tt := range []struct {
		workers string
		wantErr bool
	}{{"1", false}, {"8", false}, {"0", true}, {"-1", true}} {
		t.Setenv("IM_LOGIC_COMMIT_WORKERS", tt.workers)
		if _, err := Load(""); (err != nil) != tt.wantErr {
			t.Errorf("commit_workers %s: err = %v, want error %v", tt.workers, err, tt.wantErr)
		}
	}
	if RequireSecret("logic.jwt_secret", "") == nil {
		t.Error("empty secret accepted")
	}
}

// TLS is off by default; a cert without its key (or the reverse) is a
// configuration error rather than a listener that fails every handshake.
func TestLoadTLS(t *testing.T) {
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Gate.TLSEnabled() || c.Gate.TLSAddr != "127.0.0.1:8443" || c.Gate.TLSMaxHandshakes != 512 {
		t.Fatalf("tls defaults: enabled=%v addr=%q max=%d", c.Gate.TLSEnabled(), c.Gate.TLSAddr, c.Gate.TLSMaxHandshakes)
	}
	t.Setenv("IM_GATE_TLS_CERT_FILE", "/x/cert.pem")
	if _, err := Load(""); err == nil {
		t.Fatal("cert without key accepted")
	}
	t.Setenv("IM_GATE_TLS_KEY_FILE", "/x/key.pem")
	c, err = Load("")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Gate.TLSEnabled() {
		t.Fatal("tls not enabled with cert and key")
	}
	t.Setenv("IM_GATE_TLS_MAX_HANDSHAKES", "0")
	if _, err := Load(""); err == nil {
		t.Fatal("tls_max_handshakes 0 accepted")
	}
}

// WebSocket listens on its own port by default and allows any origin; a
// bad address or an origin that is not scheme://host fails the load.
func TestLoadWS(t *testing.T) {
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Gate.WSAddr != "127.0.0.1:8180" || len(c.Gate.WSAllowedOrigins) != 0 {
		t.Fatalf("ws defaults: addr=%q origins=%v", c.Gate.WSAddr, c.Gate.WSAllowedOrigins)
	}
	t.Setenv("IM_GATE_WS_ALLOWED_ORIGINS", "https://h5.example.com,http://localhost:3000")
	c, err = Load("")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Gate.WSAllowedOrigins) != 2 || c.Gate.WSAllowedOrigins[1] != "http://localhost:3000" {
		t.Fatalf("origins %v", c.Gate.WSAllowedOrigins)
	}
	for _, bad := range []string{"h5.example.com", "https://h5.example.com/app", "ftp://x"} {
		t.Setenv("IM_GATE_WS_ALLOWED_ORIGINS", bad)
		if _, err := Load(""); err == nil {
			t.Fatalf("origin %q accepted", bad)
		}
	}
	t.Setenv("IM_GATE_WS_ALLOWED_ORIGINS", "")
	t.Setenv("IM_GATE_WS_ADDR", "no-port")
	if _, err := Load(""); err == nil {
		t.Fatal("ws_addr without port accepted")
	}
}

// The wss listener, per-listener PROXY and the WebSocket real-IP header:
// each read from the environment, each typo or unusable combination
// refused at load.
func TestLoadWSSAndProxyListeners(t *testing.T) {
	t.Setenv("IM_GATE_WSS_ADDR", "127.0.0.1:8543")
	t.Setenv("IM_GATE_TLS_CERT_FILE", "/x/cert.pem")
	t.Setenv("IM_GATE_TLS_KEY_FILE", "/x/key.pem")
	t.Setenv("IM_GATE_PROXY_PROTOCOL_LISTENERS", "tcp,tls")
	t.Setenv("IM_GATE_PROXY_TRUSTED_CIDRS", "10.0.0.0/8")
	t.Setenv("IM_GATE_WS_REAL_IP_HEADER", "X-Forwarded-For")
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Gate.WSSAddr != "127.0.0.1:8543" || len(c.Gate.ProxyProtocolListeners) != 2 || c.Gate.WSRealIPHeader != "X-Forwarded-For" {
		t.Fatalf("gate %+v", c.Gate)
	}
	for _, tc := range []struct{ name, key, value string }{
		{"wss address without port", "IM_GATE_WSS_ADDR", "no-port"},
		{"unknown listener", "IM_GATE_PROXY_PROTOCOL_LISTENERS", "tcp,http"},
		{"real-IP header with nobody trusted", "IM_GATE_PROXY_TRUSTED_CIDRS", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.key, tc.value)
			if _, err := Load(""); err == nil {
				t.Fatalf("%s=%q accepted", tc.key, tc.value)
			}
		})
	}
	t.Run("wss without the certificate files", func(t *testing.T) {
		t.Setenv("IM_GATE_TLS_CERT_FILE", "")
		t.Setenv("IM_GATE_TLS_KEY_FILE", "")
		if _, err := Load(""); err == nil || !strings.Contains(err.Error(), "gate.wss_addr needs gate.tls_cert_file") {
			t.Fatalf("wss_addr without TLS: err %v", err)
		}
	})
}

// The rate limits and gate caps have working defaults, every key is
// reachable from the environment, and a bucket that is on without a burst
// (or a negative cap) is refused at load rather than limiting nothing.
func TestLoadRateLimits(t *testing.T) {
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	rl := c.Logic.RateLimit
	defaults := []struct {
		name      string
		got, want any
	}{
		{"on by default", rl.Enabled, true},
		{"send per device", rl.Send, RateClass{DeviceRate: 100, DeviceBurst: 400, IPRate: 5000, IPBurst: 20000}},
		{"auth per device", rl.Auth, RateClass{DeviceRate: 1, DeviceBurst: 30, IPRate: 200, IPBurst: 10000}},
		{"auth failures", rl.AuthFailures, 10},
		{"auth failure window", rl.AuthFailureWindow, 5 * time.Minute},
		{"auth block", rl.AuthBlock, 5 * time.Minute},
		{"conns per ip", c.Gate.MaxConnsPerIP, 5000},
		{"unauthenticated", c.Gate.MaxUnauthenticated, 10000},
		{"pre-auth frame", c.Gate.PreAuthMaxFrameSize, 4096},
	}
	for _, tt := range defaults {
		if tt.got != tt.want {
			t.Errorf("%s: got %+v want %+v", tt.name, tt.got, tt.want)
		}
	}
	t.Setenv("IM_LOGIC_RATE_LIMIT_SYNC_IP_RATE", "7.5")
	t.Setenv("IM_LOGIC_RATE_LIMIT_EDIT_DEVICE_BURST", "9")
	t.Setenv("IM_LOGIC_RATE_LIMIT_AUTH_BLOCK", "30s")
	t.Setenv("IM_GATE_MAX_CONNS_PER_IP", "0")
	if c, err = Load(""); err != nil {
		t.Fatal(err)
	}
	if c.Logic.RateLimit.Sync.IPRate != 7.5 || c.Logic.RateLimit.Edit.DeviceBurst != 9 || c.Logic.RateLimit.AuthBlock != 30*time.Second || c.Gate.MaxConnsPerIP != 0 {
		t.Fatalf("env overrides not applied: %+v, max_conns_per_ip %d", c.Logic.RateLimit, c.Gate.MaxConnsPerIP)
	}
	refused := []struct {
		name, key, value string
	}{
		{"rate without burst", "IM_LOGIC_RATE_LIMIT_SEND_IP_BURST", "0"},
		{"negative rate", "IM_LOGIC_RATE_LIMIT_AUTH_DEVICE_RATE", "-1"},
		{"negative failures", "IM_LOGIC_RATE_LIMIT_AUTH_FAILURES", "-1"},
		{"block without duration", "IM_LOGIC_RATE_LIMIT_AUTH_BLOCK", "0s"},
		{"negative conn cap", "IM_GATE_MAX_UNAUTHENTICATED", "-5"},
		{"pre-auth frame too small for a token", "IM_GATE_PREAUTH_MAX_FRAME_SIZE", "100"},
		{"pre-auth frame over max_frame_size", "IM_GATE_PREAUTH_MAX_FRAME_SIZE", "100000"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(tt.key, tt.value)
			if _, err := Load(""); err == nil {
				t.Fatalf("%s=%s accepted", tt.key, tt.value)
			}
		})
	}
}

// logic.redis and deliver.redis take a list of cluster seeds from the file
// or from the environment (comma-separated), and a cluster with a DB
// other than 0 is refused at load.
func TestLoadRedisClusterAddrsFromFileAndEnv(t *testing.T) {
	// make test exports the services' Redis (IM_*_REDIS_ADDR); an empty
	// variable counts as unset, so only this test's values apply.
	for _, sec := range []string{"LOGIC", "DELIVER"} {
		for _, k := range []string{"ADDR", "ADDRS", "CLUSTER", "DB"} {
			t.Setenv("IM_"+sec+"_REDIS_"+k, "")
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "im.yaml")
	yaml := "logic:\n  redis: {addrs: [\"10.0.0.1:7000\", \"10.0.0.2:7000\"]}\ndeliver:\n  redis: {addr: \"10.0.0.9:7000\", cluster: true}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defaults, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("IM_LOGIC_REDIS_ADDRS", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003")
	fromEnv, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		r            Redis
		wantCluster  bool
		wantEndpoint []string
	}{
		{"addrs from the file", c.Logic.Redis, true, []string{"10.0.0.1:7000", "10.0.0.2:7000"}},
		{"cluster flag with one seed", c.Deliver.Redis, true, []string{"10.0.0.9:7000"}},
		{"addrs from IM_LOGIC_REDIS_ADDRS", fromEnv.Logic.Redis, true, []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}},
		{"default is one local server", defaults.Logic.Redis, false, []string{"127.0.0.1:6379"}},
		{"deliver default is one local server", defaults.Deliver.Redis, false, []string{"127.0.0.1:6379"}},
	}
	for _, tt := range tests {
		if got := tt.r.ClusterMode(); got != tt.wantCluster {
			t.Errorf("%s: cluster mode %v, want %v", tt.name, got, tt.wantCluster)
		}
		if got := tt.r.Endpoints(); strings.Join(got, ",") != strings.Join(tt.wantEndpoint, ",") {
			t.Errorf("%s: endpoints %v, want %v", tt.name, got, tt.wantEndpoint)
		}
	}
	refused := []struct {
		name string
		env  map[string]string
	}{
		{"logic cluster with db 1", map[string]string{"IM_LOGIC_REDIS_DB": "1"}},
		{"deliver cluster flag with db 4", map[string]string{"IM_DELIVER_REDIS_DB": "4"}},
		{"deliver addrs with db 2", map[string]string{"IM_DELIVER_REDIS_ADDRS": "127.0.0.1:1,127.0.0.1:2", "IM_DELIVER_REDIS_CLUSTER": "false", "IM_DELIVER_REDIS_DB": "2"}},
		{"an address without a port", map[string]string{"IM_LOGIC_REDIS_ADDRS": "127.0.0.1:7001,redis-b"}},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if _, err := Load(path); err == nil {
				t.Fatalf("%v accepted", tt.env)
			}
		})
	}
	// A single server keeps its DB index.
	t.Setenv("IM_LOGIC_REDIS_ADDRS", "")
	t.Setenv("IM_DELIVER_REDIS_CLUSTER", "false")
	t.Setenv("IM_LOGIC_REDIS_DB", "5")
	if _, err := Load(""); err != nil {
		t.Fatalf("a single server with db 5 refused: %v", err)
	}
}

// logic.before_send: a loopback URL is operator config and accepted; a URL
// that does not parse as http(s), a URL without a whsec_ secret, a timeout over 5 s or not below
// logic.request_timeout, an unknown policy and a breaker without a
// threshold or cooldown are refused at load.
func TestLoadBeforeSend(t *testing.T) {
	t.Setenv("IM_LOGIC_BEFORE_SEND_URL", "http://127.0.0.1:8080/hooks/before-send")
	t.Setenv("IM_LOGIC_BEFORE_SEND_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	t.Setenv("IM_LOGIC_BEFORE_SEND_ON_TIMEOUT", "reject")
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	b := c.Logic.BeforeSend
	if b.URL != "http://127.0.0.1:8080/hooks/before-send" || b.OnTimeout != HookReject || b.OnError != HookAllow ||
		b.Timeout != 1500*time.Millisecond || !b.P2P || !b.Group || !b.API {
		t.Fatalf("before_send = %+v", b)
	}
	refused := []struct {
		name, key, value string
	}{
		{"url without scheme", "IM_LOGIC_BEFORE_SEND_URL", "127.0.0.1:8080/hook"},
		{"url of another scheme", "IM_LOGIC_BEFORE_SEND_URL", "ftp://hooks.example/x"},
		{"url that does not parse", "IM_LOGIC_BEFORE_SEND_URL", "http://[::1"},
		{"url without a secret", "IM_LOGIC_BEFORE_SEND_SECRET", ""},
		{"secret without whsec_", "IM_LOGIC_BEFORE_SEND_SECRET", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		{"timeout over 5s", "IM_LOGIC_BEFORE_SEND_TIMEOUT", "5001ms"},
		{"timeout zero", "IM_LOGIC_BEFORE_SEND_TIMEOUT", "0s"},
		{"timeout not below request_timeout", "IM_LOGIC_REQUEST_TIMEOUT", "1s"},
		{"unknown error policy", "IM_LOGIC_BEFORE_SEND_ON_ERROR", "retry"},
		{"unknown timeout policy", "IM_LOGIC_BEFORE_SEND_ON_TIMEOUT", "Allow"},
		{"breaker without threshold", "IM_LOGIC_BEFORE_SEND_BREAKER_FAILURES", "0"},
		{"breaker without cooldown", "IM_LOGIC_BEFORE_SEND_BREAKER_COOLDOWN", "0s"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(tt.key, tt.value)
			if _, err := Load(""); err == nil {
				t.Fatalf("%s=%s accepted", tt.key, tt.value)
			}
		})
	}
	t.Run("5s exactly", func(t *testing.T) {
		t.Setenv("IM_LOGIC_BEFORE_SEND_TIMEOUT", "5s")
		if _, err := Load(""); err != nil {
			t.Fatal(err)
		}
	})
}

func TestClientMsgIDWindowLeavesTheWebhookTailRoomToSeeTheCommit(t *testing.T) {
	tests := []struct {
		name     string
		webhooks bool
		window   time.Duration
		want     time.Duration
	}{
		{"webhooks off: the configured window", false, 5 * time.Minute, 5 * time.Minute},
		{"webhooks on: settle less the request timeout", true, 5 * time.Minute, 10*time.Second - 8*time.Second},
		{"webhooks on: a window already shorter stays", true, time.Second, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := Default().Logic
			l.Webhook.Enabled, l.MsgIDWindow = tt.webhooks, tt.window
			l.Webhook.Settle, l.RequestTimeout = 10*time.Second, 8*time.Second
			if got := l.ClientMsgIDWindow(); got != tt.want {
				t.Fatalf("ClientMsgIDWindow() = %v, want %v", got, tt.want)
			}
		})
	}
}

// logic.upstream: service names from the environment are taken; a name
// that is not 1-23 of a-z 0-9 _ -, a name given twice, a body bound of 0
// or over half the frame limit and a zero visibility or wait are refused
// at load.
func TestLoadUpstream(t *testing.T) {
	t.Setenv("IM_LOGIC_UPSTREAM_SERVICES", "orders,chat-bot")
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if u := c.Logic.Upstream; len(u.Services) != 2 || u.Services[1] != "chat-bot" || u.MaxBody != 16<<10 {
		t.Fatalf("upstream = %+v", u)
	}
	refused := []struct {
		name, key, value string
	}{
		{"upper-case name", "IM_LOGIC_UPSTREAM_SERVICES", "Orders"},
		{"name with a dot", "IM_LOGIC_UPSTREAM_SERVICES", "orders.v2"},
		{"name of 24 bytes", "IM_LOGIC_UPSTREAM_SERVICES", "abcdefghijklmnopqrstuvwx"},
		{"a name twice", "IM_LOGIC_UPSTREAM_SERVICES", "orders,orders"},
		{"max_body 0", "IM_LOGIC_UPSTREAM_MAX_BODY", "0"},
		{"max_body over half a frame", "IM_LOGIC_UPSTREAM_MAX_BODY", "32769"},
		{"visibility 0", "IM_LOGIC_UPSTREAM_VISIBILITY", "0s"},
		{"max_wait 0", "IM_LOGIC_UPSTREAM_MAX_WAIT", "0s"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(tt.key, tt.value)
			if _, err := Load(""); err == nil {
				t.Fatalf("%s=%s accepted", tt.key, tt.value)
			}
		})
	}
}
