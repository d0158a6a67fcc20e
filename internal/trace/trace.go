// Package trace is the host's OpenTelemetry tracing: one trace per flow, its context carried
// in W3C traceparent/tracestate headers across every message a flow sends, and a span for each
// step of a job. It is off unless an OTLP endpoint is given (serve --otlp-endpoint, or the
// standard OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and off costs a
// nil check: the tracer is OpenTelemetry's no-op one and no header is read or written.
//
// Spans below a job's are started from the context (Start), with the provider of the span the
// context holds, so that packages deep in a run (the runner, the egress proxy) need no tracer
// of their own and two hosts in one process keep theirs apart.
package trace

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/metrics"
)

// The W3C Trace Context headers, as they travel in NATS headers (which, unlike HTTP's, are
// case-sensitive: these are the spellings the host writes and reads first).
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// Attribute keys every job span carries.
const (
	AttrFunction   = attribute.Key("agent.function")
	AttrJob        = attribute.Key("agent.job")
	AttrFlow       = attribute.Key("agent.flow")
	AttrHost       = attribute.Key("agent.host")
	AttrAttempt    = attribute.Key("agent.attempt")
	AttrDeployment = attribute.Key("agent.deployment")
)

// instrumentation is the name the host's spans are made under.
const instrumentation = "github.com/agenthost/host"

// Config says where spans go.
type Config struct {
	// Endpoint is the OTLP/HTTP endpoint's URL (http://127.0.0.1:4318); "" takes the standard
	// OTEL_EXPORTER_OTLP_* variables, and without them tracing is off.
	Endpoint string
	Service  string // service.name, unless OTEL_SERVICE_NAME says otherwise; "host" when ""
	HostID   string // host.name of every span
	Log      *zap.Logger
	// Registry takes host_trace_spans_dropped_total; nil registers nothing.
	Registry prometheus.Registerer
	// ExportTimeout bounds one export, its retries included (default 10s): spans that cannot go
	// by then are dropped, counted and logged.
	ExportTimeout time.Duration
}

// Tracer makes the host's spans. The zero value and nil are off.
type Tracer struct {
	t   oteltrace.Tracer
	sdk *sdktrace.TracerProvider
}

// Off is a tracer that traces nothing.
func Off() *Tracer { return nil }

// Configured says whether cfg (with the environment) turns tracing on.
func Configured(endpoint string) bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	return endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// New makes the tracer cfg says: Off when no endpoint is configured.
func New(ctx context.Context, cfg Config) (*Tracer, error) {
	if !Configured(cfg.Endpoint) {
		return Off(), nil
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.ExportTimeout <= 0 {
		cfg.ExportTimeout = 10 * time.Second
	}
	opts := []otlptracehttp.Option{
		otlptracehttp.WithTimeout(cfg.ExportTimeout),
		// A collector that is down must not hold spans for a minute (the default): they are
		// dropped after ExportTimeout, counted, and the jobs run on.
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: true, InitialInterval: 500 * time.Millisecond,
			MaxInterval: 2 * time.Second, MaxElapsedTime: cfg.ExportTimeout}),
	}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("--otlp-endpoint %q is not an http(s) URL of an OTLP/HTTP receiver (http://127.0.0.1:4318)", cfg.Endpoint)
		}
		// A base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is: the traces go to its /v1/traces.
		if strings.Trim(u.Path, "/") == "" {
			u.Path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter for %q: %w (check --otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)", cfg.Endpoint, err)
	}
	service := cfg.Service
	if service == "" {
		service = "host"
	}
	res, err := resource.New(ctx, resource.WithAttributes(
		attribute.String("service.name", service), attribute.String("host.name", cfg.HostID)),
		resource.WithFromEnv())
	if err != nil && res == nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	d := newDrops(cfg.Log, cfg.Registry)
	installErrorHandler(d)
	sdk := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithBatcher(&countingExporter{SpanExporter: exp, drops: d},
			sdktrace.WithBatchTimeout(time.Second), sdktrace.WithExportTimeout(cfg.ExportTimeout)),
	)
	return &Tracer{t: sdk.Tracer(instrumentation), sdk: sdk}, nil
}

// Enabled says whether spans are made at all.
func (t *Tracer) Enabled() bool { return t != nil && t.sdk != nil }

// Shutdown sends the spans still held, within ctx, and stops.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	return t.sdk.Shutdown(ctx)
}

// Flush sends the spans ended so far.
func (t *Tracer) Flush(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	return t.sdk.ForceFlush(ctx)
}

// Root starts a span continuing the trace whose context hdr carries (a NATS message's headers,
// or an HTTP request's), or a new trace when it carries none. Off, it returns ctx and a no-op
// span without reading hdr.
func (t *Tracer) Root(ctx context.Context, hdr map[string][]string, name string, opts ...oteltrace.SpanStartOption) (context.Context, oteltrace.Span) {
	if !t.Enabled() {
		return ctx, noopSpan
	}
	ctx = Extract(ctx, hdr)
	return t.t.Start(ctx, name, append(opts, oteltrace.WithSpanKind(oteltrace.SpanKindConsumer))...)
}

