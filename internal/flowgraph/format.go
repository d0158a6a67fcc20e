package flowgraph

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteText writes the graph for people: its boxes by kind, then one line per wire, as
// "triage --if result.severity == 'high'--> page", then the loops.
func (g *Graph) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	section := func(title string, kinds ...NodeKind) {
		first := true
		for _, n := range g.Nodes {
			if !slices.Contains(kinds, n.Kind) {
				continue
			}
			if first {
				fmt.Fprintln(tw, title)
				first = false
			}
			line := "  " + n.Label
			if n.Note != "" {
				line += "\t" + n.Note
			}
			fmt.Fprintln(tw, line)
		}
	}
	section("sources", Source, Schedule)
	section("functions", Function)
	section("leaving the host (no function listens)", Sink)
	if len(g.Edges) > 0 {
		fmt.Fprintln(tw, "wires")
	}
	for _, e := range g.Edges {
		line := "  " + g.node(e.From).Label + " " + arrow(e) + " " + g.node(e.To).Label
		if e.Cycle {
			line += "  (cycle)"
		}
		fmt.Fprintln(tw, line)
	}
	if len(g.Cycles) > 0 {
		fmt.Fprintln(tw, "cycles (a message can come back round; --max-hops, 64 by default, stops a flow that goes on)")
	}
	for _, c := range g.Cycles {
		fmt.Fprintln(tw, "  "+strings.Join(c, ", "))
	}
	return tw.Flush()
}

func arrow(e Edge) string {
	if e.Label == "" {
		return "-->"
	}
	return "--" + e.Label + "-->"
}

// WriteDOT writes the graph for Graphviz (`host wiring --dot | dot -Tsvg`): functions are
// boxes, sources and schedules ellipses, subjects that leave the host plain text; error edges
// are dashed and loops red.
func (g *Graph) WriteDOT(w io.Writer) error {
	var b strings.Builder
	b.WriteString("digraph wiring {\n  rankdir=LR;\n  node [fontname=\"sans-serif\", fontsize=11];\n  edge [fontname=\"sans-serif\", fontsize=10];\n")
	for _, n := range g.Nodes {
		label := n.Label
		attrs := ""
		switch n.Kind {
		case Function:
			attrs = "shape=box, style=rounded"
			if n.Note != "" {
				label += "\n" + n.Note
			}
		case Source:
			attrs = "shape=ellipse"
		case Schedule:
			attrs = "shape=ellipse, style=dashed"
		case Sink:
			attrs = "shape=plaintext"
		}
		fmt.Fprintf(&b, "  %s [label=%s, %s];\n", quote(n.ID), quote(label), attrs)
	}
	for _, e := range g.Edges {
		var attrs []string
		label := e.Label
		if e.Cycle {
			label = strings.TrimSpace(label + " (cycle)")
			attrs = append(attrs, "color=red", "fontcolor=red")
		}
		if label != "" {
			attrs = append(attrs, "label="+quote(label))
		}
		if e.Kind == Error {
			attrs = append(attrs, "style=dashed")
		}
		fmt.Fprintf(&b, "  %s -> %s", quote(e.From), quote(e.To))
		if len(attrs) > 0 {
			fmt.Fprintf(&b, " [%s]", strings.Join(attrs, ", "))
		}
		b.WriteString(";\n")
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// quote makes s a DOT string: a CEL expression may hold quotes and backslashes, and a
// schedule's label a line break.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
