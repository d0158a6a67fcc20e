package dashboard

import (
	"context"
	"errors"
	"net/http"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/schedule"
)

type schedulesView struct {
	session // who the page is shown to
	Entries []schedule.Entry
	Err     string
}

// schedulesPage lists the schedules as `host schedules` does: next and last tick, and pauses.
func (d *Dashboard) schedulesPage(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	v := &schedulesView{}
	var err error
	if v.Entries, err = c.Schedules(ctx); err != nil {
		v.Err = err.Error()
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
