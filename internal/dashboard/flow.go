package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/trace"
	"go.uber.org/zap"
)

// The flow picture's geometry, in SVG user units: a label column, then a timeline where each
// job is a bar from its start to its end, one row per job.
const (
	flowLabelWidth = 260
	flowTimeWidth  = 620
	flowRowHeight  = 34
	flowTop        = 24
	flowMinBar     = 4 // a job too quick to see still gets a mark
	// flowDecisionText is the width a wait for a decision needs for its words inside it.
	flowDecisionText = 160
)

type flowView struct {
	session // who the page is shown to
	ID      string
	Steps   []flowStep
	Edges   []flowEdge
	Width   int
	Height  int
	Span    time.Duration
	Wiring  flowWiring
	// Open says some job of the flow has not ended: it can be canceled.
	Open bool
	// TraceURL is the flow's trace (serve --trace-url): its first traced job's; "" when none.
	TraceURL string
}

// flowStep is one job of the flow, drawn as one row.
type flowStep struct {
	*jobs.Record
	Y, BarY      int
	X, W         float64 // the run
	WaitX, WaitW float64 // the queue wait before it
	// DecisionX, DecisionW are the wait for a person after the run of a step with approve:,
	// drawn apart from the run (which is work) and DecisionW 0 for any other job.
	DecisionX, DecisionW float64
	DecisionTextX        float64 // where its words go inside it, 0 when it is too narrow
	Run, Decision        time.Duration
}

// flowEdge joins a parent's bar to its child's: the child ran on the parent's output.
type flowEdge struct {
	Path string
}

func (d *Dashboard) flowPage(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	recs, err := c.Jobs.Recent(ctx, jobs.Filter{Flow: id}, 0)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	if len(recs) == 0 {
		d.serveError(w, r, http.StatusNotFound, fmt.Sprintf("no jobs recorded for flow %s (job records are kept 7 days)", id))
		return
	}
	v := drawFlow(id, recs, time.Now())
	for _, s := range v.Steps {
		if v.TraceURL = trace.URL(d.cfg.TraceURL, s.Trace); v.TraceURL != "" {
			break
		}
	}
	d.render(w, r, "flow", v)
}

// drawFlow lays out a flow's jobs, ordered as `host flow` orders them: by hop, then start.
func drawFlow(id string, recs []*jobs.Record, now time.Time) *flowView {
	slices.SortFunc(recs, func(a, b *jobs.Record) int {
		return cmp.Or(cmp.Compare(a.Hop, b.Hop), a.Started.Compare(b.Started), cmp.Compare(a.ID, b.ID))
	})
	end := func(r *jobs.Record) time.Time {
		switch {
		case !r.RunEnded.IsZero() && !r.Status.Final():
			return now // waiting for a decision, still
		case !r.Finished.IsZero():
			return r.Finished
		case r.Started.IsZero():
			return r.Enqueued
		}
		return now
	}
	begin := func(r *jobs.Record) time.Time {
		if r.Enqueued.IsZero() {
			return r.Started
		}
		return r.Enqueued
	}
	t0, t1 := begin(recs[0]), end(recs[0])
	for _, r := range recs {
		if b := begin(r); b.Before(t0) {
			t0 = b
		}
		if e := end(r); e.After(t1) {
			t1 = e
		}
	}
	span := t1.Sub(t0)
	x := func(t time.Time) float64 {
		if span <= 0 || t.IsZero() {
			return flowLabelWidth
		}
		return flowLabelWidth + float64(t.Sub(t0))/float64(span)*flowTimeWidth
	}
	v := &flowView{ID: id, Width: flowLabelWidth + flowTimeWidth + 20, Height: flowTop + len(recs)*flowRowHeight + 10, Span: span, Wiring: overlay(recs),
		Open: slices.ContainsFunc(recs, func(r *jobs.Record) bool { return !r.Status.Final() })}
	row := map[string]int{}
	for i, r := range recs {
		s := flowStep{Record: r, Y: flowTop + i*flowRowHeight, Run: r.RunTime(), Decision: r.DecisionWait(now)}
		s.BarY = s.Y - 14
		start := r.Started
		if start.IsZero() {
			start = end(r)
		}
		s.X = x(start)
		runEnd := end(r)
		if !r.RunEnded.IsZero() {
			runEnd = r.RunEnded
		}
		s.W = max(x(runEnd)-s.X, flowMinBar)
		if !r.RunEnded.IsZero() {
			// From the run's bar as drawn (a quick run is drawn wider than it took).
			s.DecisionX = s.X + s.W
			s.DecisionW = max(x(end(r))-s.DecisionX, 0)
			if s.DecisionW > flowDecisionText {
				s.DecisionTextX = s.DecisionX + 6
			}
		}
		s.WaitX = x(begin(r))
		s.WaitW = max(s.X-s.WaitX, 0)
		row[r.ID] = i
		v.Steps = append(v.Steps, s)
	}
	for _, s := range v.Steps {
		p, ok := row[s.ParentJob]
		if s.ParentJob == "" || !ok {
			continue
		}
		from := v.Steps[p]
		fx, fy := max(from.X+from.W, from.DecisionX+from.DecisionW), float64(from.BarY+8)
		tx, ty := s.WaitX, float64(s.BarY+8)
		v.Edges = append(v.Edges, flowEdge{Path: fmt.Sprintf("M%.1f %.1f C%.1f %.1f %.1f %.1f %.1f %.1f", fx, fy, fx+30, fy, tx-30, ty, tx, ty)})
	}
	return v
}

func (d *Dashboard) cancelFlow(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !d.mayRunEach(w, r, func() ([]string, error) { return flowFunctions(ctx, c, id) }) {
		return
	}
	got, err := c.CancelFlow(ctx, id, actor(r))
	d.audit(ctx, c, r, "flow.cancel", id, "", err)
	if err != nil {
		d.log.Info("dashboard: flow cancel refused", zap.String("flow", id), zap.String("by", who(r)), zap.Error(err))
		d.fail(w, r, err)
		return
	}
	d.log.Info("dashboard: flow canceled", zap.String("flow", id), zap.Int("jobs", len(got.Canceled)), zap.Int("not_now", len(got.Failed)), zap.String("by", who(r)))
	http.Redirect(w, r, "/flows/"+id, http.StatusSeeOther)
}
