package push_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/push"
	"github.com/sparkim/spark/pkg/stdwebhook"
)

// fakeGateway is a business push gateway: it verifies the Standard
// Webhooks signature, drops a webhook-id it has seen (as the
// specification asks a receiver to), records the events and answers from
// a script.
type fakeGateway struct {
	t      *testing.T
	srv    *httptest.Server
	secret stdwebhook.Secret

	mu     sync.Mutex
	script []int
	events []push.GatewayEvent
	ids    map[string]int
}

func newFakeGateway(t *testing.T) *fakeGateway {
	s, err := stdwebhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	g := &fakeGateway{t: t, secret: s, ids: map[string]int{}}
	g.srv = httptest.NewTLSServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *fakeGateway) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := stdwebhook.Verify(r.Header, body, time.Now(), g.secret); err != nil {
		g.t.Errorf("fake gateway: %v", err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	status := http.StatusNoContent
	if len(g.script) > 0 {
		status, g.script = g.script[0], g.script[1:]
	}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	id := r.Header.Get(stdwebhook.HeaderID)
	if status < 300 {
		g.ids[id]++
		if g.ids[id] == 1 {
			var ev push.GatewayEvent
			if err := json.Unmarshal(body, &ev); err != nil {
				g.t.Errorf("fake gateway: body: %v", err)
			}
			g.events = append(g.events, ev)
		}
	}
	w.WriteHeader(status)
}

func (g *fakeGateway) received() []push.GatewayEvent {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]push.GatewayEvent(nil), g.events...)
}

// The gateway's answers map onto results, and every request is signed.
func TestGatewayAnswersMapOntoResults(t *testing.T) {
	tests := []struct {
		status int
		want   push.Result
	}{
		{200, push.Sent}, {204, push.Sent}, {404, push.DeadToken}, {410, push.DeadToken},
		{429, push.Retry}, {502, push.Retry}, {503, push.Retry},
		{401, push.AuthError}, {403, push.AuthError}, {400, push.Rejected},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			g := newFakeGateway(t)
			g.script = []int{tt.status}
			n := note(push.PlatformGateway)
			n.Token.Gateway, n.Token.Token = "jpush", "jp-1"
			ans := push.NewGateway(g.srv.URL, g.secret, g.srv.Client()).Send(context.Background(), n)
			if ans.Result != tt.want {
				t.Fatalf("%d: %+v, want %v", tt.status, ans, tt.want)
			}
			if tt.status == 429 && ans.RetryAfter != time.Second {
				t.Fatalf("429 Retry-After 1 read as %v", ans.RetryAfter)
			}
			if tt.want == push.Sent {
				ev := g.received()
				if len(ev) != 1 || ev[0].Data.Token != "jp-1" || ev[0].Data.MsgID != "42" || ev[0].Data.Badge != 3 || ev[0].Data.CollapseID != "c99" {
					t.Fatalf("events %+v", ev)
				}
			}
		})
	}
}
