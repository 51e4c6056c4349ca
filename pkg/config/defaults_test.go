package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// zeroByDesign are the keys whose built-in value is the zero value on
// purpose: secrets have no default, optional listeners and lists are off
// or empty, and a single Redis server uses DB 0.
var zeroByDesign = map[string]bool{
	"cluster.secret":                true,
	"tracing.enabled":               true, // off unless a collector is named
	"tracing.service_name":          true, // empty: each process's own name
	"logic.media.public_url":        true, // http:// + logic.http_addr
	"logic.media.secret":            true, // a random key per process
	"logic.media.s3.endpoint":       true, // store s3 only
	"logic.media.s3.secure":         true,
	"logic.media.s3.bucket":         true,
	"logic.media.s3.access_key":     true,
	"logic.media.s3.secret_key":     true,
	"gate.push_advertise":           true, // Load makes it gate.push_addr
	"gate.client_advertise":         true,
	"gate.proxy_protocol":           true,
	"gate.proxy_trusted_cidrs":      true,
	"gate.tls_cert_file":            true,
	"gate.tls_key_file":             true,
	"gate.ws_allowed_origins":       true,
	"gate.wss_addr":                 true,
	"gate.ws_real_ip_header":        true,
	"gate.proxy_protocol_listeners": true,
	"logic.redis.addrs":             true,
	"logic.redis.cluster":           true,
	"logic.redis.password":          true,
	"logic.redis.db":                true,
	"logic.jwt_secret":              true,
	"logic.api_keys":                true,
	"logic.before_send.url":         true, // the hook is off until the operator names one
	"logic.before_send.secret":      true,
	"logic.upstream.services":       true, // UPSTREAM is refused until the operator names a service
	"deliver.redis.addrs":           true,
	"deliver.redis.cluster":         true,
	"deliver.redis.password":        true,
	"deliver.redis.db":              true,
	// Push is off and has no credentials until an operator gives them.
	"push.enabled":              true,
	"push.ca_file":              true,
	"push.apns.key_file":        true,
	"push.apns.key_id":          true,
	"push.apns.team_id":         true,
	"push.fcm.credentials_file": true,
	"push.gateways":             true,
	"push.gateway_secret_file":  true,
	// Webhooks are off, with no endpoint, until an operator names one.
	"logic.webhook.enabled":            true,
	"logic.webhook.urls":               true,
	"logic.webhook.secret":             true,
	"logic.webhook.events":             true,
	"logic.webhook.allow_private_urls": true,
}

// A field added to Config without a value in Default fails here (unless
// its zero value is listed above as the intended default), so no key
// falls back to a constructor's idea of a default.
func TestEveryKeyHasADefault(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Settings(Default()) {
		if seen[s.Key] {
			t.Errorf("key %s twice", s.Key)
		}
		seen[s.Key] = true
		v := reflect.ValueOf(s.Default)
		zero := v.IsZero() || (v.Kind() == reflect.Slice && v.Len() == 0)
		if zero && !zeroByDesign[s.Key] {
			t.Errorf("%s has no default in Default() (zero %v); give it one or list it in zeroByDesign", s.Key, s.Default)
		}
		if !zero && zeroByDesign[s.Key] {
			t.Errorf("%s is listed in zeroByDesign but defaults to %v", s.Key, s.Default)
		}
	}
	for k := range zeroByDesign {
		if !seen[k] {
			t.Errorf("zeroByDesign names %s, which is not a key", k)
		}
	}
}

// The built-in configuration is valid, and Load without a file or
// environment gives exactly it.
func TestLoadWithoutFileIsDefault(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default() invalid: %v", err)
	}
	for _, s := range Settings(Default()) {
		t.Setenv(s.Env(), "") // empty counts as unset
	}
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Gate.PushAdvertise = want.Gate.PushAddr
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Load(\"\") = %+v\nwant %+v", c, want)
	}
}

// Every key can be set from its environment variable.
func TestEveryKeyFromEnv(t *testing.T) {
	for _, s := range Settings(Default()) {
		t.Setenv(s.Env(), "")
	}
	for _, s := range Settings(Default()) {
		var env string
		switch s.Default.(type) {
		case string:
			continue // strings are covered by the typed cases below and TestLoad
		case bool:
			env = "true"
			if s.Default.(bool) {
				env = "false"
			}
		case int, int64:
			env = "77777"
		case float64:
			env = "7.5"
		case time.Duration:
			env = "17h"
		case []string:
			env = "10.0.0.1:1,10.0.0.2:2"
		default:
			t.Fatalf("%s: no case for %T", s.Key, s.Default)
		}
		t.Run(s.Key, func(t *testing.T) {
			t.Setenv(s.Env(), env)
			c, err := Load("")
			if err != nil {
				// The value may break a rule naming the key (e.g. a
				// frame limit): the key was read, which is what this
				// checks.
				if !strings.Contains(err.Error(), s.Key) {
					t.Fatalf("%s=%s: %v", s.Env(), env, err)
				}
				return
			}
			for _, got := range Settings(c) {
				if got.Key == s.Key && reflect.DeepEqual(got.Default, s.Default) {
					t.Fatalf("%s=%s not applied (still %v)", s.Env(), env, got.Default)
				}
			}
		})
	}
}

