package flowgraph_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/flowgraph"
	"github.com/agenthost/host/internal/functions"
)

// load writes each script (name -> annotation lines) as a shell function and loads the
// directory as the host does, so the graph is tested on what the parser really makes.
func load(t *testing.T, scripts map[string]string) map[string]*functions.Function {
	t.Helper()
	dir := t.TempDir()
	for name, head := range scripts {
		var b strings.Builder
		for line := range strings.SplitSeq(head, "\n") {
			if line != "" {
				b.WriteString("# " + line + "\n")
			}
		}
		b.WriteString("echo '{}'\n")
		if err := os.WriteFile(filepath.Join(dir, name+".sh"), []byte(b.String()), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fns, errs := functions.Load(dir)
	if len(errs) > 0 {
		t.Fatalf("load: %v", errs)
	}
	return fns
}

// wires reads each edge as the text output does, with the IDs of its ends.
func wires(g *flowgraph.Graph) []string {
	var out []string
	for _, e := range g.Edges {
		arrow := "-->"
		if e.Label != "" {
			arrow = "--" + e.Label + "-->"
		}
		s := e.From + " " + arrow + " " + e.To
		if e.Cycle {
			s += " (cycle)"
		}
		out = append(out, s)
	}
	return out
}

func nodes(g *flowgraph.Graph) []string {
	var out []string
	for _, n := range g.Nodes {
		s := string(n.Kind) + " " + n.ID + " " + n.Label
		if n.Note != "" {
			s += " " + n.Note
		}
		out = append(out, s)
	}
	return out
}

func TestBuild(t *testing.T) {
	for _, c := range []struct {
		name    string
		scripts map[string]string
		wires   []string
		nodes   []string // nil: not checked
		cycles  [][]string
	}{
		{
			name:    "a next: to agent.run.<b> joins a to b",
			scripts: map[string]string{"a": "next: agent.run.b", "b": "", "c": ""},
			wires:   []string{"a --> b"},
			nodes:   []string{"function a a", "function b b", "function c c"},
		},
		{
			name: "on: wildcards catch what matches them, and nothing else",
			scripts: map[string]string{
				"a":     "next: orders.new",
				"star":  "on: orders.*",
				"tail":  "on: orders.>",
				"deep":  "on: orders.*.eu",
				"other": "on: invoices.*",
			},
			wires: []string{"source:orders.*.eu --> deep", "source:invoices.* --> other", "a --> star", "a --> tail"},
			nodes: []string{"function a a", "function deep deep", "function other other", "function star star", "function tail tail",
				"source source:orders.*.eu orders.*.eu", "source source:invoices.* invoices.*"},
		},
		{
			name: "if, else and each edges carry their conditions",
			scripts: map[string]string{
				"triage": "next: agent.run.page if result.severity == 'high'\nnext: agent.run.log else\nnext: agent.run.worker each result.files\nnext: agent.run.log",
				"page":   "", "log": "", "worker": "",
			},
			wires: []string{"triage --if result.severity == 'high'--> page", "triage --else--> log", "triage --each result.files--> worker", "triage --> log"},
		},
		{
			name: "an error handler hears its function's errors; agent.error.> hears everyone's, its own too",
			scripts: map[string]string{
				"ship":     "",
				"order":    "next: agent.run.ship",
				"shiperr":  "on: agent.error.ship",
				"failures": "on: agent.error.>",
			},
			wires: []string{
				"failures --on error--> failures (cycle)",
				"order --> ship", "order --on error--> failures",
				"ship --on error--> failures", "ship --on error--> shiperr",
				"shiperr --on error--> failures",
			},
			cycles: [][]string{{"failures"}},
		},
		{
			name: "loops are marked, and only their edges",
			scripts: map[string]string{
				"a":    "next: agent.run.b\nnext: agent.run.out",
				"b":    "next: agent.run.a if result.again",
				"self": "next: agent.run.self each result.more",
				"out":  "",
			},
			wires:  []string{"a --> b (cycle)", "a --> out", "b --if result.again--> a (cycle)", "self --each result.more--> self (cycle)"},
			cycles: [][]string{{"a", "b"}, {"self"}},
		},
		{
			name:    "a subject no function listens on leaves the host",
			scripts: map[string]string{"a": "next: flow.out.a\nnext: flow.out.a if result.ok", "b": "next: flow.out.a"},
			wires:   []string{"a --> sink:flow.out.a", "a --if result.ok--> sink:flow.out.a", "b --> sink:flow.out.a"},
			nodes:   []string{"function a a", "function b b", "sink sink:flow.out.a flow.out.a"},
		},
		{
			name:    "schedules and delays",
			scripts: map[string]string{"tick": "schedule: @every 2s\nnext: agent.run.later", "later": "delay: 5m", "gate": "approve: timeout 2h\njoin: tick later"},
			wires:   []string{"schedule:tick --> tick", "tick --> later"},
			nodes:   []string{"function gate gate approve within 2h0m0s · join tick, later", "function later later delay 5m0s", "function tick tick", "schedule schedule:tick schedule @every 2s"},
		},
		{
			name:    "one source starts every function that listens on it",
			scripts: map[string]string{"triage": "on: webhook.github", "audit": "on: webhook.>"},
			wires:   []string{"source:webhook.> --> audit", "source:webhook.github --> triage"},
			nodes:   []string{"function audit audit", "function triage triage", "source source:webhook.> webhook.>", "source source:webhook.github webhook.github"},
		},
		{
			name:    "a function listening on another's results hears them",
			scripts: map[string]string{"a": "", "watch": "on: agent.result.a"},
			wires:   []string{"a --result--> watch"},
			nodes:   []string{"function a a", "function watch watch"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := flowgraph.Build(load(t, c.scripts))
			if got := wires(g); !slices.Equal(got, c.wires) {
				t.Errorf("wires:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(c.wires, "\n  "))
			}
			if c.nodes != nil {
				if got := nodes(g); !slices.Equal(got, c.nodes) {
					t.Errorf("nodes:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(c.nodes, "\n  "))
				}
			}
			if !slices.EqualFunc(g.Cycles, c.cycles, slices.Equal) {
				t.Errorf("cycles %v, want %v", g.Cycles, c.cycles)
			}
		})
	}
}

func TestAroundKeepsOnlyTheConnectedPart(t *testing.T) {
	g := flowgraph.Build(load(t, map[string]string{
		"first":  "on: webhook.x\nnext: agent.run.second",
		"second": "next: flow.out.done",
		"alone":  "next: agent.run.other",
		"other":  "",
	}))
	sub := g.Around("second")
	if got, want := nodes(sub), []string{"function first first", "function second second", "sink sink:flow.out.done flow.out.done", "source source:webhook.x webhook.x"}; !slices.Equal(got, want) {
		t.Errorf("nodes %v, want %v", got, want)
	}
	if got, want := wires(sub), []string{"source:webhook.x --> first", "first --> second", "second --> sink:flow.out.done"}; !slices.Equal(got, want) {
		t.Errorf("wires %v, want %v", got, want)
	}
	if n := len(g.Around("nope").Nodes); n != 0 {
		t.Errorf("an unknown function keeps %d nodes", n)
	}
}

func TestFormats(t *testing.T) {
	g := flowgraph.Build(load(t, map[string]string{
		"triage":   "on: webhook.github\nnext: agent.run.page if result.title == \"a \\\"b\\\"\"\nnext: flow.out.rest else",
		"page":     "delay: 1m",
		"loop":     "next: agent.run.loop",
		"failures": "on: agent.error.page",
	}))
	var text bytes.Buffer
	if err := g.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"sources\n  webhook.github\n",
		"\n  page  delay 1m0s\n",
		"leaving the host (no function listens)\n  flow.out.rest\n",
		"\n  webhook.github --> triage\n",
		"\n  triage --if result.title == \"a \\\"b\\\"\"--> page\n",
		"\n  triage --else--> flow.out.rest\n",
		"\n  page --on error--> failures\n",
		"\n  loop --> loop  (cycle)\n",
		"\ncycles (",
		"\n  loop\n",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}

	var dot bytes.Buffer
	if err := g.WriteDOT(&dot); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"digraph wiring {\n",
		`"source:webhook.github" [label="webhook.github", shape=ellipse];`,
		`"page" [label="page\ndelay 1m0s", shape=box, style=rounded];`,
		`"triage" -> "page" [label="if result.title == \"a \\\"b\\\"\""];`,
		`"page" -> "failures" [label="on error", style=dashed];`,
		`"loop" -> "loop" [color=red, fontcolor=red, label="(cycle)"];`,
		`"sink:flow.out.rest" [label="flow.out.rest", shape=plaintext];`,
	} {
		if !strings.Contains(dot.String(), want) {
			t.Errorf("DOT lacks %s:\n%s", want, dot.String())
		}
	}
	if !strings.HasSuffix(dot.String(), "}\n") {
		t.Errorf("DOT does not end the graph:\n%s", dot.String())
	}

	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var back flowgraph.Graph
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(wires(&back), wires(g)) || len(back.Nodes) != len(g.Nodes) {
		t.Errorf("JSON does not carry the graph: %s", b)
	}
	if !strings.Contains(string(b), `{"from":"triage","to":"page","kind":"if","subject":"agent.run.page","expr":"result.title == \"a \\\"b\\\"\"","label":"if result.title == \"a \\\"b\\\"\""}`) {
		t.Errorf("JSON edge of the if: %s", b)
	}
}
