// Package tracing is the processes' OpenTelemetry traces: off by default;
// on, each process exports its spans over OTLP/HTTP, and a send's spans
// form one trace across the hops that have no per-request gRPC call to
// carry it — the gate's stream frame to logic, the deliver job in Redis,
// the Push item to the gate — through a W3C traceparent field each of
// those messages has (decision 100). When tracing is off, On reports
// false and callers skip every span: no allocation, no field set.
package tracing

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sparkim/spark/pkg/config"
)

// on is set once Start installed an exporting provider. Like the logger,
// the tracer provider is process-wide (OpenTelemetry's own global).
var on atomic.Bool

// Attribute keys the spans carry.
const (
	AttrMsgID  = attribute.Key("spark.msg_id")
	AttrConnID = attribute.Key("spark.conn_id")
	AttrUserID = attribute.Key("spark.user_id")
)

// Start installs the tracer provider of c for service (spark-gate,
// spark-logic, spark-deliver; c.ServiceName instead when set) and returns
// its shutdown, which flushes what is buffered. With c.Enabled false it
// does nothing.
func Start(ctx context.Context, c config.Tracing, service string) (func(context.Context) error, error) {
	if !c.Enabled {
		return func(context.Context) error { return nil }, nil
	}
	if c.ServiceName != "" {
		service = c.ServiceName
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(c.Endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	on.Store(true)
	return func(ctx context.Context) error {
		on.Store(false)
		return tp.Shutdown(ctx)
	}, nil
}

// On reports whether spans are recorded; callers test it before making
// any.
func On() bool { return on.Load() }

// Tracer is the processes' tracer.
func Tracer() trace.Tracer { return otel.Tracer("github.com/sparkim/spark") }

// Parent returns the W3C traceparent of ctx's span, "" when it has none
// (or it is not sampled, so nobody downstream records either).
func Parent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// WithParent returns ctx carrying the remote span context traceparent
// names (ctx itself when it is empty or malformed).
func WithParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// Stop runs a shutdown Start returned, bounded: a process stopping waits
// at most 5 s for its last spans to leave.
func Stop(shutdown func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = shutdown(ctx)
}
