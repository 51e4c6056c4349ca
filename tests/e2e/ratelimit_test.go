package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/token"
	"github.com/sparkim/spark/tests/framework"
)

// Every client of these tests dials from its own loopback source address
// (all of 127.0.0.0/8 is local on Linux), so the per-address buckets and
// caps of one case never see another's connections.

// dialFrom opens an unauthenticated connection to gate g from source
// address src.
func dialFrom(t *testing.T, c *framework.Cluster, g int, src string) *client.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := client.Dial(ctx, c.Gates[g].TCPAddr, client.Options{Dial: d.DialContext})
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// authFrom dials from src and sends AUTH with tok; it returns the
// connection and AUTH's error.
func authFrom(t *testing.T, c *framework.Cluster, src, tok string, uid int64, device string) (*client.Conn, error) {
	t.Helper()
	conn := dialFrom(t, c, 0, src)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := conn.Auth(ctx, tok, device, "test", "1.0.0")
	return conn, err
}

// loginFrom authenticates uid on device from src and fails the test if it
// cannot.
func loginFrom(t *testing.T, c *framework.Cluster, src string, uid int64, device string) *client.Conn {
	t.Helper()
	conn, err := authFrom(t, c, src, c.Token(uid, device), uid, device)
	if err != nil {
		t.Fatalf("login %d/%s from %s: %v", uid, device, src, err)
	}
	return conn
}

// rateLimited returns the 42901 in err; it fails the test when err is
// anything else or its retry-after hint is not within (0, most].
func rateLimited(t *testing.T, err error, what string, most time.Duration) *client.CodeError {
	t.Helper()
	var ce *client.CodeError
	if !errors.As(err, &ce) || ce.Code != errcode.RateLimited {
		t.Fatalf("%s: %v, want 42901", what, err)
	}
	if ce.RetryAfter <= 0 || ce.RetryAfter > most {
		t.Fatalf("%s: retry-after %v, want a hint within (0, %v]", what, ce.RetryAfter, most)
	}
	return ce
}

// request sends one request of a class and returns its failure, nil on
// any other outcome than a non-"0" code.
func request(conn *client.Conn, cmd uint16, body any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := conn.Request(ctx, cmd, body)
	if err != nil {
		return err
	}
	return r.Err()
}

