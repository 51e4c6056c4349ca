package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparkim/spark/pkg/stdwebhook"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// hookCatchUp bounds how long p2p-webhook waits, after the window, for
// the endpoint to have every acked message (logic.webhook.settle is 10 s).
const hookCatchUp = 3 * time.Minute

// hookSink is p2p-webhook's business server: an HTTP endpoint on loopback,
// registered through the business API for message.sent, that checks every
// request's signature and records the msg_ids it got.
type hookSink struct {
	api    *api
	srv    *http.Server
	id     int64
	secret stdwebhook.Secret

	mu    sync.Mutex
	ids   map[int64]int
	first time.Time // first POST
	last  time.Time // latest POST

	posts, bad atomic.Int64
}

func (e *Env) startHookSink(ctx context.Context) (*hookSink, error) {
	a, err := e.dialAPI()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		a.close()
		return nil, fmt.Errorf("scenario: webhook listener: %w", err)
	}
	h := &hookSink{api: a, ids: map[int64]int{}}
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = h.srv.Serve(ln) }()
	ep, err := a.cli.CreateWebhookEndpoint(a.ctx(ctx), &logicv1.CreateWebhookEndpointRequest{
		Url: "http://" + ln.Addr().String() + "/hook", Events: []string{"message.sent"},
	})
	if err == nil {
		h.id = ep.EndpointId
		h.secret, err = stdwebhook.ParseSecret(ep.Secret)
	}
	if err != nil {
		_ = h.srv.Close()
		a.close()
		return nil, fmt.Errorf("scenario: create webhook endpoint: %w", err)
	}
	return h, nil
}

func (h *hookSink) serve(w http.ResponseWriter, r *http.Request) {
	h.posts.Add(1)
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = stdwebhook.Verify(r.Header, body, time.Now(), h.secret)
	}
	var ev struct {
		Type string `json:"type"`
		Data struct {
			MsgID string `json:"msg_id"`
		} `json:"data"`
	}
	if err == nil {
		err = json.Unmarshal(body, &ev)
	}
	id, perr := strconv.ParseInt(ev.Data.MsgID, 10, 64)
	if err == nil && (ev.Type != "message.sent" || perr != nil) {
		err = errors.New("not a message.sent event")
	}
	if err != nil {
		h.bad.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	now := time.Now()
	h.mu.Lock()
	h.ids[id]++
	if h.first.IsZero() {
		h.first = now
	}
	h.last = now
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// missing counts the ids the endpoint has not received.
func (h *hookSink) missing(ids []int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, id := range ids {
		if h.ids[id] == 0 {
			n++
		}
	}
	return n
}

// account waits until the endpoint has every acked message (or
// hookCatchUp passed) and reports what it got; false when a message is
// missing or a request failed its signature check.
func (h *hookSink) account(ctx context.Context, res *Result, acked []int64, window time.Duration) bool {
	start := time.Now()
	left := h.missing(acked)
	for left > 0 && time.Since(start) < hookCatchUp && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		left = h.missing(acked)
	}
	h.mu.Lock()
	distinct, first, last := len(h.ids), h.first, h.last
	h.mu.Unlock()
	res.add("acked messages the webhook endpoint received", float64(len(acked)-left), "")
	res.add("acked messages the webhook endpoint never received", float64(left), "")
	res.add("webhook requests failing the signature check", float64(h.bad.Load()), "")
	res.add("webhook requests (retries and repeats included)", float64(h.posts.Load()), "")
	res.add("time after the window until the endpoint had every acked message", time.Since(start).Seconds(), "s")
	if span := last.Sub(first); span > 0 {
		res.add("webhook delivery rate (distinct message.sent /s while posting)", float64(distinct)/span.Seconds(), "msg/s")
	}
	res.note("webhook endpoint: message.sent only, signature checked on every request; events are read logic.webhook.settle after their commit, one POST at a time; the window lasted %.1f s",
		window.Seconds())
	ok := left == 0 && h.bad.Load() == 0
	if !ok {
		res.note("FAIL: %d acked messages never reached the webhook endpoint, %d requests failed the signature check", left, h.bad.Load())
	}
	return ok
}

// close disables the endpoint (the later scenarios run without it) and
// stops the receiver.
func (h *hookSink) close(ctx context.Context) {
	_, _ = h.api.cli.DisableWebhookEndpoint(h.api.ctx(ctx), &logicv1.WebhookEndpointRef{EndpointId: h.id})
	_ = h.srv.Close()
	h.api.close()
}
