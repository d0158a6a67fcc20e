package system_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// TestLimitPerKeyAcrossHosts: `limit: 1 per args.repo`, 40 messages over 4 repos at once on
// two hosts: from the records' own start and end times, no two runs of one repo overlap, runs
// of different repos do, and the messages that waited said why on their records meanwhile.
func TestLimitPerKeyAcrossHosts(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"edit.sh": "# sandbox\n# limit: 1 per args.repo\n# concurrency: 8\nsleep 0.3\necho '\"edited\"'\n",
	})
	h.AddHost(t, func(c *app.Config) { c.Concurrency = 8 })
	repos := []string{"acme/api", "acme/web", "acme/cli", "acme/docs"}
	var ids []string
	for i := range 40 {
		id := fmt.Sprintf("edit-%02d", i)
		ids = append(ids, id)
		h.Publish(bus.RunSubject("edit"), fmt.Sprintf(`{"repo":%q}`, repos[i%4]), map[string]string{bus.HeaderMsgID: id})
	}
	ctx := context.Background()
	var reason string
	h.Eventually("a waiting message's record says why it waits, and the gauge counts it", func() bool {
		for _, id := range ids {
			if r, err := h.Store.Get(ctx, id); err == nil && r.Status == jobtype.Queued && r.Held != "" {
				reason = r.Held
			}
		}
		return reason != "" && waitingGauge(t, h.Metrics, "edit", "limit") > 0
	})
	if !strings.HasPrefix(reason, "waiting for limit: repo=acme/") || !strings.HasSuffix(reason, ", 1 running") {
		t.Fatalf("a waiting record says %q; want \"waiting for limit: repo=acme/…, 1 running\"", reason)
	}

	byRepo := map[string][]*jobs.Record{}
	hosts := map[string]int{}
	for i, id := range ids {
		r := h.Record(id)
		if r.Status != jobtype.Succeeded || r.Attempts != 1 {
			t.Fatalf("job %s: %s after %d attempts (%s); want succeeded at the first (waiting is no attempt)", id, r.Status, r.Attempts, r.Error)
		}
		byRepo[repos[i%4]] = append(byRepo[repos[i%4]], r)
		hosts[r.Host]++
	}
	if len(hosts) != 2 {
		t.Fatalf("runs by host %v; want both hosts to have run some", hosts)
	}
	for repo, rs := range byRepo {
		slices.SortFunc(rs, func(a, b *jobs.Record) int { return a.Started.Compare(b.Started) })
		for i := 1; i < len(rs); i++ {
			if rs[i].Started.Before(rs[i-1].Finished) {
				t.Fatalf("%s: job %s (on %s) started at %s, before job %s (on %s) finished at %s", repo,
					rs[i].ID, rs[i].Host, rs[i].Started.Format(time.StampMicro), rs[i-1].ID, rs[i-1].Host, rs[i-1].Finished.Format(time.StampMicro))
			}
		}
	}
	overlap := false
	a, b := byRepo[repos[0]], byRepo[repos[1]]
	for _, x := range a {
		for _, y := range b {
			overlap = overlap || (x.Started.Before(y.Finished) && y.Started.Before(x.Finished))
		}
	}
	if !overlap {
		t.Fatalf("no run of %s overlapped one of %s: different keys must run at once", repos[0], repos[1])
	}
}