// Must-show 2, first half: each command class (SEND with GENERATE_MSG_ID,
// SYNC, the edits, AUTH) answers 42901 with a retry-after exactly past its
// device bucket's burst, then past its address bucket's burst for another
// device on the same address, and serves again once the hinted time has
// passed. A refused non-AUTH request leaves the connection open.
func TestRateLimitEachClassRefusesPastItsBurstAndRecovers(t *testing.T) {
	var env []string
	for _, class := range []string{"SEND", "SYNC", "EDIT"} {
		p := "IM_LOGIC_RATE_LIMIT_" + class + "_"
		env = append(env, p+"DEVICE_RATE=0.5", p+"DEVICE_BURST=3", p+"IP_RATE=0.5", p+"IP_BURST=5")
	}
	env = append(env, "IM_LOGIC_RATE_LIMIT_AUTH_DEVICE_RATE=0.5", "IM_LOGIC_RATE_LIMIT_AUTH_DEVICE_BURST=2",
		"IM_LOGIC_RATE_LIMIT_AUTH_IP_RATE=0.5", "IM_LOGIC_RATE_LIMIT_AUTH_IP_BURST=4")
	c := framework.NewCluster(t, framework.Options{Gates: 1, LogicEnv: env})
	const recipient = 9000
	loginFrom(t, c, "127.0.0.9", recipient, "r")

	classes := []struct {
		name string
		src  string
		req  func(conn *client.Conn, i int) error
	}{
		{"send", "127.0.0.10", func(conn *client.Conn, i int) error {
			if i == 1 { // GENERATE_MSG_ID draws from the send bucket too
				return request(conn, protocol.CmdGenerateMsgID, nil)
			}
			return request(conn, protocol.CmdSendMessage, sendTo(recipient, fmt.Sprintf("m-%d-%d", time.Now().UnixNano(), i), text(t, "hi")))
		}},
		{"sync", "127.0.0.11", func(conn *client.Conn, _ int) error {
			return request(conn, protocol.CmdSyncInbox, map[string]any{"dialog_cursor": "0", "mailbox_seq": "0", "limit": 10})
		}},
		{"edit", "127.0.0.12", func(conn *client.Conn, _ int) error {
			return request(conn, protocol.CmdRelation, map[string]any{"op": "friends"})
		}},
	}
	for ci, cl := range classes {
		t.Run(cl.name+" refuses the 4th request of a device and the 6th of an address, then recovers", func(t *testing.T) {
			a := loginFrom(t, c, cl.src, int64(100+ci), "a")
			b := loginFrom(t, c, cl.src, int64(200+ci), "b")
			for i := 0; i < 3; i++ {
				if err := cl.req(a, i); err != nil {
					t.Fatalf("device a request %d of its burst of 3: %v", i+1, err)
				}
			}
			devErr := rateLimited(t, cl.req(a, 3), "device a's 4th request", 2*time.Second)
			if !strings.Contains(devErr.Msg, "device") {
				t.Fatalf("device refusal %q does not name the device", devErr.Msg)
			}
			if _, err := a.Heartbeat(ctxT(t, 5*time.Second)); err != nil {
				t.Fatalf("connection after a 42901: %v", err)
			}
			for i := 0; i < 2; i++ {
				if err := cl.req(b, i); err != nil {
					t.Fatalf("device b request %d (address at %d of 5): %v", i+1, 4+i, err)
				}
			}
			ipErr := rateLimited(t, cl.req(b, 2), "the address's 6th request", 2*time.Second)
			if !strings.Contains(ipErr.Msg, "address") {
				t.Fatalf("address refusal %q does not name the address", ipErr.Msg)
			}
			time.Sleep(max(devErr.RetryAfter, ipErr.RetryAfter) + 100*time.Millisecond)
			if err := cl.req(a, 4); err != nil {
				t.Fatalf("after the hinted %v: %v", max(devErr.RetryAfter, ipErr.RetryAfter), err)
			}
		})
	}

	t.Run("auth refuses a device's 3rd login and an address's 5th, closes, then recovers", func(t *testing.T) {
		const src = "127.0.0.13"
		for i := 0; i < 2; i++ {
			loginFrom(t, c, src, 300, "a")
		}
		conn, err := authFrom(t, c, src, c.Token(300, "a"), 300, "a")
		devErr := rateLimited(t, err, "device a's 3rd login", 2*time.Second)
		select {
		case <-conn.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("a refused AUTH left its connection open")
		}
		loginFrom(t, c, src, 301, "b") // the address's 4th AUTH (the refused one counted)
		_, err = authFrom(t, c, src, c.Token(302, "c"), 302, "c")
		ipErr := rateLimited(t, err, "the address's 5th login", 2*time.Second)
		if !strings.Contains(ipErr.Msg, "address") {
			t.Fatalf("address refusal %q", ipErr.Msg)
		}
		time.Sleep(max(devErr.RetryAfter, ipErr.RetryAfter) + 100*time.Millisecond)
		loginFrom(t, c, src, 300, "a")
	})
}

// Must-show 2, second half: two logic processes share one bucket. Users on
// one address are logged in until both logic processes have authenticated
// some of them (the gate pins each connection to a stream, and so to a
// logic, by a hash of its id); then every connection sends, and exactly
// the address's burst of 10 passes, not 10 per process.
func TestRateLimitIsOneBucketAcrossTwoLogicProcesses(t *testing.T) {
	c := framework.NewCluster(t, framework.Options{Gates: 1, Logics: 2, LogicEnv: []string{
		"IM_LOGIC_RATE_LIMIT_SEND_DEVICE_RATE=0", "IM_LOGIC_RATE_LIMIT_SEND_IP_RATE=0.01", "IM_LOGIC_RATE_LIMIT_SEND_IP_BURST=10",
	}})
	const recipient = 9100
	loginFrom(t, c, "127.0.0.21", recipient, "r")
	const src = "127.0.0.20"
	var conns []*client.Conn
	authedBy := func(l int, uid int64) bool {
		logs := c.Logics[l].Logs()
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, `"msg":"authenticated"`) && strings.Contains(line, fmt.Sprintf(`"user_id":%d,`, uid)) {
				return true
			}
		}
		return false
	}
	var first, second bool
	for uid := int64(1); uid <= 40 && !(first && second); uid++ {
		conns = append(conns, loginFrom(t, c, src, uid, "d"))
		deadline := time.Now().Add(5 * time.Second)
		for !authedBy(0, uid) && !authedBy(1, uid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		first = first || authedBy(0, uid)
		second = second || authedBy(1, uid)
	}
	if !first || !second {
		t.Fatalf("after %d logins both logic processes had not served one (logic-1 %v, logic-2 %v)", len(conns), first, second)
	}
	if len(conns) < 6 {
		for uid := int64(len(conns) + 1); uid <= 6; uid++ {
			conns = append(conns, loginFrom(t, c, src, uid, "d"))
		}
	}
	passed, refused := 0, 0
	for round := 0; round < 3; round++ {
		for i, conn := range conns {
			err := request(conn, protocol.CmdSendMessage, sendTo(recipient, fmt.Sprintf("r%d-%d", round, i), text(t, "x")))
			switch {
			case err == nil:
				passed++
			default:
				rateLimited(t, err, fmt.Sprintf("send %d of round %d", i, round), 100*time.Second)
				refused++
			}
		}
	}
	if passed != 10 {
		t.Fatalf("%d of %d sends from one address passed through two logic processes, want its burst of 10", passed, passed+refused)
	}
}

