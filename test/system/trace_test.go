package system_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/jaegertest"
	"github.com/agenthost/host/internal/trace"
)

// TestTraceOfAFlowAcrossHosts runs a flow with a map, a join and an approval over two hosts
// (each serves part of it) with tracing to a real Jaeger, started by a `nats pub` carrying a
// traceparent, and checks in Jaeger's API that every job of the flow is in that one trace,
// under the span of the job before it, from both hosts, with its steps; and that the last
// job's own curl through the egress proxy carried its TRACEPARENT and has a proxy span under
// the job.
func TestTraceOfAFlowAcrossHosts(t *testing.T) {
	jg := jaegertest.Start(t)
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("SKIPPED LOUDLY: cannot listen on 127.0.0.2 here: %v", err)
	}
	var seen atomic.Value // the traceparent the job's request came with
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("traceparent"))
		fmt.Fprint(w, `{"upstream":"ok"}`)
	})}
	go srv.Serve(l)
	defer srv.Close()
	tracing := func(c *app.Config) {
		c.OTLPEndpoint = jg.OTLP
		c.TraceURL = jg.Query + "/trace/{trace_id}"
		c.EgressPermit = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
	}
	h := hosttest.New(t, map[string]string{
		"start.py":  "# sandbox\n# next: agent.run.item each result.items\n# next: agent.run.gate\n# next: agent.run.report\ndef main():\n    return {\"items\": [1, 2, 3]}\n",
		"item.py":   "# sandbox\n# next: agent.run.report\ndef main(item: int):\n    return {\"n\": item * 2}\n",
		"report.py": "# sandbox\n# join: start item\ndef main(start: dict, item: list):\n    return {\"sum\": sum(i[\"n\"] for i in item)}\n",
	}, tracing)
	// The second host serves the rest of the flow: the gate and the step after it.
	dirB := filepath.Join(h.Dir, "functions-b")
	write(t, dirB, "gate.py", "# sandbox\n# approve\n# next: agent.run.after\ndef main(items: list):\n    return {\"ok\": len(items)}\n")
	write(t, dirB, "after.sh", fmt.Sprintf("# sandbox\n# network: proxy %s\ncurl -sS --max-time 10 -H \"traceparent: $TRACEPARENT\" http://%s/ | tail -1\n",
		l.Addr(), l.Addr()))
	h.AddHost(t, tracing, func(c *app.Config) { c.FunctionsDir = dirB })

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}
	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	after, report := h.Sub(bus.ResultSubject("after")), h.Sub(bus.ResultSubject("report"))
	flow := "traced-flow"
	h.Publish(bus.RunSubject("start"), "{}", map[string]string{bus.HeaderMsgID: flow,
		"traceparent": "00-" + traceID + "-" + callerSpan + "-01"})
	var gate *jobs.Record
	h.Eventually("the gate waits", func() bool {
		gate = findJob(ctx, c, flow, "gate")
		return gate != nil && gate.Status == jobtype.Waiting
	})
	if _, err := c.Decide(ctx, gate.ID, true, people.Operator("tester", "test"), "go"); err != nil {
		t.Fatal(err)
	}
	if got := string(h.Next(after).Data); !strings.Contains(got, "upstream") {
		t.Fatalf("after: %s", got)
	}
	h.Next(report)

	recs, err := c.Jobs.Recent(ctx, jobs.Filter{Flow: flow}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 7 { // start, 3 items, report, gate, after
		t.Fatalf("flow %s has %d jobs, want 7", flow, len(recs))
	}
	jobSpan := func(spans []jaegertest.Span, id string) (jaegertest.Span, bool) {
		i := slices.IndexFunc(spans, func(s jaegertest.Span) bool {
			return s.Tag("agent.job") == id && strings.HasPrefix(s.Operation, "job ")
		})
		if i < 0 {
			return jaegertest.Span{}, false
		}
		return spans[i], true
	}
	spans := jg.WaitTrace(t, traceID, func(spans []jaegertest.Span) bool {
		for _, r := range recs {
			if _, ok := jobSpan(spans, r.ID); !ok {
				return false
			}
		}
		return slices.ContainsFunc(spans, func(s jaegertest.Span) bool { return s.Operation == "egress GET" })
	})
	byID := map[string]jaegertest.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	hosts := map[string]bool{}
	for _, r := range recs {
		s, _ := jobSpan(spans, r.ID)
		hosts[s.Tag("agent.host")] = true
		if got := trace.TraceID(r.Trace); got != traceID {
			t.Errorf("job %s (%s) records trace %q, want %s", r.ID, r.Function, r.Trace, traceID)
		}
		if s.Tag("agent.function") != r.Function || s.Tag("agent.flow") != flow || s.Tag("agent.attempt") == "" {
			t.Errorf("job %s span has tags %+v", r.ID, s.Tags)
		}
		parent := byID[s.Parent()]
		switch {
		case r.Function == "start":
			if s.Parent() != callerSpan {
				t.Errorf("start's span has parent %q, want the publisher's %s", s.Parent(), callerSpan)
			}
		case r.Function == "report":
			// The joined step hangs under the job whose message completed the join.
			if fn := parent.Tag("agent.function"); fn != "start" && fn != "item" {
				t.Errorf("report's span has parent %q (%s), want a job it joined", s.Parent(), parent.Operation)
			}
		default:
			if parent.Tag("agent.job") != r.ParentJob || r.ParentJob == "" {
				t.Errorf("%s job %s: span parent is %q (job %q), want the span of its parent job %q", r.Function, r.ID, s.Parent(), parent.Tag("agent.job"), r.ParentJob)
			}
		}
		for _, step := range []string{"queue", "claim", "prepare", "run", "outputs", "record"} {
			if !slices.ContainsFunc(spans, func(c jaegertest.Span) bool { return c.Operation == step && c.Parent() == s.SpanID }) {
				t.Errorf("%s job %s: no %q span under it", r.Function, r.ID, step)
			}
		}
	}
	if !hosts["test"] || !hosts["test-2"] || len(hosts) != 2 {
		t.Errorf("job spans came from hosts %v, want test and test-2", hosts)
	}
	last := findJob(ctx, c, flow, "after")
	lastSpan, _ := jobSpan(spans, last.ID)
	if got, _ := seen.Load().(string); got != last.Trace || got == "" {
		t.Errorf("the job's curl sent traceparent %q, want its TRACEPARENT %q", got, last.Trace)
	}
	i := slices.IndexFunc(spans, func(s jaegertest.Span) bool { return s.Operation == "egress GET" })
	eg := spans[i]
	if eg.Parent() != lastSpan.SpanID || eg.Tag("server.address") != "127.0.0.2" || eg.Tag("http.response.status_code") != "200" || eg.Tag("egress.refused") != "false" {
		t.Errorf("the proxy's span: parent %s (want after's %s), tags %+v", eg.Parent(), lastSpan.SpanID, eg.Tags)
	}

	// The dashboard links the job and the flow to the trace.
	for _, page := range []string{"/jobs/" + last.ID, "/flows/" + flow} {
		body := getPage(t, h, page)
		if want := jg.Query + "/trace/" + traceID; !strings.Contains(body, want) {
			t.Errorf("%s does not link to %s", page, want)
		}
	}
}

