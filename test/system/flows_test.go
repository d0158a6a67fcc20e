package system_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

func TestFanOutWithErrorHandler(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"split.py": `# sandbox
# next: agent.run.double
# next: agent.run.invert
def main(x: float):
    return {"x": x}
`,
		"double.py": "# sandbox\ndef main(x: float):\n    return {\"doubled\": x * 2}\n",
		"invert.py": "# sandbox\ndef main(x: float):\n    return {\"inverted\": 1 / x}\n",
		"handler.py": `# sandbox
# on: agent.error.>
def main(job_id: str, function: str, error: str, flow_id: str):
    return {"failed_job": job_id, "failed_function": function, "flow": flow_id, "why": error.splitlines()[-1]}
`,
	})
	handled := h.Sub("agent.result.handler")
	doubled := h.Sub("agent.result.double")
	h.Publish("agent.run.split", `{"x":0}`, map[string]string{bus.HeaderMsgID: "fan-1"})
	if got := string(h.Next(doubled).Data); got != `{"doubled":0}` {
		t.Fatalf("double: %s", got)
	}
	m := h.Next(handled)
	ev := hosttest.Decode[map[string]string](t, m.Data)
	if ev["failed_function"] != "invert" || ev["flow"] != "fan-1" || !strings.Contains(ev["why"], "ZeroDivisionError") {
		t.Fatalf("handler saw %v", ev)
	}
	if m.Header.Get(bus.HeaderFlowID) != "fan-1" {
		t.Fatalf("handler result headers %v", m.Header)
	}
	// The whole flow is traceable from the records.
	recs, err := h.Store.List(context.Background(), func(r *jobs.Record) bool { return r.FlowID == "fan-1" })
	if err != nil {
		t.Fatal(err)
	}
	byFn := map[string]*jobs.Record{}
	for _, r := range recs {
		byFn[r.Function] = r
	}
	if len(byFn) != 4 || byFn["split"].Hop != 0 || byFn["double"].Hop != 1 || byFn["invert"].Hop != 1 || byFn["handler"].Hop != 2 ||
		byFn["invert"].Status != jobtype.Failed || byFn["double"].ParentJob != "fan-1" || len(byFn["split"].Outputs) != 3 {
		for _, r := range recs {
			t.Logf("%+v", r)
		}
		t.Fatal("flow records are not as expected")
	}
}

func TestRunawayLoopIsStopped(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"loop.sh": "# sandbox\n# next: agent.run.loop\ncat\n",
	}, func(c *app.Config) { c.MaxHops = 5 })
	errs := h.Sub("agent.error.loop")
	results := h.Sub("agent.result.loop")
	h.Publish("agent.run.loop", `{"i":1}`, map[string]string{bus.HeaderMsgID: "loop-1"})
	ev := hosttest.Decode[jobs.ErrorEvent](t, h.Next(errs).Data)
	if !strings.Contains(ev.Error, "--max-hops 5") || ev.FlowID != "loop-1" {
		t.Fatalf("error = %+v", ev)
	}
	// Hops 0 to 5 ran and published; the sixth step was refused.
	for range 6 {
		h.Next(results)
	}
	select {
	case m := <-results:
		t.Fatalf("a step past the limit ran: %s", m.Header)
	default:
	}
}

func TestScheduleFiresOncePerTickAcrossHosts(t *testing.T) {
	files := map[string]string{"tick.sh": "# sandbox\n# schedule: @every 1s\necho '\"tick\"'\n"}
	h := hosttest.New(t, files)
	h.AddHost(t) // a second host serving the same functions on the same NATS
	results := h.Sub("agent.result.tick")
	seen := map[string]bool{}
	for range 4 {
		m := h.Next(results)
		id := m.Header.Get(bus.HeaderJobID)
		if seen[id] {
			t.Fatalf("tick %s ran twice", id)
		}
		// A tick's id is derived with the hosts' key: no outside publisher can foresee it.
		if strings.Contains(id, "tick") || len(id) != 20 {
			t.Fatalf("scheduled job id %q is not a keyed 20-character id", id)
		}
		seen[id] = true
	}
}
