package dashboard_test

import (
	"net/http"
	"strings"
	"testing"
)

// A function's page over 10,000 job records in the bucket, on a host serving it; report the
// time with go test -run '^$' -bench PagesFunction ./internal/dashboard.
func BenchmarkPagesFunction(b *testing.B) {
	handler := servedHistory(b, map[string]string{"fn0.py": "# retries: 2\ndef main(n: int, tag: str = \"x\"):\n    return n\n", "fn1.sh": "echo\n", "fn2.sh": "echo\n"})
	page := func() (int, string) { return getPage(b, handler, "/functions/fn0") }
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