// The rules between processes are refused with a message naming both keys.
func TestValidateCrossProcess(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   []string
	}{
		{"frame limits differ", func(c *Config) { c.Gate.MaxFrameSize = 128 << 10 },
			[]string{"gate.max_frame_size (131072)", "logic.max_frame_size (65536)", "must be equal"}},
		{"logic's frame limit differs", func(c *Config) { c.Logic.MaxFrameSize = 32 << 10 },
			[]string{"gate.max_frame_size (65536)", "logic.max_frame_size (32768)"}},
		{"logic timeout equals the gate's", func(c *Config) { c.Logic.RequestTimeout = 10 * time.Second },
			[]string{"logic.request_timeout (10s) must be below gate.request_timeout (10s)"}},
		{"gate timeout below logic's", func(c *Config) { c.Gate.RequestTimeout = 5 * time.Second },
			[]string{"logic.request_timeout (8s) must be below gate.request_timeout (5s)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.change(c)
			err := c.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	c := Default()
	c.Gate.MaxFrameSize, c.Logic.MaxFrameSize = 128<<10, 128<<10
	c.Gate.RequestTimeout, c.Logic.RequestTimeout = 3*time.Second, 2*time.Second
	if err := c.Validate(); err != nil {
		t.Fatalf("consistent limits refused: %v", err)
	}
}

// Values the processes used to replace with a default are refused instead.
func TestValidateRefusesZeroes(t *testing.T) {
	tests := []struct {
		key    string
		change func(*Config)
	}{
		{"gate.shards", func(c *Config) { c.Gate.Shards = 0 }},
		{"gate.outbound_queue", func(c *Config) { c.Gate.OutboundQueue = -1 }},
		{"gate.max_inflight_per_conn", func(c *Config) { c.Gate.MaxInflightPerConn = 0 }},
		{"gate.streams_per_logic", func(c *Config) { c.Gate.StreamsPerLogic = 0 }},
		{"gate.write_timeout", func(c *Config) { c.Gate.WriteTimeout = 0 }},
		{"gate.tls_handshake_timeout", func(c *Config) { c.Gate.TLSHandshakeTimeout = 0 }},
		{"gate.tls_max_handshakes", func(c *Config) { c.Gate.TLSMaxHandshakes = 0 }},
		{"gate.drain_timeout", func(c *Config) { c.Gate.DrainTimeout = 0 }},
		{"gate.sweep_interval", func(c *Config) { c.Gate.SweepInterval = 0 }},
		{"gate.logic_addrs", func(c *Config) { c.Gate.LogicAddrs = nil }},
		{"logic.http_addr", func(c *Config) { c.Logic.HTTPAddr = "" }},
		{"logic.enqueue_retries", func(c *Config) { c.Logic.EnqueueRetries = 0 }},
		{"logic.recall_window", func(c *Config) { c.Logic.RecallWindow = 0 }},
		{"logic.commit_workers", func(c *Config) { c.Logic.CommitWorkers = 0 }},
		{"logic.request_timeout", func(c *Config) { c.Logic.RequestTimeout = 0 }},
		{"deliver.batch_size", func(c *Config) { c.Deliver.BatchSize = 0 }},
		{"deliver.push_timeout", func(c *Config) { c.Deliver.PushTimeout = 0 }},
		{"deliver.logic_timeout", func(c *Config) { c.Deliver.LogicTimeout = 0 }},
		{"deliver.gate_addr_ttl", func(c *Config) { c.Deliver.GateAddrTTL = 0 }},
		{"deliver.member_cache_ids", func(c *Config) { c.Deliver.MemberCacheIDs = 0 }},
		{"deliver.id", func(c *Config) { c.Deliver.ID = "" }},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			c := Default()
			tt.change(c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.key) {
				t.Fatalf("err %v, want one naming %s", err, tt.key)
			}
		})
	}
}

// The configuration files in the repository load and validate.
func TestRepositoryConfigsLoad(t *testing.T) {
	for _, path := range []string{"../../deploy/dev/im.yaml"} {
		if _, err := Load(path); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
}
