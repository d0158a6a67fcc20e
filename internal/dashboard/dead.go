package dashboard

import (
	"context"
	"net/http"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
)

type deadView struct {
	session // who the page is shown to
	Letters []jobs.DeadLetter
	Err     string
}

func (d *Dashboard) deadPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := requestContext(r)
	defer cancel()
	v := &deadView{}
	c, err := d.client(ctx)
	if err == nil {
		v.Letters, err = c.DeadLetters(ctx, r.URL.Query().Get("function"))
	}
	if err != nil {
		v.Err = err.Error()
	}
	d.render(w, r, "dead", v)
}

// replayDead replays a dead letter as `host dead replay` does, under a new job id.
func (d *Dashboard) replayDead(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	id, newID := r.PathValue("id"), ids.New()
	if !d.mayRunEach(w, r, func() ([]string, error) { return deadFunction(ctx, c, id) }) {
		return
	}
	err := c.Replay(ctx, id, newID)
	d.audit(ctx, c, r, "dead.replay", id, "as job "+newID, err)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	d.log.Info("dashboard: dead letter replayed", zap.String("job", id), zap.String("as", newID), zap.String("by", who(r)))
	// Back to the list, where the letter names its replay: the new job has no record until a
	// host takes it.
	http.Redirect(w, r, "/dead", http.StatusSeeOther)
}

func (d *Dashboard) removeDead(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !d.mayRunEach(w, r, func() ([]string, error) { return deadFunction(ctx, c, id) }) {
		return
	}
	n, err := c.RemoveDeadLetter(ctx, id)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	d.log.Info("dashboard: dead letter removed", zap.String("job", id), zap.Int("letters", n), zap.String("by", who(r)))
	http.Redirect(w, r, "/dead", http.StatusSeeOther)
}
