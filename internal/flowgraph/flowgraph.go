// Package flowgraph draws the graph that the annotations of a functions directory make, before
// anything runs: which subjects start which functions, where each result goes and under what
// condition, and who handles whose errors. It reads only loaded functions, never NATS, so
// `host wiring` works on a laptop with the directory alone and the dashboard draws the same
// graph the CLI prints.
package flowgraph

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
)

// NodeKind says what a node stands for.
type NodeKind string

const (
	// Function is a loaded function.
	Function NodeKind = "function"
	// Source is an on: subject no function publishes to: something outside (a webhook, a
	// client) must.
	Source NodeKind = "source"
	// Schedule is a function's schedule: annotation, firing it on its ticks.
	Schedule NodeKind = "schedule"
	// Sink is a next: subject no function listens on: the flow leaves the host there.
	Sink NodeKind = "sink"
)

// EdgeKind says why a message travels along an edge.
type EdgeKind string

const (
	// Trigger joins a source or a schedule to the function it starts.
	Trigger EdgeKind = "trigger"
	// Next is a plain next: edge, always taken.
	Next EdgeKind = "next"
	// If is a next: edge taken when its expression holds.
	If EdgeKind = "if"
	// Else is a next: edge taken when none of its function's if edges held.
	Else EdgeKind = "else"
	// Each is a next: edge that sends one message per element of its expression's list.
	Each EdgeKind = "each"
	// Result joins a function to one whose on: matches agent.result.<it>.
	Result EdgeKind = "result"
	// Error joins a function to its error handler, one whose on: matches agent.error.<it>.
	Error EdgeKind = "error"
)

// Node is one box of the graph.
type Node struct {
	// ID is unique in the graph: a function's name (which never holds a dot or colon), or
	// "<kind>:<subject or function>" for the others.
	ID    string   `json:"id"`
	Kind  NodeKind `json:"kind"`
	Label string   `json:"label"`
	// Note says, on a line of its own, what a function does besides running: "delay 5m0s",
	// "approve within 24h0m0s", "join summary, file" (joined by " · "); "" when nothing.
	Note string `json:"note,omitempty"`
}

// Edge is one wire: messages published by From reach To.
type Edge struct {
	From string   `json:"from"`
	To   string   `json:"to"`
	Kind EdgeKind `json:"kind"`
	// Subject is what the message is published on.
	Subject string `json:"subject,omitempty"`
	// Expr is the CEL expression of an if or each edge.
	Expr string `json:"expr,omitempty"`
	// Label is how the edge reads: "if result.severity == 'high'", "else", "each result.files",
	// "on error", "result", or "" for an edge always taken.
	Label string `json:"label,omitempty"`
	// Cycle marks an edge on a loop of functions: a message can come back round it, so a loop
	// the author did not mean runs forever.
	Cycle bool `json:"cycle,omitempty"`
}

// Graph is the wiring of a set of functions.
type Graph struct {
	Nodes []Node `json:"nodes"`
	Edges []Edge `json:"edges"`
	// Cycles are the loops, each the functions of one strongly connected part, sorted.
	Cycles [][]string `json:"cycles,omitempty"`
}

// Build makes the graph of fns. Its order is stable (functions by name, edges as written), so
// two runs over the same directory print the same text.
func Build(fns map[string]*functions.Function) *Graph {
	names := slices.Sorted(maps.Keys(fns))
	g := &Graph{Nodes: []Node{}, Edges: []Edge{}}
	for _, name := range names {
		n := Node{ID: name, Kind: Function, Label: name}
		n.Note = note(fns[name].Spec)
		g.Nodes = append(g.Nodes, n)
	}
	// listeners are the functions a literal subject starts.
	listeners := func(subj string) []string {
		var out []string
		for _, name := range names {
			if slices.ContainsFunc(fns[name].Subjects(), func(pat string) bool { return bus.SubjectMatches(pat, subj) }) {
				out = append(out, name)
			}
		}
		return out
	}
	sinks := map[string]bool{}
	for _, name := range names {
		f := fns[name]
		if f.Spec.Schedule != "" {
			id := string(Schedule) + ":" + name
			g.Nodes = append(g.Nodes, Node{ID: id, Kind: Schedule, Label: "schedule " + f.Spec.Schedule})
			g.Edges = append(g.Edges, Edge{From: id, To: name, Kind: Trigger})
		}
		for _, n := range nextEdges(f) {
			to := listeners(n.Subject)
			if len(to) == 0 {
				id := string(Sink) + ":" + n.Subject
				if !sinks[id] {
					sinks[id] = true
					g.Nodes = append(g.Nodes, Node{ID: id, Kind: Sink, Label: n.Subject})
				}
				to = []string{id}
			}
			for _, t := range to {
				g.Edges = append(g.Edges, nextEdge(name, t, n))
			}
		}
		for _, t := range listeners(bus.ResultSubject(name)) {
			g.Edges = append(g.Edges, Edge{From: name, To: t, Kind: Result, Subject: bus.ResultSubject(name), Label: "result"})
		}
		for _, t := range listeners(bus.ErrorSubject(name)) {
			// A join hears the error events of the steps it awaits only to fail when one fails;
			// the wire that matters is the step's next: into it, not an error handler.
			joinOnly := slices.Contains(fns[t].Spec.Join, name) &&
				!slices.ContainsFunc(fns[t].Spec.On, func(pat string) bool { return bus.SubjectMatches(pat, bus.ErrorSubject(name)) })
			if !joinOnly {
				g.Edges = append(g.Edges, Edge{From: name, To: t, Kind: Error, Subject: bus.ErrorSubject(name), Label: "on error"})
			}
		}
	}
	g.addSources(fns, names)
	g.markCycles(names)
	return g
}

