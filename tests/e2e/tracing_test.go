package e2e

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/tests/framework"
)

// otlpSpan is one span as the collector received it.
type otlpSpan struct {
	service, name         string
	traceID, id, parentID string
	msgID                 int64
}

// otlpCollector is an OTLP/HTTP traces receiver (POST /v1/traces with an
// ExportTraceServiceRequest in protobuf), as a real collector serves it.
type otlpCollector struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []otlpSpan
	bad   []string
}

func newOTLPCollector(t *testing.T) *otlpCollector {
	c := &otlpCollector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
			c.bad = append(c.bad, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		for _, rs := range req.GetResourceSpans() {
			service := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					c.spans = append(c.spans, spanOf(service, sp))
				}
			}
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func spanOf(service string, sp *tracepb.Span) otlpSpan {
	s := otlpSpan{service: service, name: sp.GetName(), traceID: hex.EncodeToString(sp.GetTraceId()),
		id: hex.EncodeToString(sp.GetSpanId()), parentID: hex.EncodeToString(sp.GetParentSpanId())}
	for _, a := range sp.GetAttributes() {
		if a.GetKey() == "spark.msg_id" {
			s.msgID = a.GetValue().GetIntValue()
		}
	}
	return s
}

// TestTracingFollowsASendFromGateToLogicToDeliverToTheOtherGate: with
// tracing on, every process exports to a collector in the test; one send
// between devices on two gates is one trace whose spans chain gate.send
// (spark-gate) → logic.send → logic.commit_and_enqueue (spark-logic) →
// deliver.job (spark-deliver) → gate.push (spark-gate), the msg_id on
// logic's and deliver's spans.
func TestTracingFollowsASendFromGateToLogicToDeliverToTheOtherGate(t *testing.T) {
	t.Parallel()
	col := newOTLPCollector(t)
	c := framework.NewCluster(t, framework.Options{Gates: 2, Env: []string{
		"IM_TRACING_ENABLED=true", "IM_TRACING_ENDPOINT=" + col.srv.URL + "/v1/traces",
	}})
	ctx := ctxT(t, time.Minute)
	a := c.Login(t, 0, 44001, "phone")
	b := c.Login(t, 1, 44002, "phone")
	ack, err := a.SendText(ctx, 44002, "traced")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.NextMessage(b, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	id := ack.MsgID.Int64()

	want := []struct{ name, service string }{
		{"gate.send", "spark-gate"}, {"logic.send", "spark-logic"}, {"logic.commit_and_enqueue", "spark-logic"},
		{"deliver.job", "spark-deliver"}, {"gate.push", "spark-gate"},
	}
	var chain []otlpSpan
	deadline := time.Now().Add(20 * time.Second)
	for {
		chain = nil
		col.mu.Lock()
		spans := append([]otlpSpan(nil), col.spans...)
		bad := col.bad
		col.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("the collector refused exports: %v", bad)
		}
		// The trace of the send: the one its logic.send span is in.
		var traceID string
		for _, s := range spans {
			if s.name == "logic.send" && s.msgID == id {
				traceID = s.traceID
			}
		}
		byName := map[string]otlpSpan{}
		for _, s := range spans {
			if s.traceID == traceID && traceID != "" {
				byName[s.name] = s
			}
		}
		for _, w := range want {
			if s, ok := byName[w.name]; ok {
				chain = append(chain, s)
			}
		}
		if len(chain) == len(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the send's trace has %d of %d spans: %+v (of %d spans received)", len(chain), len(want), chain, len(spans))
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, s := range chain {
		t.Logf("%s %s trace %s span %s parent %s msg_id %d", s.service, s.name, s.traceID, s.id, s.parentID, s.msgID)
	}
	for i, s := range chain {
		if s.service != want[i].service {
			t.Errorf("%s came from %q, want %q", s.name, s.service, want[i].service)
		}
		if i == 0 {
			if s.parentID != "" && s.parentID != "0000000000000000" {
				t.Errorf("gate.send has a parent %s: it should start the trace", s.parentID)
			}
			continue
		}
		if s.parentID != chain[i-1].id {
			t.Errorf("%s's parent is %s, want %s (%s)", s.name, s.parentID, chain[i-1].id, chain[i-1].name)
		}
	}
	for _, s := range chain[1:4] {
		if s.msgID != id {
			t.Errorf("%s carries msg_id %d, want %d", s.name, s.msgID, id)
		}
	}
}
