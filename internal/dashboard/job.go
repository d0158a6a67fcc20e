package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
)

// jobView is a job's page.
type jobView struct {
	*jobs.Record
	Result    string // indented JSON
	Arguments string // as the record kept them, or the trigger's body while it is kept
	CanRerun  bool   // the record kept its arguments: a Re-run runs them again
	NotKept   string // why not, when it cannot
	Run       time.Duration
}

func (d *Dashboard) jobPage(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	rec, err := c.Jobs.Get(ctx, r.PathValue("id"))
	if err != nil {
		d.fail(w, r, err)
		return
	}
	v := &jobView{Record: rec, Run: rec.RunTime()}
	if len(rec.Result) > 0 {
		v.Result = indent(rec.Result)
	}
	// The record keeps the arguments as sent ($secret: references, never values), so they are
	// shown as they are. A record without them (written before records kept them, or over
	// jobs.MaxArgsBytes) may still have them in the trigger stream while the job waits or
	// runs, and in its dead letter once it failed for good.
	switch {
	case rec.Args != nil:
		v.Arguments, v.CanRerun = indent(rec.Args), true
	case !rec.Status.Final():
		if data, err := c.Trigger(ctx, rec.ID); err == nil {
			v.Arguments = indent(data)
		}
	case rec.Status == jobtype.Failed:
		if dl, err := c.DeadLetter(ctx, rec.ID); err == nil {
			v.Arguments = indent(dl.Data)
		}
	}
	if rec.Args == nil && rec.ArgsBytes == 0 && rec.ArgsSHA256 == jobs.ArgsHash(nil) {
		v.CanRerun = true // an empty body, run again as {}
	}
	if !v.CanRerun {
		v.NotKept = argsNotKept(rec)
	}
	d.render(w, "job", v)
}

func indent(raw []byte) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

// logEvent is one line of a job's log as the page's EventSource gets it.
type logEvent struct {
	Stream string `json:"stream"`
	Text   string `json:"text"`
}

// jobLog streams a job's log as Server-Sent Events, from its first line, and ends with an
// "end" event carrying the job's final status once it has ended and every line was sent.
func (d *Dashboard) jobLog(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c, err := d.client(r.Context())
	if err != nil {
		d.fail(w, r, err)
		return
	}
	rec, err := c.Jobs.Get(r.Context(), id)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	// A ResponseController finds the Flush of a writer that middleware (the host's auth) wrapped.
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		d.log.Warn("dashboard: cannot stream a job's log on this connection", zap.String("job", id), zap.Error(err))
		return
	}

	ctx := r.Context()
	lines := make(chan client.LogLine, 256)
	type end struct {
		rec *jobs.Record
		err error
	}
	done := make(chan end, 1)
	go func() {
		final, err := c.FollowJob(ctx, rec.Function, id, func(l client.LogLine) {
			select {
			case lines <- l:
			case <-ctx.Done():
			}
		})
		done <- end{final, err}
	}()
	send := func(event string, v any) {
		b, _ := json.Marshal(v)
		if event != "" {
			fmt.Fprintf(w, "event: %s\n", event)
		}
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	for {
		select {
		case l := <-lines:
			send("", logEvent{Stream: l.Stream, Text: l.Text})
			// Send what else is waiting before flushing, so a long log is not one write a line.
			for more := true; more; {
				select {
				case l := <-lines:
					send("", logEvent{Stream: l.Stream, Text: l.Text})
				default:
					more = false
				}
			}
			rc.Flush()
		case e := <-done:
			// FollowJob returns once fn had every line; whatever it queued is in lines.
			for len(lines) > 0 {
				l := <-lines
				send("", logEvent{Stream: l.Stream, Text: l.Text})
			}
			if e.err != nil {
				send("end", map[string]string{"error": e.err.Error()})
			} else {
				send("end", map[string]string{"status": string(e.rec.Status)})
			}
			rc.Flush()
			return
		}
	}
}

// cancelJob cancels a job as `host cancel` does, and records who asked for it.
func (d *Dashboard) cancelJob(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	got, err := c.CancelAs(ctx, id, "the dashboard ("+who(r)+")")
	if err != nil {
		d.log.Info("dashboard: cancel refused", zap.String("job", id), zap.String("by", who(r)), zap.Error(err))
		d.fail(w, r, err)
		return
	}
	d.log.Info("dashboard: job canceled", zap.String("job", id), zap.String("function", got.Function),
		zap.String("was", string(got.Was)), zap.String("by", who(r)))
	http.Redirect(w, r, "/jobs/"+id, http.StatusSeeOther)
}

func (d *Dashboard) decideJob(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	decision, comment := r.PostFormValue("decision"), r.PostFormValue("comment")
	if decision != "approve" && decision != "reject" {
		d.fail(w, r, fmt.Errorf("decision %q: it is approve or reject", decision))
		return
	}
	got, err := c.Decide(ctx, id, decision == "approve", "the dashboard ("+who(r)+")", comment)
	if err != nil {
		d.log.Info("dashboard: decision refused", zap.String("job", id), zap.String("by", who(r)), zap.Error(err))
		d.fail(w, r, err)
		return
	}
	d.log.Info("dashboard: approval decided", zap.String("job", id), zap.String("decision", got.Approval.Decision), zap.String("by", who(r)))
	http.Redirect(w, r, "/jobs/"+id, http.StatusSeeOther)
}
