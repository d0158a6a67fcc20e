package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/dashboard"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// history starts a NATS holding n job records of three functions in every status, the newest
// job-<n-1>, and a dashboard on it.
func history(tb testing.TB, n int) *dashboard.Dashboard {
	tb.Helper()
	nc, js := natstest.Start(tb)
	st, err := jobs.Open(context.Background(), js, time.Hour, 1)
	if err != nil {
		tb.Fatal(err)
	}
	hosttest.FillRecords(tb, st, js, n)
	return dashboard.New(dashboard.Config{NC: nc})
}

func getPage(tb testing.TB, h http.Handler, path string) (int, string) {
	tb.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	// As a browser on this machine: without a token the web face answers loopback only.
	req.Host, req.RemoteAddr = "127.0.0.1:8080", "127.0.0.1:40000"
	h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

// A long history is shown a page of the newest at a time, with a link to older ones; the
// filters select as `host jobs` does.
func TestJobsPaging(t *testing.T) {
	d := history(t, 1050)
	tests := []struct {
		path      string
		rows      int
		first     string // the newest job on the page
		newer     bool
		older     bool
		notListed string
	}{
		{path: "/", rows: dashboard.PageSize, first: "job-01049", older: true},
		{path: "/jobs?page=1", rows: dashboard.PageSize, first: "job-00949", newer: true, older: true},
		{path: "/jobs?page=10", rows: 50, first: "job-00049", newer: true},
		{path: "/jobs?function=fn0&status=failed", rows: 175, first: "job-01047", older: true, notListed: `data-job="job-01049"`},
		{path: "/jobs?flow=flow-7", rows: 10, first: "job-00079"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, body := getPage(t, d, tt.path)
			if code != http.StatusOK {
				t.Fatalf("%d: %s", code, body)
			}
			rows := strings.Count(body, "<tr class=\"status-")
			if want := min(tt.rows, dashboard.PageSize); rows != want {
				t.Errorf("%d rows, want %d", rows, want)
			}
			if i := strings.Index(body, "data-job="); i < 0 || !strings.HasPrefix(body[i:], `data-job="`+tt.first+`"`) {
				t.Errorf("the first row is not %s", tt.first)
			}
			if got := strings.Contains(body, ">newer</a>"); got != tt.newer {
				t.Errorf("link to newer jobs: %t, want %t", got, tt.newer)
			}
			if got := strings.Contains(body, ">older</a>"); got != tt.older {
				t.Errorf("link to older jobs: %t, want %t", got, tt.older)
			}
			if tt.notListed != "" && strings.Contains(body, tt.notListed) {
				t.Errorf("the page lists %s, which the filter excludes", tt.notListed)
			}
		})
	}
}
