package dashboard

import (
	"context"
	"fmt"
	"html/template"
	"strings"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/review"
	"github.com/agenthost/host/internal/voldiff"
)

// StagedView is one volume a step waiting for approval staged (approve: ... stage), as a page
// shows it: which version becomes which, and the diff (voldiff's HTML, escaped and folded), or
// why there is none.
type StagedView struct {
	Volume  string
	Heading string
	Error   string
	Diff    template.HTML
}

// Staged diffs the volumes rec staged, while it waits for its decision; nil for any other
// record. The signed link's page shows the same (package web).
func Staged(ctx context.Context, vols *objstore.Volumes, rec *jobs.Record) []StagedView {
	if rec.Status != jobtype.Waiting || rec.Approval == nil || len(rec.Approval.Staged) == 0 {
		return nil
	}
	var d review.Differ
	if vols != nil {
		d = vols
	}
	var out []StagedView
	for _, vol := range review.Build(ctx, d, rec, voldiff.Options{}).Volumes {
		sv := StagedView{Volume: vol.Volume, Heading: vol.Heading(), Error: vol.Error}
		if vol.Diff != nil {
			h, err := vol.Diff.HTML()
			if err != nil {
				sv.Error = err.Error()
			}
			sv.Diff = h
		}
		out = append(out, sv)
	}
	return out
}

// stagedOnly is the "staged" template alone, for pages outside the dashboard's layout.
var stagedOnly = template.Must(template.ParseFS(templateFS, "templates/staged.html"))

// StagedHTML renders views as the dashboard's approval pages do, for the signed link's page.
func StagedHTML(views []StagedView) (template.HTML, error) {
	var b strings.Builder
	if err := stagedOnly.ExecuteTemplate(&b, "staged", views); err != nil {
		return "", fmt.Errorf("render the staged volumes: %w", err)
	}
	return template.HTML(b.String()), nil //nolint:gosec // html/template escaped every value
}
