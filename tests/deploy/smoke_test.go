package deploy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/token"
	"github.com/sparkim/spark/tests/framework"
)

// smokeProc is one process of a deployment as its artifact describes it:
// the binary, its arguments and its environment.
type smokeProc struct {
	name    string
	role    string // migrate, logic, deliver or gate
	gateID  string // gates: the id the deployment gives it
	bin     string
	args    []string
	env     []string
	oneshot bool // runs to completion before the next starts
}

// smokeCluster starts procs in order, each with exactly its artifact's
// binary, arguments and environment plus these IM_* overrides appended
// (so they win, as a later EnvironmentFile would), and nothing else:
// every listener, and the addresses that name one, get a free loopback
// port (the artifacts bind 0.0.0.0 or fixed ports, which other tests on
// this machine may hold), logic.mysql.dsn a fresh database on the test
// MySQL, and logic.redis and deliver.redis a private redis-server.
// Secrets, ids and every other setting are the artifact's own. Then two
// users AUTH on two gates with the JWT secret of logic's environment, one
// sends, the other gets the push, and every admin port answers /readyz.
func smokeCluster(t *testing.T, procs []smokeProc) {
	redis := framework.StartSingleRedis(t)
	dbName, dsn := framework.CreateDatabase(t, "")
	framework.DropDatabaseOnCleanup(t, dsn, dbName)

	port := func() string { return fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t)) }
	logicGRPC, logicHTTP, logicAdmin, deliverAdmin := port(), port(), port(), port()
	admins := []string{logicAdmin, deliverAdmin}
	gateTCP := map[string]string{}
	var gateIDs []string
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var jwtSecret string
	for _, p := range procs {
		var overrides []string
		switch p.role {
		case "migrate":
			overrides = []string{"IM_LOGIC_MYSQL_DSN=" + dsn}
		case "logic":
			overrides = []string{"IM_LOGIC_MYSQL_DSN=" + dsn, "IM_LOGIC_REDIS_ADDR=" + redis.Addr,
				"IM_LOGIC_GRPC_ADDR=" + logicGRPC, "IM_LOGIC_HTTP_ADDR=" + logicHTTP, "IM_LOGIC_ADMIN_ADDR=" + logicAdmin}
			jwtSecret = envValue(p.env, "IM_LOGIC_JWT_SECRET")
		case "deliver":
			overrides = []string{"IM_DELIVER_REDIS_ADDR=" + redis.Addr, "IM_DELIVER_ADMIN_ADDR=" + deliverAdmin,
				"IM_DELIVER_LOGIC_ADDRS=" + logicGRPC}
		case "gate":
			tcp, admin, push := port(), port(), port()
			gateTCP[p.gateID] = tcp
			gateIDs = append(gateIDs, p.gateID)
			admins = append(admins, admin)
			overrides = []string{"IM_GATE_TCP_ADDR=" + tcp, "IM_GATE_WS_ADDR=" + port(), "IM_GATE_TLS_ADDR=" + port(),
				"IM_GATE_PUSH_ADDR=" + push, "IM_GATE_PUSH_ADVERTISE=" + push, "IM_GATE_ADMIN_ADDR=" + admin,
				"IM_GATE_LOGIC_ADDRS=" + logicGRPC}
		default:
			t.Fatalf("%s: unknown role %q", p.name, p.role)
		}
		if _, err := os.Stat(p.bin); err != nil {
			t.Fatalf("%s: %v (make build)", p.name, err)
		}
		env := append(append([]string{}, p.env...), overrides...)
		if p.oneshot {
			cmd := exec.CommandContext(ctx, p.bin, p.args...)
			cmd.Env = append(withoutIM(os.Environ()), env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", p.name, err, out)
			}
			continue
		}
		proc := framework.NewProcess(t, p.name, p.bin, p.args, env)
		if err := proc.Start(ctx); err != nil {
			t.Fatalf("%s: %v\n%s", p.name, err, proc.Tail(30))
		}
		t.Cleanup(func() {
			if err := proc.Stop(); err != nil {
				t.Logf("%s: %v", proc.Name, err)
			}
			if t.Failed() {
				t.Logf("---- %s log tail ----\n%s", proc.Name, proc.Tail(30))
			}
		})
	}
	if jwtSecret == "" {
		t.Fatal("logic's environment sets no IM_LOGIC_JWT_SECRET")
	}
	if len(gateIDs) < 2 {
		t.Fatalf("gates %v: the smoke session needs two", gateIDs)
	}

	login := func(gate string, user int64, device string) *client.Conn {
		conn, err := client.Dial(ctx, gateTCP[gate], client.Options{})
		if err != nil {
			t.Fatalf("dial %s: %v", gate, err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		tok, _, err := token.Mint([]byte(jwtSecret), user, device, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Auth(ctx, tok, device, "test", "1.0.0"); err != nil {
			t.Fatalf("auth %d on %s: %v", user, gate, err)
		}
		return conn
	}
	alice := login(gateIDs[0], 7101, "phone")
	bob := login(gateIDs[1], 7102, "phone")
	ack, err := alice.SendText(ctx, 7102, "deployed")
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	m, err := framework.NextMessage(bob, 15*time.Second)
	if err != nil {
		t.Fatalf("push to bob: %v", err)
	}
	if int64(m.MsgID) != int64(ack.MsgID) {
		t.Fatalf("pushed msg_id %d, acked %d", m.MsgID, ack.MsgID)
	}
	for _, a := range admins {
		readyz(t, a)
	}
}

func readyz(t testing.TB, addr string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("GET %s/readyz: %v", addr, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/readyz: %s %s", addr, resp.Status, body)
	}
}
