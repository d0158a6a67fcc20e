package host_test

import (
	"strings"
	"testing"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/hosttest"
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
