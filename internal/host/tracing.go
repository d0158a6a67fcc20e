package host

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/agenthost/host/internal/trace"
)

// Tracing (serve --otlp-endpoint; package trace). Each delivery that runs, or ends without
// running, is one span, "job <function>", under the span of the step whose message triggered
// it (its traceparent header), or the root of a new trace. Its record keeps its traceparent
// (Record.Trace): every message the host sends on the job's behalf carries it (outMsg), so a
// next: step, a map's items, a gate's decided steps and a join's step all hang under it, on
// whichever host runs them. Below it: the wait in the queue (and why), the claim, the run (the
// runner's spans: volumes, jail, run), the outputs, the record and the reply.
//
// Off, j.trace is nil and each of these is a nil check.

// traceJob starts the span of a delivery.
func (h *Host) traceJob(j *job) {
	if !h.cfg.Tracer.Enabled() {
		return
	}
	fn := j.s.fn
	j.delivery = time.Now()
	start := j.delivery
	if j.rec.Attempts <= 1 && !j.rec.Enqueued.IsZero() && j.rec.Enqueued.Before(start) {
		start = j.rec.Enqueued // its time in the queue is the job's too
	}
	ctx, span := h.cfg.Tracer.Root(context.Background(), j.msg.Headers(), "job "+fn.Name, oteltrace.WithTimestamp(start),
		oteltrace.WithAttributes(
			trace.AttrFunction.String(fn.Name), trace.AttrJob.String(j.rec.ID), trace.AttrFlow.String(j.rec.FlowID),
			trace.AttrHost.String(h.cfg.HostID), trace.AttrDeployment.Int(j.rec.Deployment)))
	j.trace = ctx
	j.rec.Trace, j.rec.TraceState = trace.Traceparent(ctx), span.SpanContext().TraceState().String()
}

// endTrace ends the delivery's span, unless the delivery was no run of the job (it waits
// again, or it was gathered into a join or a decision): those leave no span.
func (h *Host) endTrace(j *job, e end) {
	if j.trace == nil {
		return
	}
	switch e.verdict {
	case deferred, held, waiting, gathered, decided, stale:
		return
	}
	span := trace.Span(j.trace)
	span.SetAttributes(trace.AttrAttempt.Int(j.rec.Attempts), attribute.String("agent.verdict", endings[e.verdict].metric))
	if j.rec.Served != "" {
		span.SetAttributes(attribute.String("agent.jail", j.rec.Served))
	}
	if e.err != nil && e.verdict != succeeded {
		span.SetStatus(codes.Error, truncate(e.err.Error(), 300))
	}
	span.End()
}

// step starts a span of one step of the job under its span, and returns what ends it.
func (h *Host) step(j *job, name string) func() {
	if j.trace == nil {
		return func() {}
	}
	_, span := trace.Start(j.trace, name)
	return func() { span.End() }
}

// traceQueue records the job's wait in the queue, from its publish (or, for a later attempt,
// its delivery) up to now, and why it waited.
func (h *Host) traceQueue(j *job) {
	if j.trace == nil {
		return
	}
	start := j.delivery
	if j.rec.Attempts <= 1 && !j.rec.Enqueued.IsZero() && j.rec.Enqueued.Before(start) {
		start = j.rec.Enqueued
	}
	why := "queue"
	switch {
	case j.s.fn.Spec.Delay > 0 && j.rec.Deferrals > 0:
		why = "delay"
	case hasFlowControl(j.s.fn) && j.rec.Deferrals > 0:
		why = "flow control"
	case j.rec.Attempts > 1:
		why = "retry"
	}
	_, span := trace.Start(j.trace, "queue", oteltrace.WithTimestamp(start),
		oteltrace.WithAttributes(attribute.String("agent.wait", why), attribute.Int("agent.deferrals", j.rec.Deferrals)))
	span.End()
}