// TestTraceCollectorDown: with the OTLP endpoint down, jobs run as ever; the spans that cannot
// go are dropped, counted in host_trace_spans_dropped_total and logged (once a minute at most).
func TestTraceCollectorDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	h := hosttest.New(t, map[string]string{"hello.py": "# sandbox\ndef main():\n    return {\"hi\": 1}\n"},
		func(c *app.Config) { c.OTLPEndpoint = down })
	for range 3 {
		if got := string(h.Call("hello", "{}").Data); got != `{"hi":1}` {
			t.Fatalf("a job with the collector down: %s", got)
		}
	}
	h.Eventually("the spans are counted as dropped", func() bool {
		n, err := testutil.GatherAndCount(h.Metrics, "host_trace_spans_dropped_total")
		if err != nil || n == 0 {
			return false
		}
		mfs, _ := h.Metrics.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "host_trace_spans_dropped_total" {
				return mf.GetMetric()[0].GetCounter().GetValue() > 0
			}
		}
		return false
	})
	if n := h.Logs.FilterMessageSnippet("trace spans dropped").Len(); n != 1 {
		t.Fatalf("%d log lines about dropped spans, want 1 (rate-limited)", n)
	}

	// A caller's trace is continued from a `nats req` and from POST /run carrying traceparent.
	const callerTrace = "0af7651916cd43dd8448eb211c80319c"
	tp := "00-" + callerTrace + "-b7ad6b7169203331-01"
	m := nats.NewMsg(bus.CallSubject("hello"))
	m.Header.Set(bus.HeaderMsgID, "req-traced")
	m.Header.Set("traceparent", tp)
	h.CallMsg(m, "{}")
	req := httptest.NewRequest(http.MethodPost, "/run/hello?wait=1m", strings.NewReader("{}"))
	req.RemoteAddr, req.Host = "127.0.0.1:1234", "127.0.0.1:8080"
	req.Header.Set("Idempotency-Key", "run-traced")
	req.Header.Set("Traceparent", tp)
	rec := httptest.NewRecorder()
	h.Web().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("POST /run: %d %s", rec.Code, rec.Body)
	}
	for _, id := range []string{"req-traced", "run-traced"} {
		r := h.Record(id)
		if trace.TraceID(r.Trace) != callerTrace || strings.Contains(r.Trace, "b7ad6b7169203331") {
			t.Errorf("job %s records trace %q, want a span of the caller's trace %s", id, r.Trace, callerTrace)
		}
	}
}

func findJob(ctx context.Context, c *client.Client, flow, fn string) *jobs.Record {
	recs, err := c.Jobs.Recent(ctx, jobs.Filter{Flow: flow, Function: fn}, 0)
	if err != nil || len(recs) == 0 {
		return nil
	}
	return recs[0]
}

func write(t testing.TB, dir, name, content string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// getPage is a dashboard page as the operator sees it, from the host's web face.
func getPage(t *testing.T, h *hosttest.H, path string) string {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr, req.Host = "127.0.0.1:1234", "127.0.0.1:8080"
	rec := httptest.NewRecorder()
	h.Web().ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, body)
	}
	return string(body)
}
