package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
	"github.com/sparkim/spark/tests/framework"
)

// grpcurlModule is the pinned grpcurl docs/api.md tells readers to install
// and this test installs.
const grpcurlModule = "github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3"

// docs/api.md's development address and key, which the docs test swaps for
// the test cluster's.
const (
	docsLogicAddr = "127.0.0.1:9000"
	docsAPIKey    = "dev-api-key"
)

// docsWebhookEnv is deploy/dev/im.yaml's webhook and upstream sections,
// which the examples' endpoint and upstream calls need: webhooks on, the
// loopback URL of docs/api.md allowed, and the service orders.
var docsWebhookEnv = []string{"IM_LOGIC_WEBHOOK_ENABLED=true", "IM_LOGIC_WEBHOOK_ALLOW_PRIVATE_URLS=true", "IM_LOGIC_UPSTREAM_SERVICES=orders"}

// sendDocsUpstream has the docs' device send the frame that docs/api.md's
// PullUpstream example pulls (and its AckUpstream acknowledges), before
// the slow setup so it has settled by then.
func sendDocsUpstream(t *testing.T, conn *client.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := conn.Upstream(ctx, "orders", `{"op":"cancel","order":42}`, "docs-1"); err != nil {
		t.Fatal(err)
	}
}

// installGrpcurl installs the pinned grpcurl into a temporary GOBIN with
// `go install` and returns its path. A failure fails the test: docs that
// are not checked must not pass as checked.
func installGrpcurl(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", grpcurlModule)
	cmd.Dir = dir // outside the workspace: pkg@version ignores it anyway
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s: %v\n%s", grpcurlModule, err, out)
	}
	bin := filepath.Join(dir, "grpcurl")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("grpcurl not installed: %v", err)
	}
	return bin
}

// apiDocBlocks returns the bodies of docs/api.md's ```sh <tag> blocks
// (grpcurl, curl), in order.
func apiDocBlocks(t *testing.T, tag string) []string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	var cur []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```sh "+tag:
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, line)
		}
	}
	if in {
		t.Fatalf("docs/api.md: unterminated ```sh %s block", tag)
	}
	return blocks
}

// The business API examples of docs/api.md run green: every ```sh grpcurl
// block, with the development address and key replaced by a test
// cluster's, in one bash session (later blocks use ids earlier ones
// kept), each command exiting 0; and every RPC of logic.v1.Api appears.
func TestAPIDocsGrpcurlExamples(t *testing.T) {
	t.Parallel()
	blocks := apiDocBlocks(t, "grpcurl")
	if len(blocks) == 0 {
		t.Fatal("docs/api.md has no ```sh grpcurl blocks")
	}
	all := strings.Join(blocks, "\n") + "\n"
	methods := logicv1.File_logic_v1_api_proto.Services().ByName("Api").Methods()
	for i := 0; i < methods.Len(); i++ {
		if name := "logic.v1.Api/" + string(methods.Get(i).Name()); !strings.Contains(all, name+"\n") && !strings.Contains(all, name+" ") {
			t.Errorf("docs/api.md has no grpcurl example of %s", name)
		}
	}
	if !strings.Contains(all, docsLogicAddr) || !strings.Contains(all, docsAPIKey) {
		t.Fatalf("docs/api.md examples do not use %s and %s", docsLogicAddr, docsAPIKey)
	}
	c := framework.NewCluster(t, framework.Options{Gates: 1, LogicEnv: docsWebhookEnv})
	// A device online, so presence, pushes and the revocation have
	// someone to reach.
	conn := c.Login(t, 0, 1001, "phone")
	sendDocsUpstream(t, conn)
	grpcurl := installGrpcurl(t)

	out := runDocBlocks(t, "grpcurl", blocks, docsLogicAddr, c.Logics[0].GRPCAddr, "",
		append(os.Environ(), "PATH="+filepath.Dir(grpcurl)+string(os.PathListSeparator)+os.Getenv("PATH")))
	t.Logf("docs/api.md examples:\n%s", out)
	// The last block revoked user 1001's tokens: the live device was kicked.
	if reason := kickReason(t, conn); reason != "revoked" {
		t.Fatalf("kick reason %q after docs/api.md's RevokeTokens", reason)
	}
}

// runDocBlocks runs a document's ```sh blocks as one bash script that stops
// at the first failing command, with the document's address and API key
// replaced by the cluster's; after is printed after each block (curl's
// answers end without a newline). It fails the test with the output.
func runDocBlocks(t *testing.T, tool string, blocks []string, docsAddr, addr, after string, env []string) []byte {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -euo pipefail\ntrap 'echo \"FAILED: $BASH_COMMAND\" >&2' ERR\n")
	for i, b := range blocks {
		b = strings.ReplaceAll(b, docsAddr, addr)
		b = strings.ReplaceAll(b, docsAPIKey, framework.APIKey)
		script.WriteString("echo '--- block " + string(rune('1'+i)) + "'\n" + b + "\n" + after)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("docs/api.md %s examples failed: %v\n%s", tool, err, out)
	}
	return out
}