// TestLimitKeyFreesWhenItsHostDies: a host killed while its job holds a limit's key: the key
// frees when the job's lease runs out (before the job's message is even handed to another
// host), the message waiting for it runs, and the killed host's job runs once more to its end
// on the other host, never at once with the one that waited.
func TestLimitKeyFreesWhenItsHostDies(t *testing.T) {
	const lease = 2 * time.Second
	// The ack wait is far longer than the lease, so the waiting message can only have started
	// because the lease ran out, not because the dead job was handed on.
	tweak := func(c *app.Config) { c.FlowLease, c.AckWait = lease, 20*time.Second }
	h := hosttest.New(t, map[string]string{
		"edit.sh": "# sandbox\n# limit: 1 per args.repo\nsleep 3\necho '\"edited\"'\n",
	}, tweak)
	_, killSecond := h.AddKillableHost(t, "second", tweak)
	h.Publish(bus.RunSubject("edit"), `{"repo":"acme/api"}`, map[string]string{bus.HeaderMsgID: "held-1"})
	ctx := context.Background()
	var first *jobs.Record
	h.Eventually("the first job runs", func() bool {
		r, err := h.Store.Get(ctx, "held-1")
		first = r
		return err == nil && r.Status == jobtype.Running
	})
	h.Publish(bus.RunSubject("edit"), `{"repo":"acme/api"}`, map[string]string{bus.HeaderMsgID: "waits-1"})
	h.Eventually("the second waits for the key", func() bool {
		r, err := h.Store.Get(ctx, "waits-1")
		return err == nil && r.Held == "waiting for limit: repo=acme/api, 1 running"
	})
	if first.Host == "test" {
		h.Kill()
	} else {
		killSecond()
	}
	killed := time.Now()
	waited := h.Record("waits-1")
	held := h.Record("held-1")
	if waited.Status != jobtype.Succeeded || held.Status != jobtype.Succeeded {
		t.Fatalf("after the kill: waiting job %s (%s), killed job %s (%s); want both succeeded", waited.Status, waited.Error, held.Status, held.Error)
	}
	if waited.Host == first.Host || held.Host == first.Host || held.Attempts != 2 {
		t.Fatalf("killed host %s; the waiting job ran on %s, the killed one on %s at attempt %d; want both on the live host, the killed one at attempt 2",
			first.Host, waited.Host, held.Host, held.Attempts)
	}
	if !waited.Started.Before(held.Started) {
		t.Fatalf("the waiting job started at %s, after the killed job's second attempt (%s): the key did not free when its lease ran out",
			waited.Started.Format(time.StampMilli), held.Started.Format(time.StampMilli))
	}
	if held.Started.Before(waited.Finished) {
		t.Fatalf("the killed job's second attempt started at %s, before the waiting job finished at %s", held.Started.Format(time.StampMilli), waited.Finished.Format(time.StampMilli))
	}
	t.Logf("the key freed and the waiting job started %s after the kill (lease %s); the test body took %s", waited.Started.Sub(killed).Round(time.Millisecond), lease, time.Since(killed))
}

// waitingGauge reads host_flow_control_waiting{function,kind}.
func waitingGauge(t *testing.T, reg *prometheus.Registry, function, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "host_flow_control_waiting" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["function"] == function && labels["kind"] == kind {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// TestRateAcrossHosts: `rate: 5/1s`, 30 messages at once on two hosts: from the records' start
// times no 1-second window holds more than 5 starts, and all 30 run, at their first attempt
// (waiting for the rate is no attempt).
func TestRateAcrossHosts(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"llm.sh": "# sandbox\n# rate: 5/1s\n# concurrency: 8\necho '\"asked\"'\n",
	})
	h.AddHost(t, func(c *app.Config) { c.Concurrency = 8 })
	var ids []string
	for i := range 30 {
		id := fmt.Sprintf("llm-%02d", i)
		ids = append(ids, id)
		h.Publish(bus.RunSubject("llm"), `{}`, map[string]string{bus.HeaderMsgID: id})
	}
	ctx := context.Background()
	var reason string
	h.Eventually("a waiting message's record says it waits for the rate", func() bool {
		for _, id := range ids {
			if r, err := h.Store.Get(ctx, id); err == nil && r.Held != "" {
				reason = r.Held
			}
		}
		return reason != ""
	})
	if !strings.HasPrefix(reason, "waiting for rate: 5/1s, next start at ") {
		t.Fatalf("a waiting record says %q", reason)
	}
	var starts []time.Time
	for _, id := range ids {
		r := h.Record(id)
		if r.Status != jobtype.Succeeded || r.Attempts != 1 {
			t.Fatalf("job %s: %s after %d attempts (%s); want succeeded at the first", id, r.Status, r.Attempts, r.Error)
		}
		starts = append(starts, r.Started)
	}
	slices.SortFunc(starts, time.Time.Compare)
	for i := 0; i+5 < len(starts); i++ {
		if d := starts[i+5].Sub(starts[i]); d < time.Second {
			t.Fatalf("starts %d to %d are %s apart: 6 starts within one second under rate: 5/1s", i, i+5, d)
		}
	}
}

