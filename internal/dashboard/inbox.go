package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/webauth"
)

// inboxView is the approvals inbox: every step that waits for a decision, newest first.
type inboxView struct {
	session // who the page is shown to
	Waiting []inboxItem
	Decided *jobs.Record // the step just decided from here, to say what became of it
	Now     time.Time
	Err     string
}

type inboxItem struct {
	*jobs.Record
	Result string // indented JSON
	Args   string
	Staged []StagedView // the diff of each volume it staged
}

// Since is when the step began to wait: when its run ended.
func (i inboxItem) Since() time.Time {
	if i.Finished.IsZero() {
		return i.Started
	}
	return i.Finished
}

func (d *Dashboard) inboxPage(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	v := &inboxView{Now: time.Now()}
	recs, err := c.Approvals(ctx)
	if err != nil {
		v.Err = err.Error()
	}
	for _, rec := range recs {
		item := inboxItem{Record: rec, Staged: Staged(ctx, d.cfg.Volumes, rec)}
		if len(rec.Result) > 0 {
			item.Result = indent(rec.Result)
		}
		if len(rec.Args) > 0 {
			item.Args = indent(rec.Args)
		}
		v.Waiting = append(v.Waiting, item)
	}
	if id := r.URL.Query().Get("decided"); id != "" {
		if rec, err := c.Jobs.Get(ctx, id); err == nil && rec.Approval != nil && rec.Approval.Decision != "" {
			v.Decided = rec
		}
	}
	d.render(w, r, "inbox", v)
}

// decideInbox decides a step from the inbox and comes back to it, saying what was decided.
func (d *Dashboard) decideInbox(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	if rec, ok := d.decide(ctx, c, w, r); ok {
		http.Redirect(w, r, "/inbox?decided="+url.QueryEscape(rec.ID), http.StatusSeeOther)
	}
}

// decide approves or rejects the step r names with r's comment, as `host approve` does, and
// logs who did it; a refused decision is answered here, and ok is false.
func (d *Dashboard) decide(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) (rec *jobs.Record, ok bool) {
	id := r.PathValue("id")
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	decision, comment := r.PostFormValue("decision"), r.PostFormValue("comment")
	if decision != "approve" && decision != "reject" {
		d.serveError(w, r, http.StatusBadRequest, fmt.Sprintf("decision %q: it is approve or reject", decision))
		return nil, false
	}
	p := webauth.Principal(r)
	if !p.User {
		p.Name = "the dashboard (" + who(r) + ")" // the web token is nobody's: say which login
	}
	got, err := c.Decide(ctx, id, decision == "approve", p, comment)
	if err != nil {
		d.log.Info("dashboard: decision refused", zap.String("job", id), zap.String("by", who(r)), zap.Error(err))
		d.fail(w, r, err)
		return nil, false
	}
	d.log.Info("dashboard: approval decided", zap.String("job", id), zap.String("decision", got.Approval.Decision), zap.String("by", who(r)))
	return got, true
}
