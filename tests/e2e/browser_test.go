package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/tests/framework"
)

// The browser SDK (sdk/ts) is tested in two places: its node unit tests
// (frame vectors, the client against a scripted gate) and the demo page in
// a real headless Chromium against real gates. Both need Node, Chromium,
// the SDK's npm packages and its build, which `make test-deps` (run by
// `make e2e`) installs; without them these tests fail, never skip.

// sdkDir returns sdk/ts after checking that what the browser tests need is
// there, failing with what to run otherwise.
func sdkDir(t *testing.T) (dir, node string) {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := wd
	for {
		if _, err := os.Stat(filepath.Join(root, "go.work")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			t.Fatalf("go.work not found above %s", wd)
		}
		root = parent
	}
	dir = filepath.Join(root, "sdk", "ts")
	const fix = "run `make test-deps` (installs chromium, npm ci and npm run build in sdk/ts)"
	node, err = exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: %v; %s", err, fix)
	}
	need := []string{
		"/usr/bin/chromium",
		filepath.Join(dir, "node_modules", "playwright-core", "package.json"),
		filepath.Join(dir, "node_modules", "typescript", "package.json"),
		filepath.Join(dir, "dist", "src", "index.js"),
		filepath.Join(dir, "dist", "demo", "app.js"),
	}
	for _, p := range need {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v; %s", err, fix)
		}
	}
	// A build older than its sources would test yesterday's SDK.
	built, _ := os.Stat(filepath.Join(dir, "dist", "src", "index.js"))
	sources, _ := filepath.Glob(filepath.Join(dir, "src", "*.ts"))
	demo, _ := filepath.Glob(filepath.Join(dir, "demo", "*.ts"))
	for _, s := range append(sources, demo...) {
		if st, err := os.Stat(s); err == nil && st.ModTime().After(built.ModTime()) {
			t.Fatalf("%s is newer than sdk/ts/dist; %s", s, fix)
		}
	}
	return dir, node
}

// testLogWriter sends a child process's output to the test log line by line.
type testLogWriter struct {
	t   *testing.T
	mu  sync.Mutex
	buf []byte
	all bytes.Buffer
}

func (l *testLogWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all.Write(p)
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.t.Log(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
}

func (l *testLogWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.t.Log(string(l.buf))
		l.buf = nil
	}
}