// TestDebounceAcrossHosts: `debounce: 2s by args.key`, 10 messages within a second over 3 keys
// on two hosts: exactly 3 runs, each of its key's last message with its arguments, started no
// sooner than 2 s after that message; the other 7 end superseded, naming the run of their key.
func TestDebounceAcrossHosts(t *testing.T) {
	h := hosttest.New(t, map[string]string{"push.sh": "# sandbox\n# debounce: 2s by args.key\ncat\n"})
	h.AddHost(t)
	keys := []string{"a", "b", "c"}
	last := map[string]string{}
	var ids []string
	for i := range 10 {
		id := fmt.Sprintf("push-%02d", i)
		ids = append(ids, id)
		last[keys[i%3]] = id
		h.Publish(bus.RunSubject("push"), fmt.Sprintf(`{"key":%q,"n":%d}`, keys[i%3], i), map[string]string{bus.HeaderMsgID: id})
		time.Sleep(90 * time.Millisecond)
	}
	ctx := context.Background()
	var reason string
	h.Eventually("a waiting message's record says it waits for its quiet period", func() bool {
		r, err := h.Store.Get(ctx, last["a"])
		if err == nil && r.Held != "" {
			reason = r.Held
		}
		return reason != ""
	})
	if !strings.HasPrefix(reason, "waiting for debounce: key=a, quiet until ") {
		t.Fatalf("the newest of key a waits saying %q; want \"waiting for debounce: key=a, quiet until …\"", reason)
	}
	runs := 0
	for i, id := range ids {
		r := h.Record(id)
		key := keys[i%3]
		if id == last[key] {
			runs++
			want := fmt.Sprintf(`{"key":%q,"n":%d}`, key, i)
			if r.Status != jobtype.Succeeded || r.Attempts != 1 || string(r.Result) != want {
				t.Fatalf("job %s, the last of key %s: %s at attempt %d with result %s (%s); want succeeded at the first with %s", id, key, r.Status, r.Attempts, r.Result, r.Error, want)
			}
			if quiet := r.Enqueued.Add(2 * time.Second); r.Started.Before(quiet) {
				t.Fatalf("job %s started at %s, before its quiet period ended at %s", id, r.Started.Format(time.StampMicro), quiet.Format(time.StampMicro))
			}
			continue
		}
		if r.Status != jobtype.Superseded || r.SupersededBy != last[key] || !r.Started.IsZero() {
			t.Fatalf("job %s of key %s: %s by %q (started %s); want superseded by %s, never started", id, key, r.Status, r.SupersededBy, r.Started, last[key])
		}
	}
	if runs != 3 {
		t.Fatalf("%d runs; want 3", runs)
	}
}

// TestPriorityFirst: `priority: args.p` with `concurrency: 1`: 50 messages of priority 1 wait
// when one of 9 comes; from the records' start times, the 9 starts before (nearly) all of them.
func TestPriorityFirst(t *testing.T) {
	// Each 1 runs 0.3 s, so that a loaded machine's lag between the 9's publish and the host's
	// sight of it (which lets a few 1s start first) is a job or two, not the margin allowed.
	const lows = 30
	h := hosttest.New(t, map[string]string{"work.sh": "# sandbox\n# priority: args.p\n# concurrency: 1\nsleep 0.3\ncat\n"})
	for i := range lows {
		h.Publish(bus.RunSubject("work"), fmt.Sprintf(`{"p":1,"n":%d}`, i), map[string]string{bus.HeaderMsgID: fmt.Sprintf("low-%02d", i)})
	}
	ctx := context.Background()
	h.Eventually("the first 1 runs", func() bool {
		r, err := h.Store.Get(ctx, "low-00")
		return err == nil && r.Status != jobtype.Queued
	})
	h.Publish(bus.RunSubject("work"), `{"p":9}`, map[string]string{bus.HeaderMsgID: "high"})
	var reason string
	h.Eventually("a 1 says it waits for the 9", func() bool {
		for i := range lows {
			if r, err := h.Store.Get(ctx, fmt.Sprintf("low-%02d", i)); err == nil && strings.HasPrefix(r.Held, "waiting for priority: 1, a 9 waits") {
				reason = r.Held
			}
		}
		return reason != ""
	})
	high := h.Record("high")
	if high.Status != jobtype.Succeeded {
		t.Fatalf("the 9: %s (%s)", high.Status, high.Error)
	}
	before := 0
	for i := range lows {
		r := h.Record(fmt.Sprintf("low-%02d", i))
		if r.Status != jobtype.Succeeded || r.Attempts != 1 {
			t.Fatalf("low-%02d: %s at attempt %d (%s); want succeeded at the first (waiting is no attempt)", i, r.Status, r.Attempts, r.Error)
		}
		if r.Started.Before(high.Started) {
			before++
		}
	}
	if before > 5 {
		t.Fatalf("%d of the %d priority-1 jobs started before the 9; want the 9 before all but the few already started", before, lows)
	}
	t.Logf("%d of the 1s started before the 9", before)
}
