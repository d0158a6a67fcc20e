package egress

import (
	"bufio"
	"context"
	"net"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/agenthost/host/internal/trace"
)

// Each request through a job's proxy is a span under the job's (package trace: the job's
// context is the proxy's base context), "egress <METHOD>", saying the host, the method, the
// status, whether a sealed secret was put in and whether the proxy refused it, and why. Never
// the path, a header or a body: they may hold secrets. A tunnel the proxy terminates has a
// span of its own for each request inside it, under the tunnel's.

// traced starts the span of request r under parent, and returns the writer and request to
// serve it with, and what ends the span. Off (no job span), it returns w and r as they are.
func traced(parent context.Context, w http.ResponseWriter, r *http.Request, host string) (http.ResponseWriter, *http.Request, func()) {
	ctx, span := trace.Start(parent, "egress "+r.Method, oteltrace.WithSpanKind(oteltrace.SpanKindClient),
		oteltrace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("server.address", host)))
	if !span.IsRecording() {
		return w, r, func() {}
	}
	sw := &spanWriter{ResponseWriter: w}
	return sw, r.WithContext(ctx), func() {
		if sw.status != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
		}
		if sw.status >= 400 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
		span.End()
	}
}

// noteDecision puts the proxy's decision on the request's span.
func noteDecision(ctx context.Context, host string, refused bool, reason string) {
	span := trace.Span(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("server.address", host), attribute.Bool("egress.refused", refused), attribute.String("egress.reason", reason))
}

// noteSealed says on the request's span whether a sealed secret was put into it.
func noteSealed(ctx context.Context, sealed bool) {
	if span := trace.Span(ctx); span.IsRecording() {
		span.SetAttributes(attribute.Bool("egress.sealed", sealed))
	}
}

// spanWriter notes the status a request was answered with; a tunnel's is its 200.
type spanWriter struct {
	http.ResponseWriter
	status int
}

func (w *spanWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *spanWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *spanWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *spanWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func (w *spanWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
