package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/dashboard"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// listHistory is 10,000 job records: 7,980 of three functions in every status (as history
// makes them), 2,000 runs of a 15-second schedule, and 20 steps waiting for approval.
func listHistory(b *testing.B) http.Handler {
	b.Helper()
	nc, js := natstest.Start(b)
	st, err := jobs.Open(context.Background(), js, time.Hour, 1)
	if err != nil {
		b.Fatal(err)
	}
	hosttest.FillRecords(b, st, js, 7_980)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 2_000 {
		at := base.Add(time.Duration(i) * 15 * time.Second)
		hosttest.PutRecord(b, st, &jobs.Record{ID: fmt.Sprintf("tick-%05d", i), Function: "tick-every-15s", FlowID: fmt.Sprintf("tick-%05d", i),
			Status: jobtype.Succeeded, Attempts: 1, Enqueued: at, Started: at, Finished: at.Add(time.Second), Scheduled: at})
	}
	for i := range 20 {
		at := base.Add(time.Duration(i) * time.Minute)
		hosttest.PutRecord(b, st, &jobs.Record{ID: fmt.Sprintf("plan-%02d", i), Function: "plan", FlowID: fmt.Sprintf("plan-%02d", i),
			Status: jobtype.Waiting, Attempts: 1, Enqueued: at, Started: at, Finished: at.Add(time.Second),
			Result: []byte(`{"change":"drop the old index"}`), Approval: &jobs.Approval{Expires: at.Add(24 * time.Hour)}})
	}
	return dashboard.New(dashboard.Config{NC: nc})
}

// servedHistory is the web face of a host serving files, with 10,000 job records of fn0, fn1
// and fn2 in its bucket (hosttest.FillRecords).
func servedHistory(b *testing.B, files map[string]string) http.Handler {
	b.Helper()
	h := hosttest.NewEngine(b, files, fakeRunner{})
	// Room for every record in flight at once: FillRecords waits for them all at the end.
	js, err := jetstream.New(h.NC, jetstream.WithPublishAsyncMaxPending(20_000))
	if err != nil {
		b.Fatal(err)
	}
	st, err := jobs.Bind(context.Background(), js)
	if err != nil {
		b.Fatal(err)
	}
	hosttest.FillRecords(b, st, js, 10_000)
	return h.Web()
}

// The pages over 10,000 job records in history, on a host serving their functions.
func BenchmarkPages(b *testing.B) {
	h := servedHistory(b, map[string]string{"fn0.sh": "echo\n", "fn1.sh": "echo\n", "fn2.sh": "echo\n"})
	benchPages(b, h, "/", "/jobs?status=failed&function=fn0", "/jobs?page=50", "/jobs/job-05000", "/functions", "/flows/flow-500")
}

func benchPages(b *testing.B, h http.Handler, paths ...string) {
	for _, path := range paths {
		b.Run(path, func(b *testing.B) {
			for b.Loop() {
				if code, body := getPage(b, h, path); code != http.StatusOK {
					b.Fatalf("%d: %s", code, body)
				}
			}
		})
	}
}

// The jobs list over 10,000 records, scheduled runs folded (the default) and shown, and its
// live rows.
func BenchmarkPagesJobs(b *testing.B) {
	benchPages(b, listHistory(b), "/jobs", "/jobs?scheduled=show", "/jobs?page=20", "/jobs/rows")
}

// The jobs list filtered by substring, status and time range.
func BenchmarkPagesJobsFiltered(b *testing.B) {
	benchPages(b, listHistory(b), "/jobs?function=fn&id=00&status=failed",
		"/jobs?function=TICK&from=2026-01-01T02:00:00Z&to=2026-01-01T05:00:00Z&scheduled=show", "/jobs?id=tick-01&scheduled=hide")
}

// The approvals inbox, 20 steps waiting among 10,000 records.
func BenchmarkPagesInbox(b *testing.B) {
	benchPages(b, listHistory(b), "/inbox")
}
