// Package console serves the operator's web page on logic's admin port:
// gates with their connections and versions, devices online, the deliver
// and push queues per partition, webhook endpoints, and this logic's
// recent warnings and errors, refreshed every few seconds with a chart of
// the last minutes. The page itself holds nothing; its data comes from
// /console/state, which needs a business API key in x-api-key (the admin
// port is loopback by default, but may be reachable in a cluster). Every
// figure comes from the same domain calls as the API and imctl.
package console

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/logic/internal/online"
	"github.com/sparkim/spark/logic/internal/webhook"
	"github.com/sparkim/spark/pkg/logging"
	"github.com/sparkim/spark/pkg/msgid"
	"github.com/sparkim/spark/pkg/queue"
	"github.com/sparkim/spark/pkg/rediskey"
)

//go:embed index.html
var page []byte

// KeyCheck reports whether a business API key is valid (a
// *clusterauth.Guard).
type KeyCheck interface{ Allows(key string) bool }

// Sources are what the page shows. Webhooks is nil when they are off,
// PushPartitions 0 when offline push is.
type Sources struct {
	Online            *online.Service
	Redis             redis.Cmdable
	DeliverPartitions int
	PushPartitions    int
	Webhooks          *webhook.Service
	Recent            *logging.Recent
	Keys              KeyCheck
}

// Gate is a gate row of the state.
type Gate struct {
	GateID        string `json:"gate_id"`
	Version       string `json:"version"`
	Connections   uint64 `json:"connections"`
	Authenticated uint64 `json:"authenticated"`
	StartedAtMs   int64  `json:"started_at_ms"`
	Error         string `json:"error,omitempty"`
}

// Partition is a queue partition row of the state.
type Partition struct {
	Partition        int     `json:"partition"`
	Length           int64   `json:"length"`
	Pending          int64   `json:"pending"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
}

// Endpoint is a webhook endpoint row of the state.
type Endpoint struct {
	EndpointID    int64   `json:"endpoint_id,string"`
	URL           string  `json:"url"`
	Status        string  `json:"status"`
	BehindSeconds float64 `json:"behind_seconds"`
	Attempts      int     `json:"attempts"`
	LastError     string  `json:"last_error,omitempty"`
}

// State is the answer of /console/state. A part that could not be read
// is left empty and Problems says why.
type State struct {
	TimeMs int64  `json:"time_ms"`
	Gates  []Gate `json:"gates"`
	// Online is the authenticated connections over every gate.
	Online       int64           `json:"online"`
	DeliverQueue []Partition     `json:"deliver_queue"`
	PushQueue    []Partition     `json:"push_queue"`
	Webhooks     []Endpoint      `json:"webhooks"`
	Errors       []logging.Entry `json:"errors"`
	Problems     []string        `json:"problems"`
	Enabled      map[string]bool `json:"enabled"`
}

// Handler serves /console (the page) and /console/state (its data).
func Handler(src Sources) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /console", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
		_, _ = w.Write(page)
	})
	mux.HandleFunc("GET /console/state", func(w http.ResponseWriter, r *http.Request) {
		if !src.Keys.Allows(r.Header.Get("x-api-key")) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"code":40101,"message":"a business API key is required in x-api-key"}` + "\n"))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		st := src.state(ctx, time.Now())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(st)
	})
	return mux
}

func (src Sources) state(ctx context.Context, now time.Time) State {
	st := State{TimeMs: now.UnixMilli(), Gates: []Gate{}, DeliverQueue: []Partition{}, PushQueue: []Partition{},
		Webhooks: []Endpoint{}, Errors: []logging.Entry{}, Problems: []string{},
		Enabled: map[string]bool{"push": src.PushPartitions > 0, "webhooks": src.Webhooks != nil}}
	if gates, err := src.Online.Gates(ctx); err != nil {
		st.Problems = append(st.Problems, "gates: "+err.Error())
	} else {
		for _, g := range gates {
			st.Gates = append(st.Gates, Gate{GateID: g.ID, Version: g.Version, Connections: g.Connections,
				Authenticated: g.Authenticated, StartedAtMs: g.StartedAtMs, Error: g.Err})
			st.Online += int64(g.Authenticated)
		}
	}
	st.DeliverQueue = src.queue(ctx, &st, "deliver queue", src.DeliverPartitions, rediskey.Deliver, rediskey.DeliverGroup, now)
	st.PushQueue = src.queue(ctx, &st, "push queue", src.PushPartitions, rediskey.Push, rediskey.PushGroup, now)
	if src.Webhooks != nil {
		eps, err := src.Webhooks.List(ctx)
		if err != nil {
			st.Problems = append(st.Problems, "webhooks: "+err.Error())
		}
		for _, ep := range eps {
			e := Endpoint{EndpointID: ep.ID, URL: ep.URL, Status: webhook.StatusName(ep.Status), Attempts: ep.Attempts, LastError: ep.LastError}
			if id, err := src.Webhooks.OldestPending(ctx, ep); err == nil && id > 0 {
				e.BehindSeconds = max(now.Sub(msgid.TimeOf(id)).Seconds(), 0)
			}
			st.Webhooks = append(st.Webhooks, e)
		}
	}
	if src.Recent != nil {
		st.Errors = src.Recent.Entries()
	}
	return st
}

// queue samples n streams of one queue.
func (src Sources) queue(ctx context.Context, st *State, name string, n int, key func(int) string, group string, now time.Time) []Partition {
	out := []Partition{}
	if n <= 0 {
		return out
	}
	streams := make([]string, n)
	for p := range streams {
		streams[p] = key(p)
	}
	states, err := queue.Sample(ctx, src.Redis, streams, group, now)
	if err != nil {
		st.Problems = append(st.Problems, name+": "+err.Error())
	}
	for p, s := range states {
		out = append(out, Partition{Partition: p, Length: s.Length, Pending: s.Pending, OldestAgeSeconds: s.OldestAgeSeconds})
	}
	return out
}