// nextEdges are a function's next: lines, compiled or, for a function built by hand (tests),
// as its annotations say.
func nextEdges(f *functions.Function) []annot.Next {
	if f.Routes != nil {
		return f.Routes.Edges()
	}
	return f.Spec.Next
}

func nextEdge(from, to string, n annot.Next) Edge {
	e := Edge{From: from, To: to, Kind: Next, Subject: n.Subject}
	switch {
	case n.If != "":
		e.Kind, e.Expr, e.Label = If, n.If, "if "+n.If
	case n.Else:
		e.Kind, e.Label = Else, "else"
	case n.Each != "":
		e.Kind, e.Expr, e.Label = Each, n.Each, "each "+n.Each
	}
	return e
}

// addSources adds a node for every on: subject that nothing in the graph publishes to. A
// subject some function publishes to may be published from outside too, but then the graph
// already shows how it is reached, and a box for every wildcard would bury the flow.
func (g *Graph) addSources(fns map[string]*functions.Function, names []string) {
	var published []string
	for _, name := range names {
		published = append(published, bus.ResultSubject(name), bus.ErrorSubject(name))
		for _, n := range nextEdges(fns[name]) {
			published = append(published, n.Subject)
		}
	}
	seen := map[string]bool{}
	var edges []Edge
	for _, name := range names {
		for _, on := range fns[name].Spec.On {
			if slices.ContainsFunc(published, func(s string) bool { return bus.SubjectMatches(on, s) }) {
				continue
			}
			id := string(Source) + ":" + on
			if !seen[id] {
				seen[id] = true
				g.Nodes = append(g.Nodes, Node{ID: id, Kind: Source, Label: on})
			}
			edges = append(edges, Edge{From: id, To: name, Kind: Trigger, Subject: on})
		}
	}
	s3Nodes, s3Edges := s3Sources(fns, names, seen)
	g.Nodes, edges = append(g.Nodes, s3Nodes...), append(edges, s3Edges...)
	// Sources first: the text reads from where messages come in.
	g.Edges = append(edges, g.Edges...)
	if g.Edges == nil {
		g.Edges = []Edge{} // JSON readers get a list, not null
	}
}

// markCycles finds the strongly connected parts of the functions (Tarjan's algorithm) and
// marks every edge inside one, a function's edge to itself included.
func (g *Graph) markCycles(names []string) {
	out := map[string][]string{}
	for _, e := range g.Edges {
		out[e.From] = append(out[e.From], e.To)
	}
	index, low, onStack := map[string]int{}, map[string]int{}, map[string]bool{}
	var stack []string
	part := map[string]int{}
	parts := 0
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = len(index), len(index)
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range out[v] {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				part[w] = parts
				if w == v {
					break
				}
			}
			parts++
		}
	}
	for _, n := range names {
		if _, seen := index[n]; !seen {
			visit(n)
		}
	}
	members := map[int][]string{}
	for i := range g.Edges {
		e := &g.Edges[i]
		if e.From == e.To || part[e.From] == part[e.To] && isFunction(e.From) && isFunction(e.To) {
			e.Cycle = true
			members[part[e.From]] = append(members[part[e.From]], e.From, e.To)
		}
	}
	for _, m := range members {
		slices.Sort(m)
		g.Cycles = append(g.Cycles, slices.Compact(m))
	}
	slices.SortFunc(g.Cycles, func(a, b []string) int { return cmp.Compare(a[0], b[0]) })
}

// isFunction tells a function's node from the others by its ID: only theirs hold a colon.
func isFunction(id string) bool { return !strings.Contains(id, ":") }

// Around is the part of g connected to the named functions, whichever way its edges point:
// what a flow that ran them can have touched. Unknown names are left out.
func (g *Graph) Around(names ...string) *Graph {
	adj := map[string][]string{}
	for _, e := range g.Edges {
		adj[e.From] = append(adj[e.From], e.To)
		adj[e.To] = append(adj[e.To], e.From)
	}
	keep := map[string]bool{}
	var walk func(string)
	walk = func(v string) {
		if keep[v] {
			return
		}
		keep[v] = true
		for _, w := range adj[v] {
			walk(w)
		}
	}
	for _, n := range names {
		if slices.ContainsFunc(g.Nodes, func(x Node) bool { return x.ID == n }) {
			walk(n)
		}
	}
	sub := &Graph{Nodes: []Node{}, Edges: []Edge{}}
	for _, n := range g.Nodes {
		if keep[n.ID] {
			sub.Nodes = append(sub.Nodes, n)
		}
	}
	for _, e := range g.Edges {
		if keep[e.From] {
			sub.Edges = append(sub.Edges, e)
		}
	}
	for _, c := range g.Cycles {
		if keep[c[0]] {
			sub.Cycles = append(sub.Cycles, c)
		}
	}
	return sub
}

// node returns the node of id; the graph always has it.
func (g *Graph) node(id string) Node {
	i := slices.IndexFunc(g.Nodes, func(n Node) bool { return n.ID == id })
	if i < 0 {
		panic(fmt.Sprintf("wiring: edge to unknown node %q", id))
	}
	return g.Nodes[i]
}

// note is what a function's node says besides its name: its delay, its approval, its join.
func note(s *annot.Spec) string {
	var notes []string
	if s.Delay > 0 {
		notes = append(notes, "delay "+s.Delay.String())
	}
	if s.Approve != nil {
		notes = append(notes, "approve within "+s.Approve.Timeout.String())
	}
	if len(s.Join) > 0 {
		notes = append(notes, "join "+strings.Join(s.Join, ", "))
	}
	return strings.Join(notes, " · ")
}
