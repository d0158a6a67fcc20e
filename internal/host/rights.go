package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/secrets"
)

// callerRights refuses a tool call made by a job (its lineage names a parent job and a tool
// depth) that passes a $secret: the parent's function does not declare. A call from
// inside a jail acts with its caller's rights, never its callee's: the callee's secrets: line
// says what it may receive from a caller entitled to it. The job's MCP endpoint refuses such
// a call before publishing it (package mcp); this is the same rule where the job runs, for a
// trigger that reached the stream some other way.
//
// A next: step is not such a call: its edge and what it passes are its flow's author's, who
// may hand a secret on as a reference (examples/flows/github-triage), as any caller may.
//
// Parent-Job-Id and Tool-Depth are written by whoever publishes, so they may be forged. A
// forged one can only refuse more: without the header the trigger is a plain caller's, which the function's own
// secrets: line governs as before. The rights themselves come from what the host holds: the
// parent's record (written by hosts) and its function's annotations as served here.
func (h *Host) callerRights(j *job) error {
	payload := j.msg.Data()
	if j.toolDepth == 0 || j.rec.ParentJob == "" || !bytes.Contains(payload, []byte(secrets.RefPrefix)) {
		return nil
	}
	var args map[string]any
	if json.Unmarshal(payload, &args) != nil {
		return nil // not an object: the runner refuses it, in its own words
	}
	refs := secrets.Refs(args)
	if len(refs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	parent, err := h.jobs.Get(ctx, j.rec.ParentJob)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return jobtype.Terminal(fmt.Errorf("secret %q refused: the trigger names job %s as the job that made it (Parent-Job-Id), which has no record, so its right to the secret cannot be checked; a call from a job may pass only the secrets its own function declares: %w",
			refs[0], j.rec.ParentJob, secrets.ErrUndeclared))
	case err != nil:
		return fmt.Errorf("read the record of job %s, which made this call, to check its right to the secrets it passes: %w; the job is retried", j.rec.ParentJob, err)
	}
	h.mu.Lock()
	s := h.served[parent.Function]
	h.mu.Unlock()
	if s == nil {
		return jobtype.Terminal(fmt.Errorf("secret %q refused: job %s, which made this call, is of function %q, which this host does not serve, so its right to the secret cannot be checked here; serve both functions from the same directory: %w",
			refs[0], parent.ID, parent.Function, secrets.ErrUndeclared))
	}
	for _, name := range refs {
		if !s.fn.Spec.DeclaresSecret(name) {
			return jobtype.Terminal(fmt.Errorf("secret %q refused: a call from a job acts with that job's rights, and function %q (job %s), which made this call, does not declare %q; add \"secrets: %s\" to %s's annotations if it should hold it: %w",
				name, parent.Function, parent.ID, name, name, parent.Function, secrets.ErrUndeclared))
		}
	}
	return nil
}
