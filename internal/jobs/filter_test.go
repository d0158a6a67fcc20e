package jobs_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// The listing's filters select by part of a name or id in any case and by a time range, read
// from the index headers alone; a scheduled run is marked in the index.
func TestSummariesFilter(t *testing.T) {
	st, _ := openStore(t)
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, r := range []*jobs.Record{
		{ID: "a-1", Function: "tick-every-15s", Started: base, Scheduled: base},
		{ID: "a-2", Function: "tick-every-15s", Started: base.Add(time.Minute)},
		{ID: "B-3", Function: "Deploy", Started: base.Add(2 * time.Minute)},
		{ID: "c-4", Function: "déploiement", Started: base.Add(3 * time.Minute)},
		{ID: "q-5", Function: "deploy", Enqueued: base.Add(4 * time.Minute)}, // queued: When is its enqueueing
	} {
		r.Status, r.Attempts = jobtype.Succeeded, 1
		if r.Started.IsZero() {
			r.Status = jobtype.Queued
		}
		r.FlowID = r.ID
		hosttest.PutRecord(t, st, r)
	}
	tests := []struct {
		name string
		f    jobs.Filter
		want []string
	}{
		{"every job", jobs.Filter{}, []string{"B-3", "a-1", "a-2", "c-4", "q-5"}},
		{"part of a name", jobs.Filter{FunctionLike: "tick"}, []string{"a-1", "a-2"}},
		{"any case", jobs.Filter{FunctionLike: "DEPLOY"}, []string{"B-3", "q-5"}},
		{"not ASCII", jobs.Filter{FunctionLike: "DÉPLOI"}, []string{"c-4"}},
		{"part of an id", jobs.Filter{IDLike: "b-"}, []string{"B-3"}},
		{"exact name", jobs.Filter{Function: "deploy"}, []string{"q-5"}},
		{"from, inclusive", jobs.Filter{From: base.Add(time.Minute)}, []string{"B-3", "a-2", "c-4", "q-5"}},
		{"to, exclusive", jobs.Filter{To: base.Add(2 * time.Minute)}, []string{"a-1", "a-2"}},
		{"a range", jobs.Filter{From: base.Add(2 * time.Minute), To: base.Add(5 * time.Minute)}, []string{"B-3", "c-4", "q-5"}},
		{"a range and a name", jobs.Filter{FunctionLike: "deploy", From: base.Add(3 * time.Minute)}, []string{"q-5"}},
		{"nothing", jobs.Filter{FunctionLike: "nope"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sums, err := st.Summaries(context.Background(), tt.f)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range sums {
				got = append(got, s.ID)
				if s.Scheduled != (s.ID == "a-1") {
					t.Errorf("%s: scheduled %t", s.ID, s.Scheduled)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
