package hosttest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
)

// FillRecords writes n job records, job-00000 (the oldest) on, of three functions (fn0, fn1,
// fn2) in every status, ten to a flow (flow-<i/10>), each with a 2 KB result as a record of a
// real run has, as fast as the store takes them, and returns how many of each status it wrote.
// js is the JetStream st publishes with; it must allow n publishes in flight.
func FillRecords(tb testing.TB, st *jobs.Store, js jetstream.JetStream, n int) map[jobtype.Status]int {
	tb.Helper()
	statuses := []jobtype.Status{jobtype.Queued, jobtype.Running, jobtype.Succeeded, jobtype.Failed, jobtype.Canceled, jobtype.Retrying}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	count := map[jobtype.Status]int{}
	result := []byte(`"` + strings.Repeat("r", 2048) + `"`)
	for i := range n {
		r := &jobs.Record{ID: fmt.Sprintf("job-%05d", i), Function: fmt.Sprintf("fn%d", i%3), FlowID: fmt.Sprintf("flow-%d", i/10),
			Status: statuses[i%len(statuses)], Attempts: 1, Enqueued: base.Add(time.Duration(i) * time.Second), Result: result}
		if r.Status != jobtype.Queued {
			r.Started = r.Enqueued.Add(time.Millisecond)
		}
		count[r.Status]++
		if _, err := st.PutAsync(r); err != nil {
			tb.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		tb.Fatal("the store did not take the records within a minute")
	}
	return count
}
