package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/flowgraph"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
)

// wiringView is the wiring page: the graph `host wiring` prints for this host's functions
// directory, drawn in the browser (wiring.js lays it out with dagre), and the same wires as
// a table that needs no script.
type wiringView struct {
	session // who the page is shown to
	Graph   *flowgraph.Graph
	Wires   []wireRow
	Refused []string
}

type wireRow struct {
	From, Label, To string
	Kind            flowgraph.EdgeKind
	Cycle           bool
}

func (d *Dashboard) wiringPage(w http.ResponseWriter, r *http.Request) {
	g, errs := d.wiring()
	v := &wiringView{Graph: g}
	for _, err := range errs {
		v.Refused = append(v.Refused, err.Error())
	}
	label := map[string]string{}
	for _, n := range g.Nodes {
		label[n.ID] = n.Label
	}
	for _, e := range g.Edges {
		v.Wires = append(v.Wires, wireRow{From: label[e.From], Label: e.Label, To: label[e.To], Kind: e.Kind, Cycle: e.Cycle})
	}
	d.render(w, r, "wiring", v)
}

// wiringJSON is the graph wiring.js draws; ?around=a,b keeps the part connected to those
// functions, what a flow that ran them can have touched.
func (d *Dashboard) wiringJSON(w http.ResponseWriter, r *http.Request) {
	g, _ := d.wiring()
	if around := r.URL.Query().Get("around"); around != "" {
		g = g.Around(strings.Split(around, ",")...)
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(g); err != nil {
		d.log.Debug("dashboard: write the wiring", zap.Error(err))
	}
}

// wiring builds the graph of this host's functions directory, as `host wiring` does.
func (d *Dashboard) wiring() (*flowgraph.Graph, []error) {
	fns, errs := d.localFunctions()
	return flowgraph.Build(fns), errs
}

// flowWiring is what the flow page overlays on the wiring graph: each function's status in
// the flow (the worst of its jobs, with their counts), and the wires its jobs went along (a
// parent's function to its child's).
type flowWiring struct {
	Around string // the flow's functions, for ?around=
	Status string // JSON: function -> {status, jobs}
	Taken  string // JSON: {pairs: ["from>to", ...]}
}

// statusRank orders statuses by how much they need looking at: one failed job of a fan-out
// colours its function, however many succeeded.
var statusRank = []jobtype.Status{jobtype.Failed, jobtype.Running, jobtype.Retrying, jobtype.Queued, jobtype.Canceled, jobtype.Superseded, jobtype.Succeeded}

func overlay(recs []*jobs.Record) flowWiring {
	type fnStatus struct {
		Status jobtype.Status `json:"status"`
		Jobs   string         `json:"jobs"`
	}
	counts := map[string]map[jobtype.Status]int{}
	fnOf := map[string]string{}
	var names []string
	for _, r := range recs {
		fnOf[r.ID] = r.Function
		if counts[r.Function] == nil {
			counts[r.Function] = map[jobtype.Status]int{}
			names = append(names, r.Function)
		}
		counts[r.Function][r.Status]++
	}
	status := map[string]fnStatus{}
	for fn, c := range counts {
		var s fnStatus
		var parts []string
		for _, st := range statusRank {
			if c[st] == 0 {
				continue
			}
			if s.Status == "" {
				s.Status = st
			}
			parts = append(parts, fmt.Sprintf("%d %s", c[st], st))
		}
		s.Jobs = strings.Join(parts, ", ")
		status[fn] = s
	}
	var pairs []string
	for _, r := range recs {
		if from, ok := fnOf[r.ParentJob]; ok && !slices.Contains(pairs, from+">"+r.Function) {
			pairs = append(pairs, from+">"+r.Function)
		}
	}
	sb, _ := json.Marshal(status)
	tb, _ := json.Marshal(map[string][]string{"pairs": pairs})
	return flowWiring{Around: strings.Join(names, ","), Status: string(sb), Taken: string(tb)}
}
