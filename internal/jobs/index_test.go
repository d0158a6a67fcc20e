package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/natstest"
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