// The SDK's own unit tests (node --test on the compiled output): the
// shared frame vectors, and the client's retry, de-dup, sync paging,
// reconnect and KICK rules against a scripted gate. Run here so make test
// covers them.
func TestBrowserSDKUnitTests(t *testing.T) {
	t.Parallel()
	dir, node := sdkDir(t)
	tests, err := filepath.Glob(filepath.Join(dir, "test", "*.test.mjs"))
	if err != nil || len(tests) < 2 {
		t.Fatalf("SDK unit tests not found in %s/test: %v %v", dir, tests, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := &testLogWriter{t: t}
	cmd := exec.CommandContext(ctx, node, append([]string{"--test", "--test-reporter=tap"}, tests...)...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	out.flush()
	if err != nil {
		t.Fatalf("SDK unit tests: %v", err)
	}
	if !strings.Contains(out.all.String(), "# fail 0") {
		t.Fatalf("SDK unit tests did not report zero failures")
	}
}

// spkiHash is the base64 SHA-256 of a certificate's public key, the form
// Chromium's --ignore-certificate-errors-spki-list takes.
func spkiHash(t *testing.T, certFile string) string {
	t.Helper()
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", certFile)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// browserArtifacts is where a browser test leaves its screenshots:
// $SPARK_ARTIFACTS_DIR/<name>, else .run/artifacts/<name> in the
// repository (ignored by git); emptied first so it holds the last run.
func browserArtifacts(t *testing.T, sdk, name string) string {
	t.Helper()
	base := os.Getenv("SPARK_ARTIFACTS_DIR")
	if base == "" {
		base = filepath.Join(sdk, "..", "..", ".run", "artifacts")
	}
	dir, err := filepath.Abs(filepath.Join(base, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

type browserUser struct {
	User   string `json:"user"`
	Device string `json:"device"`
	Token  string `json:"token"`
	Gate   string `json:"gate"`
}

// Issue 10, must-show 1: headless Chromium opens the demo page twice, as
// two users on two gates over wss:// with a throw-away test CA. They
// exchange messages both ways (one body gzipped by the browser's
// CompressionStream); one page goes away while the other sends, comes back
// and catches up by sync with no duplicates; a plain reload re-delivers
// nothing; the same device in a second tab kicks the first, which does not
// reconnect. The page's messages are then checked against MySQL.
// Screenshots are in the directory the test logs.
//
// Chromium is made to trust the gate's certificate with
// --ignore-certificate-errors-spki-list and the SHA-256 of that certificate's
// public key: only this one key is accepted in place of a trusted chain
// (the certificate must still be for 127.0.0.1, and TLS is real: the page
// speaks wss to the gate's TLS listener). That is narrower than Playwright's
// ignoreHTTPSErrors, which accepts any certificate, and needs no root store
// change on the machine.
func TestBrowserDemoChatOverWSS(t *testing.T) {
	t.Parallel()
	started := time.Now()
	sdk, node := sdkDir(t)
	ca := framework.NewTestCA(t)
	certs := ca.IssueServer(t, t.TempDir(), 30)
	c := framework.NewCluster(t, framework.Options{Gates: 2, GateTLS: &certs})
	if c.Gates[0].WSSAddr == "" || c.Gates[1].WSSAddr == "" {
		t.Fatal("gates have no wss listener")
	}

	// The demo page and the compiled SDK, and nothing else of sdk/ts.
	files := http.FileServer(http.Dir(sdk))
	mux := http.NewServeMux()
	mux.Handle("/demo/", files)
	mux.Handle("/dist/", files)
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)

	artifacts := browserArtifacts(t, sdk, "browser")
	const alice, bob = 9301, 9302
	users := []browserUser{
		{User: fmt.Sprint(alice), Device: "web-alice", Gate: "wss://" + c.Gates[0].WSSAddr + "/ws"},
		{User: fmt.Sprint(bob), Device: "web-bob", Gate: "wss://" + c.Gates[1].WSSAddr + "/ws"},
	}
	users[0].Token = c.Token(alice, users[0].Device)
	users[1].Token = c.Token(bob, users[1].Device)
	cfg, err := json.Marshal(map[string]any{
		"base":         web.URL,
		"artifacts":    artifacts,
		"users":        users,
		"chromiumArgs": []string{"--ignore-certificate-errors-spki-list=" + spkiHash(t, certs.CertFile)},
	})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := &testLogWriter{t: t}
	cmd := exec.CommandContext(ctx, node, filepath.Join("test", "browser.mjs"))
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(), "SPARK_BROWSER_CONFIG="+string(cfg))
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	out.flush()
	t.Logf("browser artifacts (screenshots, result.json): %s", artifacts)
	if err != nil {
		t.Fatalf("browser run failed: %v (screenshots in %s)", err, artifacts)
	}

	// What both pages showed must be exactly what MySQL holds, in order:
	// each message once, with its own client_msg_id.
	var res struct {
		ConversationID string      `json:"conversation_id"`
		A              [][2]string `json:"a"`
		B              [][2]string `json:"b"`
		Texts          []string    `json:"texts"`
		Image          struct {
			MsgID string `json:"msg_id"`
			Key   string `json:"key"`
		} `json:"image"`
	}
	b, err := os.ReadFile(filepath.Join(artifacts, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("result.json: %v", err)
	}
	rows, err := c.DB().QueryContext(ctx,
		"SELECT id, sender_id, client_msg_id, content FROM t_messages WHERE conversation_id = ? AND message_type = 1 ORDER BY id", res.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	wantSenders := []int64{alice, bob, bob, alice, alice, alice}
	clientIDs := map[string]bool{}
	var n int
	for rows.Next() {
		var id, sender int64
		var cmid string
		var content []byte
		if err := rows.Scan(&id, &sender, &cmid, &content); err != nil {
			t.Fatal(err)
		}
		var body struct {
			T    int    `json:"t"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(content, &body); err != nil {
			t.Fatalf("message %d content %q: %v", id, content, err)
		}
		if n >= len(res.Texts) || n >= len(res.A) || n >= len(res.B) {
			t.Fatalf("MySQL has more messages than the pages showed: message %d %q", id, body.Text)
		}
		if body.T != 1 || body.Text != res.Texts[n] || sender != wantSenders[n] {
			t.Errorf("message %d: type %d text %q from %d; want %q from %d", n, body.T, body.Text, sender, res.Texts[n], wantSenders[n])
		}
		if fmt.Sprint(id) != res.A[n][0] || fmt.Sprint(id) != res.B[n][0] {
			t.Errorf("message %d is %d in MySQL, page A shows %s, page B %s", n, id, res.A[n][0], res.B[n][0])
		}
		if clientIDs[cmid] {
			t.Errorf("client_msg_id %s used twice", cmid)
		}
		clientIDs[cmid] = true
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(res.Texts) || n != len(wantSenders) {
		t.Fatalf("MySQL has %d messages in conversation %s, the pages showed %d", n, res.ConversationID, len(res.Texts))
	}
	// The picture: one image message from alice carrying the key her
	// page uploaded, completed by her and sniffed as a PNG.
	var imgSender int64
	var imgContent []byte
	if err := c.DB().QueryRowContext(ctx, "SELECT sender_id, content FROM t_messages WHERE conversation_id = ? AND message_type = 2 AND id = ?",
		res.ConversationID, res.Image.MsgID).Scan(&imgSender, &imgContent); err != nil {
		t.Fatalf("the picture message %s: %v", res.Image.MsgID, err)
	}
	var img struct {
		Key    string `json:"key"`
		Width  int    `json:"width"`
		Height int    `json:"height"`
	}
	if err := json.Unmarshal(imgContent, &img); err != nil || imgSender != alice || img.Key != res.Image.Key || img.Width != 48 || img.Height != 48 {
		t.Errorf("picture message from %d content %s (%v); want alice's key %s, 48x48", imgSender, imgContent, err, res.Image.Key)
	}
	var uploader int64
	var ctype string
	if err := c.DB().QueryRowContext(ctx, "SELECT uploader_id, content_type FROM t_media WHERE media_key = ? AND completed_at IS NOT NULL",
		res.Image.Key).Scan(&uploader, &ctype); err != nil || uploader != alice || ctype != "image/png" {
		t.Errorf("t_media of %s: uploader %d type %q (%v); want alice, image/png, completed", res.Image.Key, uploader, ctype, err)
	}
	t.Logf("browser test took %v", time.Since(started).Round(100*time.Millisecond))
}
