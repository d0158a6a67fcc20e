package dashboard_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/agenthost/host/internal/flowgraph"
	"github.com/agenthost/host/internal/functions"
)

// The wiring page draws, in the browser, the graph `host wiring` prints: a box per node, a
// line per wire with its condition, loops marked, laid out left to right from the sources.
func TestWiringPageDrawsTheGraph(t *testing.T) {
	s := newSite(t, map[string]string{
		"triage.sh":   "# on: webhook.github\n# next: agent.run.page if result.severity == 'high'\n# next: agent.run.log else\n# next: agent.run.worker each result.files\necho\n",
		"page.sh":     "# delay: 1m\necho\n",
		"log.sh":      "# next: flow.out.logged\necho\n",
		"worker.sh":   "# next: agent.run.worker if result.more\necho\n",
		"failures.sh": "# on: agent.error.triage\necho\n",
		"tick.sh":     "# schedule: @every 1h\n# next: agent.run.triage\necho\n",
	}, fakeRunner{})
	fns, errs := functions.Load(s.h.FnDir)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	g := flowgraph.Build(fns)
	if len(g.Nodes) != 9 || len(g.Edges) != 9 {
		t.Fatalf("the graph under test has %d nodes and %d edges, want 9 and 9: %+v", len(g.Nodes), len(g.Edges), g)
	}

	s.do("open the wiring", chromedp.Navigate(s.url+"/wiring"), chromedp.WaitVisible(`svg#wiring[data-drawn]`))
	count := func(sel string) int {
		return get(s, "count "+sel, chromedp.Evaluate[int](`document.querySelectorAll("`+sel+`").length`))
	}
	if n := count("svg#wiring g.node"); n != len(g.Nodes) {
		t.Errorf("%d boxes drawn, want %d", n, len(g.Nodes))
	}
	if n := count("svg#wiring g.node.kind-function"); n != len(fns) {
		t.Errorf("%d function boxes, want %d", n, len(fns))
	}
	for _, n := range g.Nodes {
		sel := fmt.Sprintf(`svg#wiring g.node.kind-%s[data-node='%s']`, n.Kind, n.ID)
		if got := get(s, "read "+n.ID, chromedp.Evaluate[string](`(document.querySelector("`+sel+`") || {}).textContent || ""`)); !strings.HasPrefix(got, n.Label) {
			t.Errorf("box %s reads %q, want %q", n.ID, got, n.Label)
		}
	}
	if n := count("svg#wiring g.wire"); n != len(g.Edges) {
		t.Errorf("%d wires drawn, want %d", n, len(g.Edges))
	}
	for _, e := range g.Edges {
		sel := fmt.Sprintf(`svg#wiring g.wire.kind-%s[data-from='%s'][data-to='%s']`, e.Kind, e.From, e.To)
		if e.Cycle {
			sel += ".cycle"
		}
		label := get(s, "read the wire "+e.From+" to "+e.To, chromedp.Evaluate[string](`(() => {
			const w = document.querySelector("`+sel+`");
			if (!w) return "missing";
			const d = w.querySelector("path.line").getAttribute("d") || "";
			if (!/^M[-\d.]+ [-\d.]+ /.test(d) || d.includes("NaN")) return "bad path " + d;
			const l = w.querySelector("text.label");
			return l ? l.textContent : "";
		})()`))
		if label != e.Label {
			t.Errorf("wire %s: label %q, want %q", sel, label, e.Label)
		}
	}
	for _, want := range []string{"if result.severity == 'high'", "else", "each result.files", "on error", "if result.more"} {
		if n := get(s, "find "+want, chromedp.Evaluate[int](`[...document.querySelectorAll("svg#wiring text.label")].filter(t => t.textContent === `+fmt.Sprintf("%q", want)+`).length`)); n != 1 {
			t.Errorf("%d labels %q drawn, want 1", n, want)
		}
	}
	if n := count("svg#wiring g.wire.cycle"); n != 1 {
		t.Errorf("%d wires marked as a loop, want worker's own", n)
	}
	// Laid out, not piled up: left to right along the wires, no two boxes on one another.
	boxes := get(s, "read the boxes", chromedp.Evaluate[map[string][]float64](`Object.fromEntries([...document.querySelectorAll("svg#wiring g.node")].map(g => {
		const r = g.querySelector("rect");
		return [g.dataset.node, ["x", "y", "width", "height"].map(a => +r.getAttribute(a))];
	}))`))
	for _, e := range [][2]string{{"source:webhook.github", "triage"}, {"schedule:tick", "tick"}, {"tick", "triage"}, {"triage", "page"}, {"log", "sink:flow.out.logged"}} {
		if a, b := boxes[e[0]], boxes[e[1]]; len(a) != 4 || len(b) != 4 || a[0]+a[2] >= b[0] {
			t.Errorf("%s (%v) is not left of %s (%v)", e[0], a, e[1], b)
		}
	}
	for a, ra := range boxes {
		for b, rb := range boxes {
			if a < b && ra[0] < rb[0]+rb[2] && rb[0] < ra[0]+ra[2] && ra[1] < rb[1]+rb[3] && rb[1] < ra[1]+ra[3] {
				t.Errorf("boxes %s %v and %s %v overlap", a, ra, b, rb)
			}
		}
	}
	if delay := svgText(s, `svg#wiring g.node[data-node="page"] text.note`); delay != "delay 1m0s" {
		t.Errorf("page's box says %q, want its delay", delay)
	}
	if rows := get(s, "read the table", chromedp.Text(`table.wires`)); !strings.Contains(rows, "worker\tif result.more (cycle)\tworker") {
		t.Errorf("the table of wires %q lacks the loop", rows)
	}
	if note := get(s, "read the note", chromedp.Text(`#wiring-note`)); note != "" {
		t.Errorf("note %q", note)
	}
	s.screenshot("wiring")
	if d := s.dialogsSeen(); len(d) != 0 {
		t.Fatalf("dialogs %q", d)
	}
}

