package gateway_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/logic/internal/auth"
	"github.com/sparkim/spark/logic/internal/gatepush"
	"github.com/sparkim/spark/logic/internal/gateway"
	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/logic/internal/inbox"
	"github.com/sparkim/spark/logic/internal/mailbox"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/relation"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/token"
)

var secret = []byte("test-jwt-secret")

const clusterSecret = "test-cluster-secret"

type env struct {
	st      *store.Store
	rdb     *redis.Client
	reg     *gatepush.Registry
	handler *gateway.Handler
	// notes records what the handler told its notifier.
	notes *testenv.Notes
}

func newEnv(t *testing.T, machine int) *env {
	t.Helper()
	_, db := testenv.MySQL(t)
	rdb := testenv.Redis(t)
	st := store.New(db)
	gen, err := msgid.New(context.Background(), msgid.Settings{MachineID: machine})
	if err != nil {
		t.Fatal(err)
	}
	reg := gatepush.NewRegistry(rdb, nil)
	clients := gatepush.NewClients(clusterSecret)
	t.Cleanup(clients.Close)
	a := auth.New(st, rdb, secret, gatepush.NewKicker(reg, clients, time.Second, nil, nil), nil)
	mb := mailbox.New(st, gen)
	a.RecordKicks(mb)
	defaults := config.Default()
	sendCfg := message.ConfigFrom(defaults)
	sendCfg.EnqueueRetries = 2
	send, err := message.New(st, rdb, gen, sendCfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := inbox.New(st, rdb, mb, nil)
	groups, err := group.New(st, gen, group.Config{MaxMembers: defaults.Logic.GroupMaxMembers})
	if err != nil {
		t.Fatal(err)
	}
	rel, err := relation.New(st, gen, relation.Options{})
	if err != nil {
		t.Fatal(err)
	}
	notes := &testenv.Notes{}
	return &env{st: st, rdb: rdb, reg: reg, notes: notes, handler: &gateway.Handler{
		Auth: a, Messages: send, Inbox: in, MaxFrameSize: defaults.Logic.MaxFrameSize, IDs: gen,
		Relations: rel, Groups: groups, Notifier: notes, Timeout: defaults.Logic.RequestTimeout,
	}}
}

func mint(t *testing.T, key []byte, uid int64, did string, ttl time.Duration, now time.Time) string {
	t.Helper()
	s, _, err := token.Mint(key, uid, did, ttl, now)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func authBody(tok, device string) []byte {
	b, _ := json.Marshal(map[string]string{"token": tok, "device_id": device, "platform": "ios", "app_version": "1.0"})
	return b
}

func decode(t *testing.T, b []byte) envelope.Response {
	t.Helper()
	var r envelope.Response
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("envelope %q: %v", b, err)
	}
	if len(r.RequestID) != envelope.RequestIDLen {
		t.Fatalf("request_id %q", r.RequestID)
	}
	return r
}
