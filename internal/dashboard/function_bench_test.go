package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/hosttest"
	"github.com/agenthost/host/internal/jobs"
)

// A function's page over 10,000 job records in the bucket, on a host serving it; report the
// time with go test -run '^$' -bench PagesFunction ./internal/dashboard.
func BenchmarkPagesFunction(b *testing.B) {
	h := hosttest.NewEngine(b, map[string]string{"fn0.py": "# retries: 2\ndef main(n: int, tag: str = \"x\"):\n    return n\n", "fn1.sh": "echo\n", "fn2.sh": "echo\n"}, fakeRunner{})
	js, err := jetstream.New(h.NC, jetstream.WithPublishAsyncMaxPending(20_000))
	if err != nil {
		b.Fatal(err)
	}
	st, err := jobs.Bind(context.Background(), js)
	if err != nil {
		b.Fatal(err)
	}
	hosttest.FillRecords(b, st, js, 10_000)
	handler := h.Web()
	// As a browser on this machine: without a token the web face answers loopback only.
	page := func() (int, string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/functions/fn0", nil)
		req.Host, req.RemoteAddr = "127.0.0.1:8080", "127.0.0.1:40000"
		handler.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	code, body := page()
	if code != http.StatusOK || !strings.Contains(body, `href="/jobs/job-09999"`) || !strings.Contains(body, `class="chroma"`) {
		b.Fatalf("%d: the page lacks the newest run of fn0 or its source: %s", code, body)
	}
	for b.Loop() {
		if code, body := page(); code != http.StatusOK {
			b.Fatalf("%d: %s", code, body)
		}
	}
}
