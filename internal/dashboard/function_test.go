package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
)

// The trend buckets ended jobs by the hour over two days at most, else by the day, keeps the
// latest maxBuckets, and counts each bucket's successes and failures.
func TestTrendChart(t *testing.T) {
	base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	job := func(at time.Duration, status jobtype.Status, run time.Duration) jobs.Summary {
		end := base.Add(at)
		return jobs.Summary{ID: "j", Function: "f", Status: status, Started: end.Add(-run), Finished: end}
	}
	tests := []struct {
		name    string
		sums    []jobs.Summary
		bucket  string
		buckets int
		titles  []string // of the buckets with jobs, in order
	}{
		{"none ended", []jobs.Summary{{Status: jobtype.Running, Started: base}, {Status: jobtype.Canceled, Started: base, Finished: base}}, "", 0, nil},
		{"within a day: by the hour, a day of them", []jobs.Summary{
			job(0, jobtype.Succeeded, time.Second), job(10*time.Minute, jobtype.Failed, 0), job(3*time.Hour, jobtype.Succeeded, 3*time.Second),
		}, "hour", 24, []string{"Mar 1 10:00 UTC: 1 of 2 succeeded, p50 1s", "Mar 1 13:00 UTC: 1 of 1 succeeded, p50 3s"}},
		{"over two days: by the day", []jobs.Summary{
			job(0, jobtype.Succeeded, time.Second), job(72*time.Hour, jobtype.Failed, 0),
		}, "day", 14, []string{"Mar 1 UTC: 1 of 1 succeeded, p50 1s", "Mar 4 UTC: 0 of 1 succeeded"}},
		{"a long history: the latest 60 days", []jobs.Summary{
			job(0, jobtype.Succeeded, time.Second), job(100*24*time.Hour, jobtype.Succeeded, time.Second),
		}, "day", maxBuckets, []string{"Jun 9 UTC: 1 of 1 succeeded, p50 1s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTrendChart(tt.sums, base)
			if tt.buckets == 0 {
				if c != nil {
					t.Fatalf("a chart of %d bars for no ended job", len(c.Bars))
				}
				return
			}
			if c.Bucket != tt.bucket || len(c.Bars) != tt.buckets {
				t.Fatalf("%d bars by %s, want %d by %s", len(c.Bars), c.Bucket, tt.buckets, tt.bucket)
			}
			var titles []string
			for _, b := range c.Bars {
				if !b.Empty {
					titles = append(titles, b.Title)
				}
				if b.Y < c.Top || b.Y+b.H > c.Bottom || b.X+b.W > c.Width {
					t.Errorf("bar %+v outside the plot", b)
				}
			}
			if strings.Join(titles, " | ") != strings.Join(tt.titles, " | ") {
				t.Fatalf("bars %q, want %q", titles, tt.titles)
			}
		})
	}
}
