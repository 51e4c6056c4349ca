package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/sparkim/spark/pkg/config"
)

func TestOffMakesNoSpanAndOnCarriesTheParentAcrossAHop(t *testing.T) {
	ctx := context.Background()
	stop, err := Start(ctx, config.Tracing{Enabled: false}, "spark-test")
	if err != nil || On() {
		t.Fatalf("disabled Start: on %v, %v", On(), err)
	}
	_ = stop(ctx)
	if allocs := testing.AllocsPerRun(100, func() {
		if On() {
			_, span := Tracer().Start(ctx, "never")
			span.End()
		}
	}); allocs != 0 {
		t.Fatalf("the guarded hot path allocates %v times with tracing off", allocs)
	}
	if p := Parent(ctx); p != "" {
		t.Fatalf("Parent of a context without a span: %q", p)
	}

	// The endpoint is never reached: nothing is flushed before Stop, and
	// the exporter's failure is not this test's business.
	stop, err = Start(ctx, config.Tracing{Enabled: true, Endpoint: "http://127.0.0.1:9/v1/traces", SampleRatio: 1}, "spark-test")
	if err != nil || !On() {
		t.Fatalf("enabled Start: on %v, %v", On(), err)
	}
	defer Stop(stop)
	sctx, span := Tracer().Start(ctx, "hop")
	p := Parent(sctx)
	if len(p) != 55 || p[:3] != "00-" {
		t.Fatalf("traceparent %q", p)
	}
	got := trace.SpanContextFromContext(WithParent(ctx, p))
	if !got.IsRemote() || got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("the parent did not cross: %+v", got)
	}
	if WithParent(ctx, "garbage") != ctx && trace.SpanContextFromContext(WithParent(ctx, "garbage")).IsValid() {
		t.Fatal("a malformed traceparent became a parent")
	}
	span.End()
}
