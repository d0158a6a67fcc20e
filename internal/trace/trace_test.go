package trace

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestOffTracesNothingAndTouchesNoHeader(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tr, err := New(context.Background(), Config{})
	if err != nil || tr.Enabled() {
		t.Fatalf("New without an endpoint: %v, enabled %v; want off", err, tr.Enabled())
	}
	hdr := map[string][]string{HeaderTraceparent: {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	ctx, span := tr.Root(context.Background(), hdr, "job x")
	if span.IsRecording() || Traceparent(ctx) != "" {
		t.Fatalf("off: a recording span, or a traceparent %q", Traceparent(ctx))
	}
	out := map[string][]string{}
	Inject(ctx, out)
	if len(out) != 0 {
		t.Fatalf("off: Inject wrote %v", out)
	}
}

func TestRootContinuesTheIncomingTrace(t *testing.T) {
	var got atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/traces" {
			got.Add(1)
		}
	}))
	defer collector.Close()
	tr, err := New(context.Background(), Config{Endpoint: collector.URL, HostID: "h1"})
	if err != nil || !tr.Enabled() {
		t.Fatalf("New: %v", err)
	}
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	// NATS keeps header keys as sent; HTTP canonicalises them: both are read.
	for _, key := range []string{"traceparent", "Traceparent"} {
		ctx, span := tr.Root(context.Background(), map[string][]string{key: {"00-" + id + "-00f067aa0ba902b7-01"}}, "job x")
		if TraceID(Traceparent(ctx)) != id || span.SpanContext().SpanID().String() == "00f067aa0ba902b7" {
			t.Fatalf("%s: continued as %q, want a new span of trace %s", key, Traceparent(ctx), id)
		}
		out := map[string][]string{}
		Inject(ctx, out)
		if out[HeaderTraceparent][0] != Traceparent(ctx) {
			t.Fatalf("Inject wrote %v, want %s", out, Traceparent(ctx))
		}
		span.End()
	}
	if err := tr.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got.Load() == 0 {
		t.Fatal("no export reached the collector's /v1/traces")
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestBadEndpointIsRefused(t *testing.T) {
	if _, err := New(context.Background(), Config{Endpoint: "127.0.0.1:4318"}); err == nil || !strings.Contains(err.Error(), "--otlp-endpoint") {
		t.Fatalf("an endpoint without a scheme: %v", err)
	}
}

func TestDropsAreCountedAndLoggedOnceAMinute(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	reg := prometheus.NewRegistry()
	d := newDrops(zap.New(core), reg)
	d.dropped(3, context.DeadlineExceeded)
	d.dropped(2, context.DeadlineExceeded)
	if n := testutil.ToFloat64(d.counter); n != 5 {
		t.Fatalf("counted %v dropped spans, want 5", n)
	}
	if logs.Len() != 1 {
		t.Fatalf("%d log lines, want 1 within a minute", logs.Len())
	}
	d.last.Store(time.Now().Add(-2 * dropLogEvery).UnixNano())
	d.dropped(1, context.DeadlineExceeded)
	if logs.Len() != 2 {
		t.Fatalf("%d log lines a minute later, want 2", logs.Len())
	}
}

func TestURL(t *testing.T) {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if got := URL("http://jaeger:16686/trace/{trace_id}", tp); got != "http://jaeger:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("URL: %q", got)
	}
	if URL("", tp) != "" || URL("http://x/{trace_id}", "") != "" || URL("http://x/{trace_id}", "junk") != "" {
		t.Fatal("URL without a template or a traceparent should be empty")
	}
}
