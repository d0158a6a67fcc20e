package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/agenthost/host/internal/jailfs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/trace"
)

// mountedVolume is one volume checked out into the job directory.
type mountedVolume struct {
	use jobtype.Volume
	m   *objstore.Mounted
}

// mountVolumes checks the job's volumes out into its directory, in name order so that two jobs
// sharing volumes cannot each hold one lease while waiting for the other's.
func (r *Runner) mountVolumes(ctx context.Context, job *task, p *prepared, root *jailfs.Dir, names []string) error {
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(names[a], names[b]) })
	for _, i := range order {
		spec, name := job.Fn.Spec.Volumes[i], names[i]
		if err := r.makeParents(root, spec.Path, job.Fn.Spec.Sandbox); err != nil {
			return volumeErr(fmt.Sprintf("volume %s at %s", name, spec.Path), err)
		}
		start := time.Now()
		vctx, span := trace.Start(ctx, "volume checkout", oteltrace.WithAttributes(attribute.String("agent.volume", name)))
		m, err := r.cfg.Volumes.MountAt(vctx, name, root, spec.Path, job.ID)
		trace.EndErr(span, err)
		if err != nil {
			return volumeErr(fmt.Sprintf("volume %s at %s", name, spec.Path), err)
		}
		in := m.In()
		mv := &mountedVolume{m: m, use: jobtype.Volume{Name: name, Path: spec.Path, Version: m.Version(), Files: in.Files,
			FilesIn: in.FilesFetched, BytesIn: in.BytesFetched}}
		p.volumes = append(p.volumes, mv)
		how := fmt.Sprintf("fetched %d files, %d bytes", in.FilesFetched, in.BytesFetched)
		if in.Warm {
			how = "this host's copy from the last run"
		}
		job.say("volume %s (version %d, %d files) at %s: %s, in %s", name, m.Version(), in.Files, spec.Path, how,
			time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// makeParents creates the directories above a volume's mount point, owned by whoever runs the
// job, so that a volume at a nested path (".state/agent") can be mounted. A link on the way
// (planted by a warm jail's top-level code) fails with objstore.ErrCheckout.
func (r *Runner) makeParents(root *jailfs.Dir, rel string, jailed bool) error {
	parent := filepath.ToSlash(filepath.Dir(rel))
	err := root.MkdirAll(parent, 0o755, func(made string) error {
		if !jailed || os.Geteuid() != 0 {
			return nil // the jail runs as us, and already owns what we create
		}
		uid, gid := r.cfg.Jail.Owner()
		if err := root.Lchown(made, uid, gid); err != nil {
			return fmt.Errorf("hand %s to the jail user %d: %w", made, uid, err)
		}
		return nil
	})
	if errors.Is(err, jailfs.ErrLink) {
		return fmt.Errorf("create %s for a volume: %w: %w", parent, objstore.ErrCheckout, err)
	}
	if err != nil {
		return fmt.Errorf("create %s for a volume: %w", parent, err)
	}
	return nil
}

// commitVolumes stores what the run changed in its volumes: committed, or, for a function with
// approve: ... stage, staged for the decision (returned for the approval's record).
func (r *Runner) commitVolumes(ctx context.Context, job *task, p *prepared) ([]jobtype.StagedVolume, error) {
	if a := job.Fn.Spec.Approve; a != nil && a.Stage {
		return r.stageVolumes(ctx, job, p)
	}
	for _, v := range p.volumes {
		vctx, span := trace.Start(ctx, "volume commit", oteltrace.WithAttributes(attribute.String("agent.volume", v.use.Name)))
		res, err := v.m.Commit(vctx, job.ID)
		trace.EndErr(span, err)
		if err != nil {
			return nil, volumeErr("commit volume "+v.use.Name, err)
		}
		v.use.Committed = res.Version
		v.use.FilesOut, v.use.BytesOut = res.Stats.FilesUploaded, res.Stats.BytesUploaded
		if res.Changed {
			job.say("volume %s: committed version %d (%d files changed, %d uploaded, %d bytes)", v.use.Name, res.Version,
				res.FilesChanged, res.Stats.FilesUploaded, res.Stats.BytesUploaded)
		}
	}
	return nil, nil
}

// stageVolumes stages what the run changed in its volumes, each head left where it is until the
// approval's decision. A volume the run did not change stages nothing (and needs no decision).
// If one volume fails, those already staged are left to the host, which discards the staged
// versions of a step that does not end waiting; here they are returned with the error.
func (r *Runner) stageVolumes(ctx context.Context, job *task, p *prepared) ([]jobtype.StagedVolume, error) {
	var staged []jobtype.StagedVolume
	for _, v := range p.volumes {
		vctx, span := trace.Start(ctx, "volume stage", oteltrace.WithAttributes(attribute.String("agent.volume", v.use.Name)))
		res, err := v.m.Stage(vctx, job.ID, jobtype.MaxStagedPaths)
		trace.EndErr(span, err)
		if err != nil {
			return staged, volumeErr("stage volume "+v.use.Name, err)
		}
		v.use.FilesOut, v.use.BytesOut = res.Stats.FilesUploaded, res.Stats.BytesUploaded
		if !res.Staged {
			continue
		}
		v.use.Staged = res.Ref.Version
		staged = append(staged, jobtype.StagedVolume{Volume: res.Ref.Volume, Base: res.Ref.Base, Version: res.Ref.Version,
			Manifest: res.Ref.Manifest, Added: res.Added, Removed: res.Removed, Changed: res.Changed,
			NAdded: res.NAdded, NRemoved: res.NRemoved, NChanged: res.NChanged, Bytes: res.Bytes})
		job.say("volume %s: staged version %d for approval, the head stays at %d (%d added, %d removed, %d changed; %d uploaded, %d bytes)",
			v.use.Name, res.Ref.Version, res.Ref.Base, res.NAdded, res.NRemoved, res.NChanged, res.Stats.FilesUploaded, res.Stats.BytesUploaded)
	}
	return staged, nil
}

// volumeErr sorts volume failures: over a limit, or a job tree with a link on the volume's
// path, is the job's doing, and corrupt or hostile store content reads the same on every try
// (all terminal); anything else is the store's or
// the lease's, and the job is handed back for later.
func volumeErr(what string, err error) error {
	if errors.Is(err, objstore.ErrLimit) || errors.Is(err, objstore.ErrCorrupt) || errors.Is(err, objstore.ErrCheckout) {
		return terminal("%s: %w", what, err)
	}
	return &jobtype.UnavailableError{Err: fmt.Errorf("%s: %w", what, err)}
}
