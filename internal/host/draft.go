package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobtype"
)

// MaxDraftRuns is how many drafts a host process test-runs at a time: a test run is a person
// waiting at the editor, not a queue, so one more is refused at once rather than queued.
const MaxDraftRuns = 2

// ErrDraftBusy is why a test run was refused: MaxDraftRuns are running on this host.
var ErrDraftBusy = fmt.Errorf("this host is already test-running %d drafts: wait for one to end, then run again", MaxDraftRuns)

// draftSlots holds a slot per draft run under way in this process.
var draftSlots = make(chan struct{}, MaxDraftRuns)

// RunDraft runs fn, a draft loaded from a directory of its own (the dashboard's editor), once
// with payload, in the jail its annotations ask for, as a job of the host's runner, and returns
// how it ended; each output line goes to log as it comes. Nothing of the draft is on NATS: it
// is no job of the bus (no record, no agent.run message, no result subject), its next: and
// join: are not followed, and agent.call.<name> still runs what the host serves. Its snapshot
// is removed once it ends. ctx bounds the run (the person leaving the page stops it); starter
// is who ran it, the starter of the tool calls it makes.
func (h *Host) RunDraft(ctx context.Context, fn *functions.Function, payload []byte, starter string, log jobtype.LineFunc) (*jobtype.Outcome, error) {
	select {
	case draftSlots <- struct{}{}:
		defer func() { <-draftSlots }()
	default:
		return nil, ErrDraftBusy
	}
	if h.draining.Load() {
		return nil, errors.New("this host is shutting down: it test-runs no draft")
	}
	id := ids.New()
	// Each run snapshots into a directory of its own, so two runs of one draft never share
	// (and remove) one snapshot; the drafts directory lets the jail user through, not list.
	drafts := filepath.Join(h.cfg.DataDir, "drafts")
	if err := os.MkdirAll(drafts, 0o711); err != nil {
		return nil, fmt.Errorf("test-run draft %s: %w", fn.Name, err)
	}
	root := filepath.Join(drafts, id)
	defer os.RemoveAll(root)
	codeDir, err := fn.Snapshot(root, h.cfg.SnapshotGroup)
	if err != nil {
		return nil, fmt.Errorf("test-run draft %s: %w", fn.Name, err)
	}
	h.log.Info("test-running a draft", zap.String("function", fn.Name), zap.String("draft_run", id), zap.String("by", starter))
	// A draft's version is no pool's, so it runs in a jail of its own (cold), never a warm
	// or forked one of the served version.
	run := h.runner.Start(ctx, fn, codeDir, &jobtype.Job{ID: id, FlowID: id, Attempt: 1, Starter: starter, Payload: payload, Log: log})
	defer run.Destroy()
	if f, ok := h.runner.(forgetter); ok {
		defer f.Forget(codeDir) // a draft's snapshot is never run again: drop what the runner keeps for it
	}
	out := <-run.Wait(context.Background()) // the run's own context bounds it
	if out == nil {
		return nil, fmt.Errorf("test-run draft %s: the run ended without an outcome", fn.Name)
	}
	return out, nil
}

// ServesDeployments says whether the host serves the current deployment (serve --deployed)
// rather than a directory: where the editor's Deploy stores a draft.
func (h *Host) ServesDeployments() bool { return h.cfg.Deployed }

// CheckFunction refuses what the host refuses beyond loading (Config.Check, `host check`'s
// checks with the interpreters this host runs); nil when it has no check.
func (h *Host) CheckFunction(ctx context.Context, f *functions.Function) error {
	if h.cfg.Check == nil {
		return nil
	}
	return h.cfg.Check(ctx, f)
}

// forgetter is a Runner that keeps something per function version (*runner.Runner remembers
// the packages it found): a draft's version runs once, so what is kept for it is dropped.
type forgetter interface{ Forget(codeDir string) }
