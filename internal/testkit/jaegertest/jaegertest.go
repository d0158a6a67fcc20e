// Package jaegertest runs a real Jaeger (v2: the OpenTelemetry collector with Jaeger's
// storage and query) for tests: an OTLP/HTTP receiver and the query API on loopback ports, an
// in-memory store. scripts/setup builds the binary; without it a test is skipped, or fails
// when JAEGERTEST_REQUIRE is set (CI).
package jaegertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/toolbin"
)

// Version is the Jaeger scripts/setup builds.
const Version = "v1.75.0"

// InstallHint says how to get the binary.
const InstallHint = "run scripts/setup (it builds Jaeger " + Version + " into $(go env GOPATH)/bin/jaeger)"

// Jaeger is a running Jaeger.
type Jaeger struct {
	// OTLP is its OTLP/HTTP receiver's URL (serve --otlp-endpoint).
	OTLP string
	// Query is its query service's URL (the UI and /api/traces).
	Query   string
	LogPath string
	stop    func()
}

// Binary finds jaeger: $PATH, then $(go env GOPATH)/bin, then ~/go/bin.
func Binary() (string, error) {
	candidates := toolbin.Candidates("jaeger")
	for _, p := range candidates {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("no jaeger in $PATH, $(go env GOPATH)/bin or ~/go/bin; %s", InstallHint)
}

// Start runs Jaeger until the test ends.
func Start(t testing.TB) *Jaeger {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("JAEGERTEST_REQUIRE") != "" {
			t.Fatalf("JAEGERTEST_REQUIRE is set but %v", err)
		}
		t.Skipf("\n\n*** SKIPPING JAEGER TESTS: %v ***\n\n", err)
	}
	dir := t.TempDir()
	var last error
	// A port picked by closing a listener can be taken again before Jaeger binds it.
	for range 3 {
		j, err := run(bin, dir)
		if err != nil {
			last = err
			continue
		}
		t.Cleanup(func() {
			j.Stop()
			if t.Failed() {
				t.Logf("jaeger's log (%s), last lines:\n%s", j.LogPath, tail(j.LogPath, 40))
			}
		})
		return j
	}
	t.Fatalf("start jaeger: %v\nlast lines of its log:\n%s", last, tail(filepath.Join(dir, "jaeger.log"), 40))
	return nil
}

// Stop ends Jaeger (the test's cleanup does too): what it stored is gone.
func (j *Jaeger) Stop() { j.stop() }

const config = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    traces:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: %s
    grpc:
      endpoint: %s
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

func run(bin, dir string) (*Jaeger, error) {
	ports := make([]string, 3)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ports[i] = p
	}
	query, grpc, otlp := ports[0], ports[1], ports[2]
	cfgPath := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, config, query, grpc, otlp), 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "jaeger.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("run %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(exited) }()
	j := &Jaeger{OTLP: "http://" + otlp, Query: "http://" + query, LogPath: logPath}
	j.stop = func() {
		cmd.Process.Kill()
		<-exited
	}
	if err := j.waitReady(exited); err != nil {
		j.stop()
		return nil, err
	}
	return j, nil
}

// waitReady polls the query API and the receiver until both answer.
func (j *Jaeger) waitReady(exited <-chan struct{}) error {
	deadline := time.After(time.Minute)
	poll := &http.Client{Timeout: time.Second}
	for {
		q, qerr := poll.Get(j.Query + "/api/services")
		r, rerr := poll.Post(j.OTLP+"/v1/traces", "application/json", strings.NewReader("{}"))
		if qerr == nil {
			q.Body.Close()
		}
		if rerr == nil {
			r.Body.Close()
		}
		if qerr == nil && rerr == nil && q.StatusCode == http.StatusOK {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("jaeger exited at start (see %s)", j.LogPath)
		case <-deadline:
			return fmt.Errorf("jaeger was not ready on %s and %s within a minute (see %s)", j.Query, j.OTLP, j.LogPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Span is one span as Jaeger's query API shows it.
type Span struct {
	TraceID    string `json:"traceID"`
	SpanID     string `json:"spanID"`
	Operation  string `json:"operationName"`
	References []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"` // µs since the epoch
	Duration  int64 `json:"duration"`  // µs
	Tags      []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
}

// Parent is the span's parent's id ("" for a root).
func (s Span) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Tag is the value of the span's tag key, as text ("" when it has none).
func (s Span) Tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

// Trace is the spans Jaeger holds of trace id, none when it holds none.
func (j *Jaeger) Trace(ctx context.Context, id string) ([]Span, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.Query+"/api/traces/"+id, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query jaeger for trace %s: %w", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("query jaeger for trace %s: status %s", id, resp.Status)
	}
	var body struct {
		Data []struct {
			Spans []Span `json:"spans"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("decode jaeger's trace %s: %w", id, err)
	}
	var spans []Span
	for _, d := range body.Data {
		spans = append(spans, d.Spans...)
	}
	return spans, nil
}

// WaitTrace queries trace id until done says the spans are all there, or the test's minute
// runs out (spans arrive in batches, from every host, a little after their jobs end).
func (j *Jaeger) WaitTrace(t testing.TB, id string, done func([]Span) bool) []Span {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var spans []Span
	for {
		var err error
		if spans, err = j.Trace(ctx, id); err == nil && done(spans) {
			return spans
		}
		select {
		case <-ctx.Done():
			t.Fatalf("trace %s not complete in jaeger within a minute (last error %v); it has %d spans: %s", id, err, len(spans), Describe(spans))
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Describe lists spans as "operation(id<-parent)" for a failure message.
func Describe(spans []Span) string {
	parts := make([]string, len(spans))
	for i, s := range spans {
		parts[i] = fmt.Sprintf("%s(%s<-%s)", s.Operation, s.SpanID, s.Parent())
	}
	return strings.Join(parts, " ")
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
