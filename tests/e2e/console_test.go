package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sparkim/spark/tests/framework"
)

// The admin console on logic's admin port, in headless Chromium against a
// real cluster: the page refuses a wrong API key and shows no figure, then
// with the key shows the devices online and the gates, and moves to the
// new count by itself when more devices sign in, chart drawn;
// /console/state answers 401 without the key and, with it, exactly the
// cluster's gates, devices and queue partitions. Screenshots are in the
// artifacts directory (console/).
func TestAdminConsoleShowsTheClusterLiveBehindTheAPIKey(t *testing.T) {
	t.Parallel()
	sdk, node := sdkDir(t)
	rcv := newHookReceiver(t, hookSecret)
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4, LogicEnv: []string{
		"IM_LOGIC_WEBHOOK_ENABLED=true", "IM_LOGIC_WEBHOOK_URLS=" + rcv.url(), "IM_LOGIC_WEBHOOK_SECRET=" + hookSecret,
		"IM_LOGIC_WEBHOOK_ALLOW_PRIVATE_URLS=true", "IM_LOGIC_REQUEST_TIMEOUT=2s", "IM_LOGIC_WEBHOOK_SETTLE=2500ms",
	}})
	admin := "http://" + c.Logics[0].AdminAddr
	c.Login(t, 0, 43001, "phone")
	c.Login(t, 1, 43002, "phone")

	code, _ := httpCall(t, c.Logics[0].AdminAddr, "", http.MethodGet, "/console/state", "")
	if code != http.StatusUnauthorized {
		t.Fatalf("/console/state without a key: %d, want 401", code)
	}
	var st struct {
		Gates []struct {
			GateID        string `json:"gate_id"`
			Authenticated uint64 `json:"authenticated"`
		} `json:"gates"`
		Online       int64 `json:"online"`
		DeliverQueue []struct {
			Partition int `json:"partition"`
		} `json:"deliver_queue"`
		PushQueue []any `json:"push_queue"`
		Webhooks  []struct {
			URL    string `json:"url"`
			Status string `json:"status"`
		} `json:"webhooks"`
		Errors   []any           `json:"errors"`
		Problems []string        `json:"problems"`
		Enabled  map[string]bool `json:"enabled"`
	}
	code, b := httpCall(t, c.Logics[0].AdminAddr, framework.APIKey, http.MethodGet, "/console/state", "")
	if err := json.Unmarshal(b, &st); code != http.StatusOK || err != nil {
		t.Fatalf("/console/state: %d %v %s", code, err, b)
	}
	if len(st.Gates) != 2 || st.Online != 2 || len(st.DeliverQueue) != 4 || len(st.PushQueue) != 0 || len(st.Problems) != 0 ||
		len(st.Webhooks) != 1 || st.Webhooks[0].URL != rcv.url() || st.Webhooks[0].Status != "active" ||
		!st.Enabled["webhooks"] || st.Enabled["push"] || st.Errors == nil {
		t.Fatalf("/console/state: %s", b)
	}

	artifacts := browserArtifacts(t, sdk, "console")
	cfg, err := json.Marshal(map[string]any{"url": admin + "/console", "key": framework.APIKey, "artifacts": artifacts, "online": []int{2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := &testLogWriter{t: t}
	cmd := exec.CommandContext(ctx, node, filepath.Join("test", "console.mjs"))
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(), "SPARK_CONSOLE_CONFIG="+string(cfg))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Once the page shows 2 online, a third device signs in.
	for phase1 := filepath.Join(artifacts, "phase1"); ; {
		if _, err := os.Stat(phase1); err == nil {
			break
		}
		select {
		case err := <-done:
			out.flush()
			t.Fatalf("console run ended before showing the first count: %v (screenshots in %s)", err, artifacts)
		case <-time.After(100 * time.Millisecond):
		}
	}
	c.Login(t, 1, 43003, "pad")
	err = <-done
	out.flush()
	t.Logf("console artifacts (screenshots, state.json): %s", artifacts)
	if err != nil {
		t.Fatalf("console run failed: %v (screenshots in %s)", err, artifacts)
	}
	var shown struct {
		Online     string     `json:"online"`
		Gates      [][]string `json:"gates"`
		Deliver    [][]string `json:"deliver"`
		Webhooks   [][]string `json:"webhooks"`
		ChartDrawn bool       `json:"chartDrawn"`
	}
	b, err = os.ReadFile(filepath.Join(artifacts, "state.json"))
	if err == nil {
		err = json.Unmarshal(b, &shown)
	}
	if err != nil || shown.Online != "3" || len(shown.Gates) != 2 || len(shown.Deliver) != 4 || len(shown.Webhooks) != 1 || !shown.ChartDrawn {
		t.Fatalf("the page showed %s (%v)", b, err)
	}
	for _, f := range []string{"console-refused.png", "console-before.png", "console-after.png"} {
		if fi, err := os.Stat(filepath.Join(artifacts, f)); err != nil || fi.Size() == 0 {
			t.Fatalf("screenshot %s: %v", f, err)
		}
	}
}
