// Package review is what a person sees before deciding a step that waits for approval: who
// may decide it and until when, and, for a staged step (approve: ... stage), the diff of each
// volume's staged version against the version the step read. `host approvals show` asks a
// host for it over NATS (Server, Ask); the dashboard and the signed link's page build it in
// the host's process (Build).
package review

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/voldiff"
)

// Differ compares two versions of a volume: objstore.Volumes.
type Differ interface {
	DiffVersions(ctx context.Context, name string, base, version uint64, manifest string, o voldiff.Options) (voldiff.Diff, error)
}

// Volume is one staged volume and its diff, or why there is none.
type Volume struct {
	jobs.StagedVolume
	Diff  *voldiff.Diff `json:"diff,omitempty"`
	Error string        `json:"error,omitempty"`
}

// View is a step's approval as a person reviews it.
type View struct {
	Record  *jobs.Record `json:"record"`
	Volumes []Volume     `json:"volumes,omitempty"`
}

// Build diffs every staged volume of rec with d (nil: this host has no volume store). The
// bounds of o hold for all volumes together: the diff text and the paths listed are shared out
// in order, so a view stays small enough for one NATS message and one page.
func Build(ctx context.Context, d Differ, rec *jobs.Record, o voldiff.Options) View {
	v := View{Record: rec}
	if rec.Approval == nil {
		return v
	}
	text, files := withDefault(o.MaxTextBytes, voldiff.DefaultMaxTextBytes), withDefault(o.MaxFiles, voldiff.DefaultMaxFiles)
	for _, sv := range rec.Approval.Staged {
		vol := Volume{StagedVolume: sv}
		switch {
		case d == nil:
			vol.Error = "this host has no volume store, so it cannot read the staged version"
		case text <= 0 || files <= 0:
			vol.Error = "not diffed: the volumes before it used up the bounds of one view; see this volume with `host volumes files`"
		default:
			vo := o
			vo.MaxTextBytes, vo.MaxFiles = text, files
			diff, err := d.DiffVersions(ctx, sv.Volume, sv.Base, sv.Version, sv.Manifest, vo)
			if err != nil {
				vol.Error = err.Error()
				break
			}
			vol.Diff = &diff
			text -= diff.TextBytes
			files -= len(diff.Files)
			if diff.CutAt != "" || diff.Unlisted > 0 {
				text, files = 0, 0 // a cut is where the view's bound was reached
			}
		}
		v.Volumes = append(v.Volumes, vol)
	}
	return v
}

func withDefault(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}

// Deciders says who may decide rec's approval, as the hosts check it (internal/host/decide.go).
func Deciders(rec *jobs.Record) string {
	s := "a user with the role approver or above"
	if g := rec.Approval.Groups; len(g) > 0 {
		s += " in the group " + strings.Join(g, " or ")
	}
	s += ", the operator, or a signed link"
	if rec.Starter != "" {
		s += "; not " + rec.Starter + ", who started the flow"
	}
	return s
}

// WriteText writes v as `host approvals show` prints it.
func (v View) WriteText(w io.Writer) error {
	rec := v.Record
	var b strings.Builder
	fmt.Fprintf(&b, "job %s (%s), flow %s: %s\n", rec.ID, rec.Function, rec.FlowID, rec.Status)
	a := rec.Approval
	switch {
	case a == nil:
		b.WriteString("it has no approval: its function has no approve: line\n")
	case a.Decision != "":
		fmt.Fprintf(&b, "%s by %s at %s%s\n", a.Decision, a.By, a.At.UTC().Format(time.DateTime), said(a.Comment))
	case rec.Status == jobtype.Waiting:
		fmt.Fprintf(&b, "waits for a decision until %s UTC (in %s)\n", a.Expires.UTC().Format(time.DateTime), time.Until(a.Expires).Round(time.Second))
		fmt.Fprintf(&b, "who may decide: %s\n", Deciders(rec))
		fmt.Fprintf(&b, "decide: host approve %s   or   host approve --reject %s\n", rec.ID, rec.ID)
	default:
		fmt.Fprintf(&b, "no decision came before %s UTC\n", a.Expires.UTC().Format(time.DateTime))
	}
	if a != nil && a.Stage && len(a.Staged) == 0 {
		b.WriteString("staged: the step changed no volume\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	for _, vol := range v.Volumes {
		if _, err := io.WriteString(w, "\n"+vol.Heading()+"\n"); err != nil {
			return err
		}
		if vol.Error != "" {
			if _, err := fmt.Fprintf(w, "  no diff: %s\n", vol.Error); err != nil {
				return err
			}
			continue
		}
		if err := vol.Diff.WriteText(w, "  "); err != nil {
			return err
		}
	}
	return nil
}

// Heading is a staged volume's line: which version becomes which, and its size.
func (vol Volume) Heading() string {
	from := fmt.Sprintf("version %d", vol.Base)
	if vol.Base == 0 {
		from = "a new volume"
	}
	return fmt.Sprintf("volume %s: %s → staged version %d (%s in all, manifest %.12s)", vol.Volume, from, vol.Version, voldiff.Size(vol.Bytes), vol.Manifest)
}

func said(comment string) string {
	if comment == "" {
		return ""
	}
	return ": " + comment
}
