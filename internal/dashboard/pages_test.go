package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// inline finds what a strict Content-Security-Policy (default-src 'self') would block: a
// script element without src, an inline handler, a style element or attribute.
var inline = regexp.MustCompile(`<script(\s[^>]*)?>[^<]|<script>|\son[a-z]+=|<style|\sstyle=`)

// Every page answers with its status, and none has inline script or style, which the host's
// Content-Security-Policy forbids. The secrets page shows names, never values.
func TestPages(t *testing.T) {
	h := hosttest.NewEngine(t, map[string]string{
		"hello.sh": "# secrets: api_key missing_one\necho\n",
	}, fakeRunner{})
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	st, err := secrets.Open(context.Background(), js, h.Key, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Set(context.Background(), "api_key", []byte(`"very-secret-value"`)); err != nil {
		t.Fatal(err)
	}
	h.Publish("agent.run.hello", `{}`, map[string]string{"Nats-Msg-Id": "page-job"})
	h.Record("page-job")
	h.Publish("agent.run.hello", `{}`, map[string]string{"Nats-Msg-Id": "called-job", "Job-Caller": "mcp some-client/1.2"})
	h.Record("called-job")
	handler := h.Web()

	tests := []struct {
		method, path string
		code         int
		has          []string
		hasNot       []string
	}{
		{"GET", "/", 200, []string{`data-job="page-job"`}, nil},
		{"GET", "/jobs?status=failed", 200, nil, []string{`data-job="page-job"`}},
		{"GET", "/jobs/rows", 200, []string{`data-job="page-job"`, `<span id="job-total">2</span> jobs.`}, []string{"<html"}},
		{"GET", "/jobs/page-job", 200, []string{"succeeded", `&#34;ok&#34;: true`, `<dd class="started-by">a NATS client</dd>`}, []string{`class="caller"`, `class="held"`, `class="deployment"`}},
		{"GET", "/jobs/called-job", 200, []string{`<dd class="caller">mcp some-client/1.2</dd>`}, nil},
		{"GET", "/jobs/no-such-job", 404, nil, nil},
		{"GET", "/jobs/no-such-job/log", 404, nil, nil},
		{"POST", "/jobs/no-such-job/cancel", 404, nil, nil},
		{"POST", "/jobs/page-job/cancel", 409, []string{"already finished"}, nil},
		{"GET", "/functions", 200, []string{`data-function="hello"`, "api_key"}, nil},
		{"GET", "/functions/hello", 200, []string{`<h1>Function <span class="id">hello</span></h1>`, `class="chroma"`, `href="/jobs/page-job"`, `action="/functions/hello/run"`, `<code>"$secret:api_key"</code>`}, []string{"very-secret-value"}},
		{"GET", "/functions/nope", 404, []string{`no host serves a function "nope"`}, nil},
		{"GET", "/functions/a.b", 404, nil, nil},
		{"POST", "/functions/nope/run", 404, []string{`function "nope" is not in this host's functions directory`}, nil},
		{"POST", "/jobs/page-job/rerun", 303, nil, nil},
		{"POST", "/jobs/no-such-job/rerun", 404, nil, nil},
		{"GET", "/jobs/page-job/outcome", 200, []string{`"status":"succeeded"`, `"result":{"ok":true}`}, nil},
		{"GET", "/assets/chroma.css", 200, []string{".chroma .k {"}, nil},
		{"GET", "/assets/run.js", 200, []string{"signature.Check"}, nil},
		{"GET", "/flows/page-job", 200, []string{`class="step status-succeeded"`}, nil},
		{"GET", "/flows/no-such-flow", 404, nil, nil},
		{"GET", "/wiring", 200, []string{`<svg id="wiring"`, `<a href="/wiring">Wiring</a>`, `src="/assets/dagre.min.js"`, "No wires"}, nil},
		{"GET", "/wiring.json", 200, []string{`"nodes":[{"id":"hello","kind":"function","label":"hello"}]`, `"edges":[]`}, nil},
		{"GET", "/wiring.json?around=nope", 200, []string{`"nodes":[]`}, nil},
		{"GET", "/assets/dagre.min.js", 200, []string{"@dagrejs/dagre 3.1.3", "Copyright (c) 2012-2014 Chris Pettitt", "var dagre="}, nil},
		{"GET", "/dead", 200, []string{"No dead letters."}, nil},
		{"POST", "/dead/no-such-job/replay", 404, []string{"no dead letter for job no-such-job"}, nil},
		{"GET", "/schedules", 200, []string{"No scheduled functions."}, nil},
		{"POST", "/schedules/no-such-function/pause", 404, []string{"no-such-function"}, nil},
		{"POST", "/schedules/a.b/pause", 404, []string{"a.b"}, nil},
		{"GET", "/secrets", 200, []string{`data-secret="api_key"`, `data-secret="missing_one"`, "missing"}, []string{"very-secret-value"}},
		{"GET", "/volumes", 200, []string{"no volume store"}, nil},
		{"GET", "/volumes/notes", 404, nil, nil},
		{"POST", "/volumes/notes/restore", 404, nil, nil},
		{"GET", "/assets/app.js", 200, []string{"liveRows"}, nil},
		{"GET", "/assets/log.js", 200, []string{"EventSource"}, nil},
		{"GET", "/assets/style.css", 200, []string{"svg.flow"}, nil},
		{"GET", "/users", 200, []string{"follows no user store", `<a href="/users">Users</a>`}, nil},
		{"GET", "/audit", 200, []string{"Nothing recorded."}, nil},
		{"GET", "/audit?since=yesterday", 200, []string{`since &#34;yesterday&#34;: give a duration`}, nil},
		{"GET", "/nowhere", 404, nil, nil},
		{"GET", "/healthz", 200, []string{`"ok"`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(tt.method, tt.path, nil)
			// As a browser on this machine: without a token the web face answers loopback only.
			req.Host, req.RemoteAddr = "127.0.0.1:8080", "127.0.0.1:40000"
			handler.ServeHTTP(rec, req)
			body := rec.Body.String()
			if rec.Code != tt.code {
				t.Fatalf("%d, want %d: %s", rec.Code, tt.code, body)
			}
			for _, s := range tt.has {
				if !strings.Contains(body, s) {
					t.Errorf("no %q in %s", s, body)
				}
			}
			for _, s := range tt.hasNot {
				if strings.Contains(body, s) {
					t.Errorf("%q in %s", s, body)
				}
			}
			if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
				if m := inline.FindString(body); m != "" {
					t.Errorf("inline script or style %q, which a strict CSP blocks", m)
				}
			}
		})
	}
}

// wrapped is a ResponseWriter as middleware wraps it: without Flush of its own, only Unwrap.
type wrapped struct{ http.ResponseWriter }

func (w wrapped) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// The log of a finished job streams as Server-Sent Events and ends with its status, also
// behind middleware that wraps the ResponseWriter (as the host's authentication does).
func TestJobLogEvents(t *testing.T) {
	h := hosttest.NewEngine(t, map[string]string{"hello.sh": "echo\n"}, fakeRunner{})
	h.Publish("agent.run.hello", `{}`, map[string]string{"Nats-Msg-Id": "sse-job"})
	h.Record("sse-job")
	handler := h.Web()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler.ServeHTTP(wrapped{w}, r)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/jobs/sse-job/log")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), "event: end\ndata: {\"status\":\"succeeded\"}\n\n") {
		t.Fatalf("stream %q does not end with the job's end", b)
	}
}
