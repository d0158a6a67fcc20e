package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/hosttest"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/natstest"
)

func openStore(t testing.TB) (*jobs.Store, jetstream.JetStream) {
	t.Helper()
	_, js := natstest.Start(t)
	st, err := jobs.Open(context.Background(), js, time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	return st, js
}

// A listing over 10,000 records reads the index in the records' headers and the bodies of only
// what it returns: newest first, filtered by status, function and flow. The time it takes is
// logged (go test -v -run TestRecentTenThousand ./internal/jobs), not asserted.
func TestRecentTenThousand(t *testing.T) {
	st, js := openStore(t)
	count := hosttest.FillRecords(t, st, js, 10_000)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		f     jobs.Filter
		limit int
		want  int
		first string
	}{
		{"newest 50", jobs.Filter{}, 50, 50, "job-09999"},
		{"queued", jobs.Filter{Status: jobtype.Queued}, 0, count[jobtype.Queued], "job-09996"},
		{"canceled, 10", jobs.Filter{Status: jobtype.Canceled}, 10, 10, "job-09994"},
		{"one function", jobs.Filter{Function: "fn1"}, 50, 50, "job-09997"},
		{"one flow", jobs.Filter{Flow: "flow-3"}, 0, 10, "job-00039"},
		{"nothing", jobs.Filter{Function: "nope"}, 50, 0, ""},
		{"all, past reading one by one", jobs.Filter{}, 0, 10_000, "job-09999"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			recs, err := st.Recent(ctx, c.f, c.limit)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("Recent(%+v, limit %d) over 10,000 records: %d in %s", c.f, c.limit, len(recs), took)
			if len(recs) != c.want {
				t.Fatalf("got %d records, want %d", len(recs), c.want)
			}
			for i, r := range recs {
				if (c.f.Status != "" && r.Status != c.f.Status) || (c.f.Function != "" && r.Function != c.f.Function) {
					t.Fatalf("record %+v does not match %+v", r, c.f)
				}
				if i > 0 && r.When().After(recs[i-1].When()) {
					t.Fatalf("not newest first: %s after %s", r.ID, recs[i-1].ID)
				}
			}
			if len(recs) > 0 && recs[0].ID != c.first {
				t.Fatalf("newest is %s, want %s", recs[0].ID, c.first)
			}
		})
	}
	start := time.Now()
	all, err := st.List(ctx, nil)
	if err != nil || len(all) != 10_000 {
		t.Fatalf("List: %d records, %v", len(all), err)
	}
	t.Logf("List (every record decoded) over 10,000 records: %s", time.Since(start))
}

// A record that says less never overwrites one that says more: Create only writes a job's
// first record, and Update only over the revision it read.
func TestCreateAndUpdateAreChecked(t *testing.T) {
	st, _ := openStore(t)
	ctx := context.Background()
	queued := &jobs.Record{ID: "j1", Function: "f", Status: jobtype.Queued, Enqueued: time.Now()}
	rev, err := st.Create(ctx, queued)
	if err != nil {
		t.Fatal(err)
	}
	running := *queued
	running.Status = jobtype.Running
	running.Started = time.Now()
	newRev, err := st.Update(ctx, &running, rev)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		write func() error
	}{
		{"create over a record", func() error { _, err := st.Create(ctx, queued); return err }},
		{"update from a stale revision", func() error { _, err := st.Update(ctx, queued, rev); return err }},
	} {
		if err := c.write(); !errors.Is(err, jobs.ErrConflict) {
			t.Errorf("%s: err %v, want ErrConflict", c.name, err)
		}
	}
	got, gotRev, err := st.GetRev(ctx, "j1")
	if err != nil || got.Status != jobtype.Running || gotRev != newRev {
		t.Fatalf("record %+v rev %d (want %d), %v", got, gotRev, newRev, err)
	}
	sums, err := st.Summaries(ctx, jobs.Filter{Status: jobtype.Running})
	if err != nil || len(sums) != 1 || sums[0].ID != "j1" || sums[0].Function != "f" || sums[0].Started.IsZero() {
		t.Fatalf("summaries %+v, %v", sums, err)
	}
	// A deleted record is no record: a job may be queued under its id again, and the index
	// does not list it meanwhile.
	if err := st.Delete(ctx, "j1", newRev); err != nil {
		t.Fatal(err)
	}
	if sums, err := st.Summaries(ctx, jobs.Filter{}); err != nil || len(sums) != 0 {
		t.Fatalf("summaries after delete %+v, %v", sums, err)
	}
	if _, err := st.Create(ctx, queued); err != nil {
		t.Fatalf("create over a deleted record: %v", err)
	}
}

// TestListingsLeaveNoConsumers: a dashboard or a script polling `host jobs` lists over and over;
// each listing's consumer must go with it, or the stream reaches the account's consumer limit
// ("maximum consumers limit reached") and every listing fails.
func TestListingsLeaveNoConsumers(t *testing.T) {
	st, js := openStore(t)
	ctx := context.Background()
	for range 50 {
		if _, err := st.Summaries(ctx, jobs.Filter{}); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := js.Stream(ctx, "KV_"+jobs.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Consumers; n > 2 {
		t.Fatalf("%d consumers left on the job records' stream after 50 listings", n)
	}
}
