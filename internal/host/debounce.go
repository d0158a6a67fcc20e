package host

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobtype"
)

// debounceLook bounds how long a waiting debounce: message stays away: it looks again at least
// this often, which keeps its key's entry from expiring under a quiet period of days (see
// flowctl.Debounce).
const debounceLook = 30 * time.Minute

// holdDebounce lets the job start only when it is the newest message of its debounce: key and
// its quiet period (counted from its publication) has passed with no newer one. A job that is
// not the newest waits until its own quiet period has passed, then ends superseded, naming the
// newest message of its key at that moment, which runs in its place (or, if a newer one still
// came, is superseded in turn, naming it: superseded_by always leads to the run).
//
// Newer is by stream sequence, so every host agrees whichever sees a message first; the newest
// is kept in agent_flow_control by compare-and-set. A held message is only handed back (never
// acked), so a host dying meanwhile leaves it to JetStream; two deliveries of the newest can
// both decide to start, and the claim of its record lets only one run.
func (h *Host) holdDebounce(j *job) (end, bool) {
	d := j.s.fn.Spec.Debounce
	if d == nil {
		return end{}, true
	}
	fn := j.s.fn
	key, err := fn.DebounceKey.Eval(j.msg.Data())
	if err != nil {
		h.waiters.done(j.rec.ID)
		return end{verdict: failed, err: jobtype.Terminal(err)}, false
	}
	meta, err := j.msg.Metadata()
	if err != nil {
		return end{verdict: failed, err: jobtype.Terminal(fmt.Errorf("debounce: the message has no stream sequence: %w", err))}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	newest, err := h.flow.Debounce(ctx, fn.Name, key, j.rec.ID, meta.Sequence.Stream, j.rec.Enqueued)
	if err != nil {
		h.log.Warn("cannot read the function's debounce: state; the job waits and looks again", zap.String("function", fn.Name), zap.String("job_id", j.rec.ID), zap.Error(err))
		return h.heldEnd(j, "debounce", fmt.Sprintf("waiting for debounce: the flow-control store did not answer (%v)", err)), false
	}
	now := time.Now()
	if newest.Job != j.rec.ID {
		if own := j.rec.Enqueued.Add(d.Wait); now.Before(own) {
			return h.debounceWait(j, key, own), false
		}
		h.waiters.done(j.rec.ID)
		return end{verdict: superseded, supersededBy: newest.Job, err: fmt.Errorf(
			"superseded by job %s, a newer message of its debounce: key (%s) that runs in its place with its arguments; this message never ran",
			newest.Job, debounceLabel(fn, key))}, false
	}
	if quiet := newest.At.Add(d.Wait); now.Before(quiet) {
		return h.debounceWait(j, key, quiet), false
	}
	return end{}, true
}

// debounceWait hands the job back until its quiet period has passed (at), looking again at
// least every debounceLook.
func (h *Host) debounceWait(j *job, key string, at time.Time) end {
	e := h.heldEnd(j, "debounce", fmt.Sprintf("waiting for debounce: %s, quiet until %s", debounceLabel(j.s.fn, key), at.UTC().Format("15:04:05.000")))
	if limit := time.Now().Add(debounceLook); limit.Before(at) {
		at = limit
	}
	e.due = at.Add(rand.N(flowPollMin))
	return e
}

// debounceLabel names a debounce's key in reasons: "key=a", or "one key" without a by.
func debounceLabel(fn *functions.Function, key string) string {
	if fn.DebounceKey == nil {
		return "one key"
	}
	return fmt.Sprintf("%s=%s", fn.DebounceKey.Label(), key)
}