// A flow's page draws its part of the wiring, each function coloured by its jobs in the flow
// and the wires they went along marked.
func TestFlowPageOverlaysTheWiring(t *testing.T) {
	s := newSite(t, map[string]string{
		"first.sh":   "# next: agent.run.second\necho\n",
		"second.sh":  "# next: agent.run.third\n# next: agent.run.skipped if result.ok == false\necho\n",
		"third.sh":   "echo\n",
		"skipped.sh": "echo\n",
		"apart.sh":   "# next: agent.run.other\necho\n",
		"other.sh":   "echo\n",
	}, thirdBreaks)
	s.publish("first", "flow-w", `{}`)
	s.flowEnds("flow-w", 3)
	s.do("open the flow", chromedp.Navigate(s.url+"/flows/flow-w"), chromedp.WaitVisible(`svg#wiring[data-drawn]`))
	classes := get(s, "read the boxes", chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("svg#wiring g.node")].map(g => [g.dataset.node, g.getAttribute("class")]))`))
	want := map[string]string{
		"first":   "node kind-function status-succeeded",
		"second":  "node kind-function status-succeeded",
		"third":   "node kind-function status-failed",
		"skipped": "node kind-function not-run",
	}
	if fmt.Sprint(classes) != fmt.Sprint(want) {
		t.Errorf("boxes %v, want %v (apart and other are not on the flow's part of the graph)", classes, want)
	}
	taken := get(s, "read the wires", chromedp.Evaluate[[]string](`[...document.querySelectorAll("svg#wiring g.wire.taken")].map(w => w.dataset.from + ">" + w.dataset.to)`))
	if strings.Join(taken, " ") != "first>second second>third" {
		t.Errorf("wires taken %v, want first>second and second>third", taken)
	}
	if title := svgText(s, `svg#wiring g.node[data-node="third"] title`); title != "third: 1 failed" {
		t.Errorf("third's title %q", title)
	}
	s.screenshot("flow-wiring")
}

// svgText is the text of the first element sel selects: SVG elements have no innerText,
// which chromedp.Text reads.
func svgText(s *site, sel string) string {
	s.t.Helper()
	return get(s, "read "+sel, chromedp.Evaluate[string](`(document.querySelector(`+fmt.Sprintf("%q", sel)+`) || {}).textContent || "missing"`))
}
