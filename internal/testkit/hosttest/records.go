package hosttest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
)

// FillRecords writes n job records, job-00000 (the oldest) on, of three functions (fn0, fn1,
// fn2) in every status, ten to a flow (flow-<i/10>), each with a 2 KB result as a record of a
// real run has, as fast as the store takes them, and returns how many of each status it wrote.
// Each record gets there by legal moves (a succeeded one is created running first), as the
// store allows no other. js is the JetStream st publishes with; it must allow n publishes in
// flight.
func FillRecords(tb testing.TB, st *jobs.Store, js jetstream.JetStream, n int) map[jobtype.Status]int {
	tb.Helper()
	statuses := []jobtype.Status{jobtype.Queued, jobtype.Running, jobtype.Succeeded, jobtype.Failed, jobtype.Canceled, jobtype.Retrying}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	count := map[jobtype.Status]int{}
	result := []byte(`"` + strings.Repeat("r", 2048) + `"`)
	type created struct {
		rec *jobs.Record
		ack jetstream.PubAckFuture
	}
	var later []created // created running, to be moved on to their status
	for i := range n {
		r := &jobs.Record{ID: fmt.Sprintf("job-%05d", i), Function: fmt.Sprintf("fn%d", i%3), FlowID: fmt.Sprintf("flow-%d", i/10),
			Status: statuses[i%len(statuses)], Attempts: 1, Enqueued: base.Add(time.Duration(i) * time.Second), Result: result}
		if r.Status != jobtype.Queued {
			r.Started = r.Enqueued.Add(time.Millisecond)
		}
		count[r.Status]++
		first := r
		if jobtype.None.To(r.Status) != nil {
			running := *r
			running.Status = jobtype.Running
			first = &running
		}
		f, err := st.CreateAsync(first)
		if err != nil {
			tb.Fatal(err)
		}
		if first != r {
			later = append(later, created{r, f})
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		tb.Fatal("the store did not take the records within a minute")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(later))
	work := make(chan created)
	for range 8 {
		wg.Go(func() {
			for c := range work {
				running := *c.rec
				running.Status = jobtype.Running
				if _, err := st.Move(ctx, c.rec, jobs.Created(&running, <-c.ack.Ok())); err != nil {
					errs <- err
				}
			}
		})
	}
	for _, c := range later {
		work <- c
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	return count
}

// PutRecord writes r into st by legal moves: created as it is when the store allows that,
// else created running and moved on to r's status.
func PutRecord(tb testing.TB, st *jobs.Store, r *jobs.Record) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var from jobs.Version
	if jobtype.None.To(r.Status) != nil {
		running := *r
		running.Status = jobtype.Running
		v, err := st.Move(ctx, &running, from)
		if err != nil {
			tb.Fatal(err)
		}
		from = v
	}
	if _, err := st.Move(ctx, r, from); err != nil {
		tb.Fatal(err)
	}
}
