package system_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// TestLogMarksWhereEachAttemptStarts: a host is killed while its job runs; the job runs again
// on the other host, and its stored log (what `host logs`, the dashboard and a download read)
// says where attempt 2 starts, after attempt 1's lines and before its own.
func TestLogMarksWhereEachAttemptStarts(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"slow.sh": "# sandbox\necho \"step one\" >&2\nsleep 2\necho \"step two\" >&2\necho '\"done\"'\n",
	})
	_, killSecond := h.AddKillableHost(t, "second")
	lines := h.Sub(bus.LogsSubject("slow", "twice-1"))
	h.Publish(bus.RunSubject("slow"), `{}`, map[string]string{bus.HeaderMsgID: "twice-1"})
	if first := h.Next(lines); string(first.Data) != "step one" {
		t.Fatalf("attempt 1's first line: %q", first.Data)
	}
	ctx := context.Background()
	rec, err := h.Store.Get(ctx, "twice-1")
	if err != nil {
		t.Fatal(err)
	}
	killed := rec.Host
	start := time.Now()
	if killed == "test" {
		h.Kill()
	} else {
		killSecond()
	}

	final := h.Record("twice-1")
	if final.Status != jobtype.Succeeded || final.Attempts != 2 || final.Host == killed {
		t.Fatalf("after its host %s was killed: %s at attempt %d on %s; want succeeded at attempt 2 on the other host", killed, final.Status, final.Attempts, final.Host)
	}
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// The job's stderr lines in order (its stdout, the result, comes through another pipe, so
	// where it falls among them is not fixed).
	var got []string
	stdout := 0
	if _, err := c.FollowJob(fctx, "slow", "twice-1", func(l client.LogLine) {
		if l.Stream == "stdout" {
			stdout++
			return
		}
		got = append(got, l.Text)
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"step one",
		"[host] attempt 2 starts here, on host " + final.Host + "; the lines above are the earlier attempts'",
		"step one",
		"step two",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || stdout != 1 {
		t.Fatalf("the stored log's stderr lines:\n%s\nwant:\n%s\n(and %d stdout lines, want 1)", strings.Join(got, "\n"), strings.Join(want, "\n"), stdout)
	}
	t.Logf("attempt 2 ended %s after the kill", time.Since(start).Round(time.Millisecond))
}
