package cluster_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// TestSpeed measures, in one run on one machine: throughput of jailed no-op jobs with one host
// and then with two hosts on the same NATS, and the time from a SIGKILL of the host running a
// job to that job running again on the other host, with --ack-wait 5s (target: within twice
// the ack wait). Numbers are logged, not asserted; only completeness is.
func TestSpeed(t *testing.T) {
	const (
		ackWait = 5 * time.Second
		burst   = 200
	)
	dir := tempDir(t, "speed-nats-")
	natsd := startNATS(t, dir, 0)
	e := newEnv(t, natsd.url())
	e.fn("noop.sh", "# sandbox\necho '{\"ok\":true}'\n")
	// Enough slots that a rerun never waits for one behind earlier stranded jobs.
	e.fn("long.sh", "# sandbox\n# concurrency: 8\necho started >&2\nsleep 20\necho '\"done\"'\n")
	a := e.host(hostOpts{name: "speed-a", ackWait: ackWait})
	results := e.watch("noop")

	measure := func(label string) float64 {
		t.Helper()
		before := results.flowsDone("noop")
		warm := make([]string, 10)
		for i := range warm {
			warm[i] = fmt.Sprintf("%s-warm-%d", label, i)
			if err := e.publish("agent.run.noop", warm[i], nil); err != nil {
				t.Fatal(err)
			}
		}
		if !natstest.Poll(60*time.Second, func() bool { return len(results.missing("noop", warm)) == 0 }) {
			t.Fatalf("%s: warm-up did not finish", label)
		}
		ids := make([]string, burst)
		start := time.Now()
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%03d", label, i)
			if err := e.publish("agent.run.noop", ids[i], nil); err != nil {
				t.Fatal(err)
			}
		}
		if !natstest.Poll(120*time.Second, func() bool { return len(results.missing("noop", ids)) == 0 }) {
			t.Fatalf("%s: %d jobs never finished", label, len(results.missing("noop", ids)))
		}
		_, last := results.span("noop")
		took := last.Sub(start)
		rate := float64(burst) / took.Seconds()
		t.Logf("THROUGHPUT %s: %d jailed no-op jobs in %s = %.1f jobs/s (%d results so far)", label, burst, took.Round(time.Millisecond), rate, results.flowsDone("noop")-before)
		return rate
	}
	one := measure("one-host")
	b := e.host(hostOpts{name: "speed-b", ackWait: ackWait})
	two := measure("two-hosts")
	ranA, ranB := a.metric("host_runs_total", `function="noop"`, `outcome="succeeded"`), b.metric("host_runs_total", `function="noop"`, `outcome="succeeded"`)
	t.Logf("THROUGHPUT one host %.1f jobs/s, two hosts %.1f jobs/s (×%.2f) on %s; no-op runs by host: a %.0f, b %.0f",
		one, two, two/one, "this machine's shared cores", ranA, ranB)

	// SIGKILL → the stranded job runs again on the other host.
	lines := e.logs("long")
	hosts := map[string]*hostProc{"speed-a": a, "speed-b": b}
	var latencies []time.Duration
	for i := range 3 {
		id := fmt.Sprintf("stranded-%d", i)
		if err := e.publish("agent.run.long", id, nil); err != nil {
			t.Fatal(err)
		}
		if len(lines.waitCount(30*time.Second, id, "started", 1)) == 0 {
			t.Fatalf("%s never started", id)
		}
		// The job's record names the host running it (it may land a moment after the log line).
		var rec *jobs.Record
		natstest.Poll(60*time.Second, func() bool {
			r, err := e.store().Get(e.ctx(10*time.Second), id)
			if err == nil && r.Host != "" {
				rec = r
			}
			return rec != nil
		})
		if rec == nil {
			t.Fatalf("no record of %s", id)
		}
		victim := hosts[rec.Host]
		if victim == nil {
			t.Fatalf("job %s runs on unknown host %q", id, rec.Host)
		}
		killed := victim.kill()
		// The rerun time is measured, not asserted: this bound is only a safety net.
		again := lines.waitCount(2*time.Minute, id, "started", 2)
		if len(again) < 2 {
			t.Fatalf("the stranded job %s did not run again", id)
		}
		d := again[1].at.Sub(killed)
		latencies = append(latencies, d)
		t.Logf("RERUN %s: killed %s; running again %s later (ack wait %s)", id, rec.Host, d.Round(time.Millisecond), ackWait)
		victim.start(t)
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	t.Logf("RERUN after SIGKILL: min %s, max %s over %d kills; target ≤ %s (2 × ack wait)",
		latencies[0].Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond), len(latencies), 2*ackWait)
}
