package host_test

// Issue 37, items 5: nothing one message starts is unbounded. A map respects its target's
// queue:, and a flow has a budget of jobs (--flow-max-jobs) counted across hosts.

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// list is a result of n numbers, for an each edge to map over.
func list(n int) string {
	items := make([]int, n)
	for i := range items {
		items[i] = i
	}
	b, _ := json.Marshal(items)
	return string(b)
}

// The attack: one message whose result is a 300-item list, mapped by each onto a function with
// queue: 5, started 301 jobs. A map's items are published at once, so the map is refused whole
// when its items do not fit the room its target's queue: has left: the mapping step fails for
// good (error event, dead letter, both naming the queue: limit), and no item is queued.
func TestEachRespectsTheTargetsQueue(t *testing.T) {
	fake := newFake().on("fan", result(list(300)))
	h := hosttest.NewEngine(t, map[string]string{
		"fan.sh":  "# next: agent.run.item each result\necho\n",
		"item.sh": "# queue: 5\necho\n",
	}, fake)
	errs := h.Sub(bus.ErrorSubject("fan"))
	h.Publish(bus.RunSubject("fan"), `{}`, map[string]string{bus.HeaderMsgID: "fan-1"})

	ev := hosttest.Decode[jobs.ErrorEvent](t, h.Next(errs).Data)
	if ev.JobID != "fan-1" || !strings.Contains(ev.Error, "queue: 5") || !strings.Contains(ev.Error, "300") {
		t.Fatalf("error event %+v; want fan-1's, naming the 300 items and queue: 5", ev)
	}
	if rec := h.Record("fan-1"); rec.Status != jobtype.Failed || rec.Attempts != 1 || !strings.Contains(rec.Error, "queue: 5") {
		t.Fatalf("record %+v; want failed once, naming queue: 5", rec)
	}
	c, err := client.New(context.Background(), h.NC)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := c.DeadLetter(context.Background(), "fan-1")
	if err != nil || !strings.Contains(dl.Error, "queue: 5") {
		t.Fatalf("dead letter %+v, %v; want one naming queue: 5", dl, err)
	}
	settled(t, h, "fan")
	info, err := consumer(t, h, "item").Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if held := info.NumPending + uint64(info.NumAckPending) + info.Delivered.Stream; held != 0 || fake.count("item") != 0 {
		t.Fatalf("item got %d triggers and %d runs; want none", held, fake.count("item"))
	}

	// A map that fits the room left is published as before.
	fake.on("fan", result(list(5)))
	h.Publish(bus.RunSubject("fan"), `{}`, map[string]string{bus.HeaderMsgID: "fan-2"})
	if rec := h.Record("fan-2"); rec.Status != jobtype.Succeeded {
		t.Fatalf("a map of 5 onto queue: 5: record %+v", rec)
	}
	h.Eventually("the 5 items ran", func() bool { return fake.count("item") == 5 })
}

// A flow's budget counts every job its steps start, nested maps multiplied, across hosts. Set
// to 50, a map of 10 whose items each map 10 more (111 jobs) stops: the mapping steps past the
// budget fail for good with an error event and a dead letter naming --flow-max-jobs, fewer than
// 50 jobs run, and every job that ran has its record.
func TestFlowBudgetStopsNestedMaps(t *testing.T) {
	fake := newFake().on("outer", result(list(10))).on("mid", result(list(10)))
	h := hosttest.NewEngine(t, map[string]string{
		"outer.sh": "# next: agent.run.mid each result\necho\n",
		"mid.sh":   "# next: agent.run.leaf each result\necho\n",
		"leaf.sh":  "echo\n",
	}, fake, func(c *host.Config) { c.FlowMaxJobs = 50 })
	h.Publish(bus.RunSubject("outer"), `{}`, map[string]string{bus.HeaderMsgID: "flow-b"})

	// The root reserves nothing for itself; its map takes 10 (11 jobs); each mid's map 10 more:
	// three fit (41), the fourth would make 51.
	h.Eventually("every mid job ran", func() bool { return fake.count("mid") == 10 })
	settled(t, h, "mid")
	failed, succeeded := 0, 0
	fake.mu.Lock()
	runs := append([]fakeRun(nil), fake.runs...)
	fake.mu.Unlock()
	for _, r := range runs {
		if r.function != "mid" {
			continue
		}
		rec := h.Record(r.ID)
		switch rec.Status {
		case jobtype.Succeeded:
			succeeded++
		case jobtype.Failed:
			failed++
			if !strings.Contains(rec.Error, "--flow-max-jobs 50") || rec.Attempts != 1 || rec.FlowID != "flow-b" {
				t.Fatalf("a mid job past the budget: %+v; want failed once, naming --flow-max-jobs 50", rec)
			}
		default:
			t.Fatalf("mid job %s is %s", r.ID, rec.Status)
		}
	}
	if succeeded != 3 || failed != 7 {
		t.Fatalf("%d mid jobs succeeded and %d failed; want 3 within the budget of 50, 7 refused", succeeded, failed)
	}
	c, err := client.New(context.Background(), h.NC)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := c.DeadLetters(context.Background(), "mid")
	if err != nil || len(dl) != 7 || !strings.Contains(dl[0].Error, "--flow-max-jobs 50") {
		t.Fatalf("dead letters of mid: %d, %v; want 7 naming --flow-max-jobs 50", len(dl), err)
	}
	h.Eventually("the leaves within the budget ran", func() bool { return fake.count("leaf") == 30 })
	settled(t, h, "leaf")
	fake.mu.Lock()
	runs = append([]fakeRun(nil), fake.runs...)
	fake.mu.Unlock()
	if len(runs) >= 50 {
		t.Fatalf("%d jobs ran; want fewer than the budget of 50", len(runs))
	}
	for _, r := range runs {
		if rec := h.Record(r.ID); !rec.Status.Final() || rec.FlowID != "flow-b" {
			t.Fatalf("job %s of %s: %+v; want a final record in flow-b", r.ID, r.function, rec)
		}
	}
	if len(runs) != 41 {
		t.Fatalf("%d jobs ran, want 41: 1 + 10 + 3×10", len(runs))
	}
}
