package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// Endpoint is one row of "webhooks": an endpoint's delivery state.
type Endpoint struct {
	EndpointID int64    `json:"endpoint_id"`
	URL        string   `json:"url"`
	Events     []string `json:"events"`
	// Status is active, disabled, gone (it answered 410) or dead
	// (retries exhausted).
	Status   string `json:"status"`
	CursorID int64  `json:"cursor_id,string"`
	// BehindSeconds is how long ago the oldest event the endpoint has not
	// had yet was committed (0: none); a healthy endpoint trails by about
	// logic.webhook.settle.
	BehindSeconds float64 `json:"behind_seconds"`
	// Attempts failed at the next event; NextAttemptMs is when it is tried
	// again; LastError why it failed.
	Attempts      int32  `json:"attempts"`
	NextAttemptMs int64  `json:"next_attempt_ms"`
	LastError     string `json:"last_error"`
	FromConfig    bool   `json:"from_config"`
}

// webhooks is "webhooks": every endpoint with its status, how far behind
// it is and its last failure (ListWebhookEndpoints).
func (c *ctl) webhooks(ctx context.Context, args []string) error {
	if len(args) != 0 {
		return usageError("webhooks takes no arguments")
	}
	api, done, err := c.api()
	if err != nil {
		return err
	}
	defer done()
	r, err := api.ListWebhookEndpoints(c.keyed(ctx), &logicv1.ListWebhookEndpointsRequest{})
	if err != nil {
		return fmt.Errorf("ListWebhookEndpoints: %w", err)
	}
	now := time.Now()
	eps := []Endpoint{}
	rows := [][]string{}
	for _, e := range r.GetEndpoints() {
		ep := Endpoint{EndpointID: e.GetEndpointId(), URL: e.GetUrl(), Events: e.GetEvents(), Status: e.GetStatus(), CursorID: e.GetCursorId(),
			Attempts: e.GetAttempts(), NextAttemptMs: e.GetNextAttemptMs(), LastError: e.GetLastError(), FromConfig: e.GetFromConfig()}
		if ep.Events == nil {
			ep.Events = []string{}
		}
		if ms := e.GetOldestPendingMs(); ms > 0 {
			ep.BehindSeconds = max(now.Sub(time.UnixMilli(ms)).Seconds(), 0)
		}
		eps = append(eps, ep)
		events := "*"
		if len(ep.Events) > 0 {
			events = strings.Join(ep.Events, ",")
		}
		rows = append(rows, []string{strconv.FormatInt(ep.EndpointID, 10), ep.URL, ep.Status, events,
			strconv.FormatFloat(ep.BehindSeconds, 'f', 1, 64), strconv.Itoa(int(ep.Attempts)), msTime(ep.NextAttemptMs), dash(ep.LastError)})
	}
	return c.emit(eps, []string{"ID", "URL", "STATUS", "EVENTS", "BEHIND_S", "ATTEMPTS", "NEXT_ATTEMPT", "LAST_ERROR"}, rows)
}
