package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/schedule"
)

type schedulesView struct {
	session // who the page is shown to
	Entries []schedule.Entry
	Named   []schedule.Named
	Err     string
	Done    string
	Form    *scheduleForm // the form as refused, or the schedule being edited
}

// schedulesPage lists the schedules as `host schedules` does: next and last tick, and pauses;
// ?edit=<name> fills the form with a named schedule.
func (d *Dashboard) schedulesPage(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	f := &scheduleForm{NamedSchedule: client.NamedSchedule{Args: "{}"}}
	if name := r.URL.Query().Get("edit"); name != "" {
		n, err := c.NamedSchedule(ctx, name)
		if err != nil {
			d.namedFailed(w, r, err)
			return
		}
		f = &scheduleForm{NamedSchedule: client.NamedSchedule{Name: n.Name, Function: n.Function, Schedule: n.Schedule, Args: string(n.Args)}, Edit: true}
	}
	d.renderSchedules(ctx, c, w, r, f, http.StatusOK)
}

func (d *Dashboard) renderSchedules(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request, f *scheduleForm, status int) {
	v := &schedulesView{Form: f, Done: r.URL.Query().Get("done")}
	var err error
	if v.Entries, err = c.Schedules(ctx); err == nil {
		v.Named, err = c.NamedSchedules(ctx)
	}
	if err != nil {
		v.Err = err.Error()
	}
	if status != http.StatusOK {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(status)
	}
	d.render(w, r, "schedules", v)
}

// pauseSchedule makes every host skip the function's ticks, as `host schedules pause` does.
func (d *Dashboard) pauseSchedule(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	fn := r.PathValue("function")
	if err := c.PauseSchedule(ctx, fn, "the dashboard ("+who(r)+")"); err != nil {
		d.scheduleFailed(w, r, err)
		return
	}
	d.log.Info("dashboard: schedule paused", zap.String("function", fn), zap.String("by", who(r)))
	http.Redirect(w, r, "/schedules", http.StatusSeeOther)
}

// resumeSchedule lets the function's ticks fire again from the next one.
func (d *Dashboard) resumeSchedule(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	fn := r.PathValue("function")
	was, err := c.ResumeSchedule(ctx, fn)
	if err != nil {
		d.scheduleFailed(w, r, err)
		return
	}
	d.log.Info("dashboard: schedule resumed", zap.String("function", fn), zap.Bool("was_paused", was), zap.String("by", who(r)))
	http.Redirect(w, r, "/schedules", http.StatusSeeOther)
}

// scheduleFailed answers 404 for a function without a schedule, as fail does otherwise.
func (d *Dashboard) scheduleFailed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, schedule.ErrNoSchedule) {
		d.serveError(w, r, http.StatusNotFound, err.Error())
		return
	}
	d.fail(w, r, err)
}

// sourceRoutes serves the forms that add, edit and remove webhook sources and named schedules
// (issue 42); each needs Develop (webauth.Routes).
func (d *Dashboard) sourceRoutes() {
	d.handleFunc("POST /webhooks", d.saveWebhook)
	d.handleFunc("POST /webhooks/{source}/remove", d.removeWebhook)
	d.handleFunc("GET /schedules/next", d.nextTicks)
	d.handleFunc("POST /schedules", d.withClient(d.saveSchedule))
	d.handleFunc("POST /schedules/named/{name}/remove", d.withClient(d.removeNamed))
	d.handleFunc("POST /schedules/named/{name}/pause", d.withClient(d.pauseNamed(true)))
	d.handleFunc("POST /schedules/named/{name}/resume", d.withClient(d.pauseNamed(false)))
}

// shownTicks is how many next ticks the schedule form shows.
const shownTicks = 5

// nextTicks answers the schedule form as it is typed: {"ticks": [...]} (RFC 3339, UTC) or
// {"error": "..."}, in the words `host schedules add` and a schedule: line are refused with.
func (d *Dashboard) nextTicks(w http.ResponseWriter, r *http.Request) {
	expr := strings.TrimSpace(r.URL.Query().Get("schedule"))
	out := map[string]any{}
	if err := annot.CheckSchedule(expr); err != nil {
		out["error"] = "schedule: " + err.Error()
	} else if ticks, err := schedule.NextN(expr, time.Now(), shownTicks); err != nil {
		out["error"] = "schedule: " + err.Error()
	} else {
		out["ticks"] = ticks
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// scheduleForm is the schedule form as given, kept when refused.
type scheduleForm struct {
	client.NamedSchedule
	Edit bool
	Err  string
}

// saveSchedule adds or edits a named schedule, checked as `host schedules add` checks it.
func (d *Dashboard) saveSchedule(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 128<<10)
	if err := r.ParseForm(); err != nil {
		d.serveError(w, r, http.StatusBadRequest, "the form cannot be read: "+err.Error())
		return
	}
	f := &scheduleForm{NamedSchedule: client.NamedSchedule{Name: strings.TrimSpace(r.PostForm.Get("name")), Function: strings.TrimSpace(r.PostForm.Get("function")),
		Schedule: r.PostForm.Get("schedule"), Args: r.PostForm.Get("args")}, Edit: r.PostForm.Get("edit") != ""}
	n, replaced, err := c.AddNamedSchedule(ctx, f.NamedSchedule, f.Edit, actor(r))
	d.audit(ctx, c, r, "schedule.add", f.Name, fmt.Sprintf("%s %q args %s", n.Function, n.Schedule, n.Args), err)
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, client.ErrBadSchedule) || errors.Is(err, schedule.ErrNoNamed) {
			code = http.StatusBadRequest
		}
		d.log.Info("dashboard: schedule refused", zap.String("schedule", f.Name), zap.Error(err), zap.String("by", who(r)))
		f.Err = err.Error()
		d.renderSchedules(ctx, c, w, r, f, code)
		return
	}
	d.log.Info("dashboard: schedule saved", zap.String("schedule", n.Name), zap.String("function", n.Function), zap.Bool("replaced", replaced), zap.String("by", who(r)))
	http.Redirect(w, r, "/schedules?done="+url.QueryEscape("schedule "+n.Name+" saved"), http.StatusSeeOther)
}

// removeNamed removes a named schedule from every host.
func (d *Dashboard) removeNamed(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	err := c.RemoveNamedSchedule(ctx, name)
	d.audit(ctx, c, r, "schedule.rm", name, "", err)
	if err != nil {
		d.namedFailed(w, r, err)
		return
	}
	d.log.Info("dashboard: schedule removed", zap.String("schedule", name), zap.String("by", who(r)))
	http.Redirect(w, r, "/schedules?done="+url.QueryEscape("schedule "+name+" removed"), http.StatusSeeOther)
}

// pauseNamed pauses or resumes a named schedule on every host.
func (d *Dashboard) pauseNamed(pause bool) func(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	act := "schedule.resume"
	if pause {
		act = "schedule.pause"
	}
	return func(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		changed, err := c.PauseNamedSchedule(ctx, name, pause, actor(r))
		d.audit(ctx, c, r, act, name, "", err)
		if err != nil {
			d.namedFailed(w, r, err)
			return
		}
		d.log.Info("dashboard: "+act, zap.String("schedule", name), zap.Bool("changed", changed), zap.String("by", who(r)))
		http.Redirect(w, r, "/schedules", http.StatusSeeOther)
	}
}

// namedFailed answers 404 for a named schedule that does not exist, as fail does otherwise.
func (d *Dashboard) namedFailed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, schedule.ErrNoNamed) {
		d.serveError(w, r, http.StatusNotFound, err.Error())
		return
	}
	d.fail(w, r, err)
}
