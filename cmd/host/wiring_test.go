package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `host wiring` prints the example flows' graphs from their directories alone, as text, JSON
// and DOT; a refused file is named, left out, and fails the command.
func TestWiringCLI(t *testing.T) {
	triage := "../../examples/flows/github-triage"
	out, errOut, code := run(t, "wiring", triage)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	for _, want := range []string{
		"sources\n  webhook.github\n",
		"functions\n  summarize\n  triage\n",
		"leaving the host (no function listens)\n  flow.out.triage\n",
		"wires\n  webhook.github --> triage\n  summarize --> flow.out.triage\n  triage --> summarize\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "cycle") {
		t.Errorf("a flow without a loop is said to have one:\n%s", out)
	}

	out, _, code = run(t, "wiring", "--json", "../../examples/flows/fanout-errors")
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, out)
	}
	var g struct {
		Nodes []struct{ ID, Kind, Label string }
		Edges []struct {
			From, To, Kind, Label string
			Cycle                 bool
		}
		Cycles [][]string
	}
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatalf("--json is not JSON: %v\n%s", err, out)
	}
	if len(g.Nodes) != 4 {
		t.Errorf("%d nodes, want the 4 functions: %s", len(g.Nodes), out)
	}
	var handled []string
	for _, e := range g.Edges {
		if e.Kind == "error" && e.To == "failures" {
			handled = append(handled, e.From)
			if e.Cycle != (e.From == "failures") || e.Label != "on error" {
				t.Errorf("error edge %+v", e)
			}
		}
	}
	if strings.Join(handled, ",") != "failures,invoice,order,ship" {
		t.Errorf("the agent.error.> handler hears %v, want every function", handled)
	}
	if len(g.Cycles) != 1 || strings.Join(g.Cycles[0], ",") != "failures" {
		t.Errorf("cycles %v, want the handler's own errors", g.Cycles)
	}

	out, _, code = run(t, "wiring", "--dot", "../../examples/flows/scheduled")
	if code != 0 || !strings.HasPrefix(out, "digraph wiring {\n") || !strings.Contains(out, `"schedule:tick" -> "tick";`) || !strings.Contains(out, `"tick" -> "report";`) {
		t.Errorf("--dot: exit %d:\n%s", code, out)
	}

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "good.sh"), []byte("# next: agent.run.gone\necho\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "bad.sh"), []byte("# next: agent.run.x if result.\necho\n"), 0o755)
	out, errOut, code = run(t, "wiring", dir)
	if code != 1 || !strings.Contains(errOut, "refused: ") || !strings.Contains(errOut, "bad.sh:1") || !strings.Contains(errOut, "1 of 2 function files refused") {
		t.Errorf("a refused file: exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "good --> agent.run.gone") {
		t.Errorf("the graph of what loaded is still printed:\n%s", out)
	}
	if _, errOut, code = run(t, "wiring", "--json", "--dot", dir); code != 1 || !strings.Contains(errOut, "choose one") {
		t.Errorf("--json --dot: exit %d, %q", code, errOut)
	}
	if _, errOut, code = run(t, "wiring", filepath.Join(dir, "nowhere")); code != 1 || !strings.Contains(errOut, "nowhere") {
		t.Errorf("a missing directory: exit %d, %q", code, errOut)
	}
}