// Extract is ctx with the remote trace context hdr carries (a NATS message's or an HTTP
// request's headers), for Inject to carry on; ctx itself when hdr carries none.
func Extract(ctx context.Context, hdr map[string][]string) context.Context {
	if hdr == nil || carrier(hdr).Get(HeaderTraceparent) == "" {
		return ctx
	}
	return propagator.Extract(ctx, carrier(hdr))
}

// Join is ctx holding the span that from holds (none when from is nil): a context of one
// lifetime (a job's run) under the span of another (the job's delivery).
func Join(ctx, from context.Context) context.Context {
	if from == nil {
		return ctx
	}
	return oteltrace.ContextWithSpan(ctx, oteltrace.SpanFromContext(from))
}

// Start starts a span under the one ctx holds, with that span's provider: a no-op span (and
// ctx as it is) when ctx holds no recording span.
func Start(ctx context.Context, name string, opts ...oteltrace.SpanStartOption) (context.Context, oteltrace.Span) {
	parent := oteltrace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noopSpan
	}
	return parent.TracerProvider().Tracer(instrumentation).Start(ctx, name, opts...)
}

// EndErr ends span, marking it failed with err when err is not nil.
func EndErr(span oteltrace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Span is the span ctx holds (a no-op one when none).
func Span(ctx context.Context) oteltrace.Span { return oteltrace.SpanFromContext(ctx) }

// Inject writes the trace context of ctx's span into hdr; nothing when ctx holds none.
func Inject(ctx context.Context, hdr map[string][]string) {
	if !oteltrace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, carrier(hdr))
}

// Traceparent is the traceparent of ctx's span; "" when it holds none.
func Traceparent(ctx context.Context) string {
	sc := oteltrace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

// SetHeaders writes traceparent (and tracestate, when not "") into hdr, as a message sent on
// behalf of a span whose context they are; nothing when traceparent is "".
func SetHeaders(hdr map[string][]string, traceparent, tracestate string) {
	if traceparent == "" {
		return
	}
	hdr[HeaderTraceparent] = []string{traceparent}
	if tracestate != "" {
		hdr[HeaderTracestate] = []string{tracestate}
	}
}

// Carry copies the trace context of src's headers into dst, as a message that goes on in
// src's stead (a join started by the message that completed it).
func Carry(dst, src map[string][]string) {
	c := carrier(src)
	SetHeaders(dst, c.Get(HeaderTraceparent), c.Get(HeaderTracestate))
}

// TraceID is the trace id of a traceparent ("" when it is not one), for links to the trace.
func TraceID(traceparent string) string {
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		return ""
	}
	return parts[1]
}

// URL fills a --trace-url template's {trace_id} with the trace of traceparent: "" when either
// is missing.
func URL(template, traceparent string) string {
	id := TraceID(traceparent)
	if template == "" || id == "" {
		return ""
	}
	return strings.ReplaceAll(template, "{trace_id}", id)
}

var (
	propagator = propagation.TraceContext{}
	noopSpan   = noop.Span{}
)

// carrier reads and writes W3C headers in a NATS or HTTP header map: NATS keeps keys as sent
// (traceparent), HTTP canonicalises them (Traceparent); both are read.
type carrier map[string][]string

func (c carrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	if v := c[strings.ToUpper(key[:1])+key[1:]]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c carrier) Set(key, value string) { c[key] = []string{value} }

func (c carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// drops counts spans that could not be exported and logs that, at most once a minute.
type drops struct {
	log     *zap.Logger
	counter prometheus.Counter
	last    atomic.Int64 // unix nanos of the last log line
}

type dropSeries struct{ dropped prometheus.Counter }

func newDrops(log *zap.Logger, reg prometheus.Registerer) *drops {
	s := metrics.Once(reg, func(f promauto.Factory) *dropSeries {
		return &dropSeries{f.NewCounter(prometheus.CounterOpts{Name: "host_trace_spans_dropped_total",
			Help: "Spans the OTLP exporter could not send (the collector down or refusing); the jobs ran on."})}
	})
	return &drops{log: log, counter: s.dropped}
}

// dropLogEvery bounds the log lines about dropped spans.
const dropLogEvery = time.Minute

func (d *drops) dropped(n int, err error) {
	d.counter.Add(float64(n))
	d.logged(func() {
		d.log.Warn("trace spans dropped: the OTLP collector did not take them; jobs run on (host_trace_spans_dropped_total counts them; check --otlp-endpoint)",
			zap.Int("spans", n), zap.Error(err))
	})
}

func (d *drops) logged(f func()) {
	now := time.Now().UnixNano()
	last := d.last.Load()
	if now-last < int64(dropLogEvery) || !d.last.CompareAndSwap(last, now) {
		return
	}
	f()
}

// countingExporter counts the spans its exporter fails to send.
type countingExporter struct {
	sdktrace.SpanExporter
	drops *drops
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.drops.dropped(len(spans), err)
	}
	return err
}

// OpenTelemetry reports an exporter's failures to one process-wide handler, which by default
// prints each one: the host's counts them (above) and logs them rate-limited instead.
var (
	handlerOnce sync.Once
	handlerTo   atomic.Pointer[drops]
)

func installErrorHandler(d *drops) {
	handlerTo.Store(d)
	handlerOnce.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			if d := handlerTo.Load(); d != nil && !errors.Is(err, context.Canceled) {
				d.logged(func() { d.log.Warn("opentelemetry", zap.Error(err)) })
			}
		}))
	})
}
