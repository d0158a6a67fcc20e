package host_test

import (
	"strings"
	"testing"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// A function whose tools: names itself, and two that name each other, would fill their run
// slots with jobs waiting on calls that can never run (issue 37, item 4): the host refuses
// them at load, at their tools: line, and serves nothing of them; the rest is served.
func TestToolCyclesAreNotServed(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"self.py": "# sandbox\n# tools: self\ndef main():\n    return 1\n",
		"a.py":    "# sandbox\n# tools: b\ndef main():\n    return 1\n",
		"b.py":    "# sandbox\n# tools: a\ndef main():\n    return 1\n",
		"ok.py":   "# sandbox\n# tools: a\ndef main():\n    return 1\n",
	})
	for _, name := range []string{"self", "a", "b"} {
		reply := h.Call(name, "{}")
		if st := reply.Header.Get(bus.HeaderJobStatus); st != "failed" || !strings.Contains(string(reply.Data), "no function named") {
			t.Errorf("call of %s, on a tools: cycle: %s %s, want it not served", name, st, reply.Data)
		}
	}
	var refused []string
	for _, e := range h.Logs.FilterMessage("function refused; fix the file and it is picked up again").All() {
		refused = append(refused, e.ContextMap()["error"].(string))
	}
	all := strings.Join(refused, "\n")
	for _, want := range []string{"self.py:2: tools: self calls back into itself (self → self)", "a.py:2: tools: b calls back into itself (a → b → a)", "b.py:2:"} {
		if !strings.Contains(all, want) {
			t.Errorf("the host's refusals lack %q:\n%s", want, all)
		}
	}
	if reply := h.Call("ok", "{}"); reply.Header.Get(bus.HeaderJobStatus) != "succeeded" {
		t.Errorf("ok, which calls into the cycle but is not on it: %s", reply.Data)
	}
}

// A tool call nested past --tool-depth fails for good without running, naming the bound; one
// at the bound runs. The Tool-Depth header a job's MCP endpoint writes can be forged, but only
// upwards matters: a caller writing a lower one is a caller outside any jail, as it is anyway.
func TestEngineToolDepthBound(t *testing.T) {
	fake := newFake()
	h := hosttest.NewEngine(t, map[string]string{"tool.sh": "echo\n"}, fake)
	h.Publish(bus.RunSubject("tool"), `{}`, map[string]string{bus.HeaderMsgID: "depth-9", bus.HeaderToolDepth: "9"})
	if rec := h.Record("depth-9"); rec.Status != jobtype.Failed || !strings.Contains(rec.Error, "nested 9 deep, past the bound of 8 nested tool calls") || rec.Attempts != 1 {
		t.Errorf("a call nested 9 deep: %s after %d attempts: %s", rec.Status, rec.Attempts, rec.Error)
	}
	h.Publish(bus.RunSubject("tool"), `{}`, map[string]string{bus.HeaderMsgID: "depth-8", bus.HeaderToolDepth: "8"})
	if rec := h.Record("depth-8"); rec.Status != jobtype.Succeeded {
		t.Errorf("a call nested 8 deep: %s: %s", rec.Status, rec.Error)
	}
	if n := fake.count("tool"); n != 1 {
		t.Errorf("tool ran %d times, want once (the call at the bound)", n)
	}
}

// Where a call runs, a $secret: in a tool call (its lineage names a parent job and a tool
// depth) is checked against the parent's function (its record, its annotations as served here), whoever
// published it: past the job's MCP endpoint too. A forged Parent-Job-Id only refuses more;
// without one the trigger is a plain caller's, governed by the callee's secrets: as before.
func TestEngineCallFromAJobHasItsRights(t *testing.T) {
	fake := newFake()
	h := hosttest.NewEngine(t, map[string]string{
		"agent.sh":   "# tools: reveal\necho\n",
		"trusted.sh": "# tools: reveal\n# secrets: s1\necho\n",
		"reveal.sh":  "# secrets: s1\necho\n",
	}, fake)
	for _, parent := range []string{"agent-1", "trusted-1"} {
		h.Publish(bus.RunSubject(strings.TrimSuffix(parent, "-1")), `{}`, map[string]string{bus.HeaderMsgID: parent})
		h.Record(parent)
	}
	for _, tc := range []struct {
		id, parent, want string
	}{
		{"from-agent", "agent-1", `secret "s1" refused: a call from a job acts with that job's rights, and function "agent" (job agent-1), which made this call, does not declare "s1"`},
		{"from-nobody", "no-such-job", `secret "s1" refused: the trigger names job no-such-job as the job that made it (Parent-Job-Id), which has no record`},
		{"from-trusted", "trusted-1", ""},
		{"from-a-caller", "", ""},
		// A next: step of agent's passes the reference on as its flow's author wrote.
		{"next-step", "agent-1", ""},
	} {
		hdr := map[string]string{bus.HeaderMsgID: tc.id}
		if tc.parent != "" {
			hdr[bus.HeaderParentJob] = tc.parent
		}
		if tc.parent != "" && tc.id != "next-step" {
			hdr[bus.HeaderToolDepth] = "1" // as the job's MCP endpoint sets it
		}
		h.Publish(bus.RunSubject("reveal"), `{"text":"$secret:s1"}`, hdr)
		rec := h.Record(tc.id)
		switch {
		case tc.want == "" && rec.Status != jobtype.Succeeded:
			t.Errorf("%s: %s: %s, want it run", tc.id, rec.Status, rec.Error)
		case tc.want != "" && (rec.Status != jobtype.Failed || !strings.Contains(rec.Error, tc.want) || rec.Attempts != 1):
			t.Errorf("%s: %s after %d attempts: %s, want refused for good: %s", tc.id, rec.Status, rec.Attempts, rec.Error, tc.want)
		}
	}
	if n := fake.count("reveal"); n != 3 {
		t.Errorf("reveal ran %d times, want 3 times (trusted's call, the plain caller's, agent's next: step)", n)
	}
}
