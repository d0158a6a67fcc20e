package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/objstore"
)

// StagedVolumes promotes and discards the staged volume versions of approve: ... stage steps.
// *objstore.Volumes is one.
type StagedVolumes interface {
	// Hold takes the leases of the named volumes for a decision, which then promotes
	// (objstore.Held.PromoteAll, all or none as far as a head that moved goes) or discards.
	Hold(ctx context.Context, names []string, holder string) (*objstore.Held, error)
	// Discard removes a staged version and collects its data, taking its volume's lease.
	Discard(ctx context.Context, ref objstore.StagedRef, holder string) error
	// AllStaged lists every staged version, with the job that staged it.
	AllStaged(ctx context.Context) ([]objstore.StagedEntry, error)
}

func stagedRef(s jobs.StagedVolume) objstore.StagedRef {
	return objstore.StagedRef{Volume: s.Volume, Base: s.Base, Version: s.Version, Manifest: s.Manifest}
}

// holdStaged takes the leases of the volumes a waiting step staged, for its decision.
func (h *Host) holdStaged(ctx context.Context, rec *jobs.Record) (*objstore.Held, error) {
	if h.cfg.Staged == nil {
		return nil, errors.New("the step staged volume changes, but this host has no volume store: decide it on a host that has one")
	}
	names := make([]string, len(rec.Approval.Staged))
	for i, s := range rec.Approval.Staged {
		names[i] = s.Volume
	}
	held, err := h.cfg.Staged.Hold(ctx, names, "decide:"+rec.ID)
	if err != nil {
		return nil, fmt.Errorf("take the staged volumes' leases for the decision: %w", err)
	}
	return held, nil
}

// promoteStaged makes an approved step's staged volume versions current, under the leases of
// held. A refusal (a head moved, the volume was removed) is terminal: the step fails saying
// why, and its next steps do not run; anything else (the store or NATS not answering) leaves
// the decision to be made again.
func (h *Host) promoteStaged(ctx context.Context, held *objstore.Held, staged []jobs.StagedVolume) error {
	if len(staged) == 0 {
		return nil
	}
	refs := make([]objstore.StagedRef, len(staged))
	for i, s := range staged {
		refs[i] = stagedRef(s)
	}
	err := held.PromoteAll(ctx, refs)
	if errors.Is(err, objstore.ErrStaleStage) {
		return jobtype.Terminal(fmt.Errorf("approved, but the staged volume changes cannot be made current, so the next steps do not run: %w", err))
	}
	if err != nil {
		return fmt.Errorf("promote the staged volume changes: %w", err)
	}
	return nil
}

// discardStaged removes staged volume versions no decision will promote, each with discard.
// Best effort: one left behind stays in the store (its entry keeps it from the collector) and
// is logged.
func (h *Host) discardStaged(ctx context.Context, job string, staged []jobs.StagedVolume, why string, discard func(context.Context, objstore.StagedRef) error) {
	for _, s := range staged {
		if err := discard(ctx, stagedRef(s)); err != nil {
			h.log.Warn("cannot discard a staged volume version; its data stays in the store", zap.String("job_id", job),
				zap.String("volume", s.Volume), zap.Uint64("version", s.Version), zap.String("why", why), zap.Error(err))
			continue
		}
		h.log.Info("discarded staged volume version", zap.String("job_id", job), zap.String("volume", s.Volume),
			zap.Uint64("version", s.Version), zap.String("why", why))
	}
}

// dropUnawaited discards what a run staged when its step does not end waiting for the decision
// (it failed, or its outputs did not go out and it runs again, staging anew): no decision will
// ever promote it.
func (h *Host) dropUnawaited(ctx context.Context, j *job, v verdict) {
	if v == awaiting || len(j.staged) == 0 || h.cfg.Staged == nil {
		return
	}
	h.discardStaged(ctx, j.rec.ID, j.staged, "the step did not end waiting for its approval", func(ctx context.Context, ref objstore.StagedRef) error {
		return h.cfg.Staged.Discard(ctx, ref, "discard:"+j.rec.ID)
	})
	j.staged = nil
}

// stagedSweepEvery is how often a host looks for staged versions no decision will come for.
const stagedSweepEvery = time.Hour

// sweepStaged discards, at start and then every stagedSweepEvery, the staged volume versions
// whose step will never be decided: a host that died between staging and recording its step as
// waiting leaves one, kept from the collector by its entry for ever. It is orphaned when its
// job has ended, waits with other staged versions (a later attempt's), or has no record any
// more; a job still queued, running or retrying may yet record it and is left alone.
func (h *Host) sweepStaged(ctx context.Context) {
	if h.cfg.Staged == nil {
		return
	}
	t := time.NewTicker(stagedSweepEvery)
	defer t.Stop()
	for {
		h.sweepStagedOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *Host) sweepStagedOnce(ctx context.Context) {
	all, err := h.cfg.Staged.AllStaged(ctx)
	if err != nil {
		h.log.Warn("cannot list the staged volume versions to sweep orphans; trying again later", zap.Error(err))
		return
	}
	for _, s := range all {
		rec, err := h.jobs.Get(ctx, s.JobID)
		switch {
		case errors.Is(err, jobs.ErrNotFound) && time.Since(s.Time) > 10*time.Minute:
		case err != nil:
			continue // unknown yet, or the store not answering: the next sweep looks again
		case rec.Status == jobtype.Waiting:
			live := rec.Approval != nil && slices.ContainsFunc(rec.Approval.Staged, func(v jobs.StagedVolume) bool {
				return v.Volume == s.Ref.Volume && v.Manifest == s.Ref.Manifest && v.Version == s.Ref.Version
			})
			if live {
				continue
			}
		case !rec.Status.Final():
			continue
		}
		if err := h.cfg.Staged.Discard(ctx, s.Ref, "sweep:"+s.JobID); err != nil {
			h.log.Warn("cannot discard an orphaned staged volume version", zap.String("job_id", s.JobID), zap.String("volume", s.Ref.Volume), zap.Error(err))
			continue
		}
		h.log.Info("discarded an orphaned staged volume version: no decision will come for it", zap.String("job_id", s.JobID),
			zap.String("volume", s.Ref.Volume), zap.Uint64("version", s.Ref.Version))
	}
}