// Must-show 3: failed AUTHs (forged, expired, garbage, another device's
// token) from one address block that address at the threshold: its next
// AUTH, even with a valid token, gets 42901 at once and is closed, without
// the token being looked at (a bad one gets 42901 too, not 40101). The
// same user keeps connecting from another address, a session the user
// opened on the blocked address before keeps working, and once the block
// expires the address logs in again.
func TestRateLimitFailedAuthsBlockTheAddressNotTheUser(t *testing.T) {
	c := framework.NewCluster(t, framework.Options{Gates: 1, LogicEnv: []string{
		"IM_LOGIC_RATE_LIMIT_AUTH_FAILURES=4", "IM_LOGIC_RATE_LIMIT_AUTH_BLOCK=3s",
	}})
	const victim = 700
	const bad, good = "127.0.0.30", "127.0.0.31"
	laptop := loginFrom(t, c, bad, victim, "laptop")
	friend := loginFrom(t, c, good, victim+1, "f")
	now := time.Now()
	forged, _, _ := token.Mint([]byte("not-the-cluster-secret"), victim, "", time.Hour, now)
	expired, _, _ := token.Mint([]byte(framework.JWTSecret), victim, "", time.Minute, now.Add(-time.Hour))
	attempts := []struct{ name, tok, device string }{
		{"forged", forged, "phone"},
		{"expired", expired, "phone"},
		{"garbage", "garbage", "phone"},
		{"another device's token", c.Token(victim, "laptop"), "phone"},
	}
	for _, a := range attempts {
		conn, err := authFrom(t, c, bad, a.tok, victim, a.device)
		var ce *client.CodeError
		if !errors.As(err, &ce) || ce.Code != errcode.BadToken {
			t.Fatalf("%s token: %v, want 40101", a.name, err)
		}
		<-conn.Done()
	}
	_, err := authFrom(t, c, bad, c.Token(victim, "phone"), victim, "phone")
	blocked := rateLimited(t, err, "a valid token from the blocked address", 3*time.Second)
	if !strings.Contains(blocked.Msg, "failed logins") {
		t.Fatalf("block message %q", blocked.Msg)
	}
	_, err = authFrom(t, c, bad, "garbage", victim, "phone")
	rateLimited(t, err, "a bad token from the blocked address (not looked at)", 3*time.Second)

	for i := 0; i < 3; i++ {
		loginFrom(t, c, good, victim, "tablet")
		loginFrom(t, c, good, victim, fmt.Sprintf("phone-%d", i))
	}
	if _, err := laptop.Send(ctxT(t, 10*time.Second), sendTo(victim+1, "from-the-laptop", text(t, "still here"))); err != nil {
		t.Fatalf("the session opened on the blocked address before the block: %v", err)
	}
	if _, err := collect(friend, 1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(blocked.RetryAfter + 200*time.Millisecond)
	loginFrom(t, c, bad, victim, "phone")
}

// Gate: gate.max_conns_per_ip. An address holding the cap (authenticated
// or not) gets, on a new connection, one frame (AUTH, RequestID 0, 42901)
// and a close, its AUTH never reaching logic; another address connects;
// closing one connection frees a slot.
func TestGateConnectionCapPerAddressRefusesTheNextConnection(t *testing.T) {
	c := framework.NewCluster(t, framework.Options{Gates: 1, GateEnv: []string{"IM_GATE_MAX_CONNS_PER_IP=3"}})
	const src = "127.0.0.40"
	loginFrom(t, c, src, 1, "a")
	unauth := dialFrom(t, c, 0, src)
	if _, err := unauth.Heartbeat(ctxT(t, 5*time.Second)); err != nil { // a session by now
		t.Fatal(err)
	}
	loginFrom(t, c, src, 2, "b")
	conn, err := authFrom(t, c, src, c.Token(3, "c"), 3, "c")
	if err == nil {
		t.Fatal("a 4th connection from the address authenticated")
	}
	f, perr := framework.NextPush(conn, 5*time.Second)
	if perr != nil {
		t.Fatalf("no refusal frame: %v (AUTH: %v)", perr, err)
	}
	env, eerr := f.Envelope()
	if eerr != nil || f.Command != protocol.CmdAuth || env.Code != errcode.RateLimited || env.Msg != "too many connections from this address" {
		t.Fatalf("refusal frame command %d %+v (%v)", f.Command, env, eerr)
	}
	if strings.Contains(c.Logics[0].Logs(), `"user_id":3,`) {
		t.Fatal("the refused connection's AUTH reached logic")
	}
	loginFrom(t, c, "127.0.0.41", 4, "d")
	_ = unauth.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := authFrom(t, c, src, c.Token(3, "c"), 3, "c")
		if err == nil {
			break
		}
		_ = conn.Close()
		if time.Now().After(deadline) {
			t.Fatalf("a slot freed by a close was not reused: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Gate: gate.max_unauthenticated. With the cap held by connections that
// never authenticate, a new connection is refused (authenticated sessions
// carry on); once one of them goes, a client logs in again.
func TestGateUnauthenticatedCapRefusesNewConnectionsUntilOneLeaves(t *testing.T) {
	c := framework.NewCluster(t, framework.Options{Gates: 1, GateEnv: []string{"IM_GATE_MAX_UNAUTHENTICATED=2"}})
	online := loginFrom(t, c, "127.0.0.50", 1, "a")
	idle1, idle2 := dialFrom(t, c, 0, "127.0.0.51"), dialFrom(t, c, 0, "127.0.0.52")
	for _, idle := range []*client.Conn{idle1, idle2} {
		if _, err := idle.Heartbeat(ctxT(t, 5*time.Second)); err != nil { // a session by now
			t.Fatal(err)
		}
	}
	conn, err := authFrom(t, c, "127.0.0.53", c.Token(2, "b"), 2, "b")
	if err == nil {
		t.Fatal("a connection past the unauthenticated cap authenticated")
	}
	f, perr := framework.NextPush(conn, 5*time.Second)
	if perr != nil {
		t.Fatalf("no refusal frame: %v", perr)
	}
	if env, _ := f.Envelope(); env.Code != errcode.RateLimited || !strings.Contains(env.Msg, "waiting to authenticate") {
		t.Fatalf("refusal %+v", env)
	}
	if _, err := online.Heartbeat(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("an authenticated session: %v", err)
	}
	_ = idle1.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := authFrom(t, c, "127.0.0.53", c.Token(2, "b"), 2, "b")
		if err == nil {
			break
		}
		_ = conn.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no login after an unauthenticated connection left: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Gate: before AUTH a 23-byte header announcing a 60 KiB frame (under
// max_frame_size, so it would have been buffered for the AUTH deadline)
// closes the connection at once, counted in
// spark_gate_preauth_frame_rejects_total; after AUTH a 20 KiB message passes.
func TestGatePreAuthOversizedHeaderClosesTheConnection(t *testing.T) {
	c := framework.NewCluster(t, framework.Options{Gates: 1})
	nc, err := net.DialTimeout("tcp", c.Gates[0].TCPAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	hdr := make([]byte, frame.HeaderSize)
	frame.PutHeader(hdr, frame.Header{Command: protocol.CmdAuth, RequestID: 1, SequenceID: 1})
	hdr[19], hdr[20], hdr[21], hdr[22] = 0, 0, 0xF0, 0 // body length 61,440
	start := time.Now()
	if _, err := nc.Write(hdr); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := nc.Read(make([]byte, 64))
	if n != 0 || (err != io.EOF && !errors.Is(err, net.ErrClosed) && !strings.Contains(fmt.Sprint(err), "reset")) {
		t.Fatalf("read %d bytes, %v: want the connection closed", n, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("closed after %v: the gate waited for the body", d)
	}
	res, err := http.Get("http://" + c.Gates[0].AdminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if !strings.Contains(string(metrics), "spark_gate_preauth_frame_rejects_total 1\n") {
		t.Fatal("spark_gate_preauth_frame_rejects_total is not 1")
	}

	sender := c.Login(t, 0, 1, "a")
	receiver := c.Login(t, 0, 2, "b")
	big := strings.Repeat("x", 20<<10)
	if _, err := sender.Send(ctxT(t, 10*time.Second), sendTo(2, "big", text(t, big))); err != nil {
		t.Fatalf("a %d-byte message after AUTH: %v", len(big), err)
	}
	if _, err := collect(receiver, 1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}
