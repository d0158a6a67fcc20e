package host

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobtype"
)

// Priority (priority:) across every host. JetStream hands a function's messages out in order,
// and a host asks for one only when a run slot is free, so a high-priority message behind many
// low ones would never be seen while they wait. A function with priority: therefore gets one
// more fetch loop on each host, the scout, which asks only while every run slot is taken: each
// message it gets is handed back (held, no run slot) after marking its priority level as
// waiting in agent_flow_control (flowctl.Priority: per function, per level, a mark that lapses
// 5 s after its last renewal). A message about to start on a run slot looks at the marks: with
// a higher level marked it is handed back too (`waiting for priority: 1, a 9 waits`), marking
// its own, so when a slot frees only messages of the highest waiting level start. A message
// held by limit: marks its level as well. Lapsing marks bound what a dead host's marks cost.

// scoutIdle is how often the scout looks whether every run slot is taken.
const scoutIdle = 50 * time.Millisecond

// scoutLoop is the scout's fetch loop (see above), until ctx ends.
func (h *Host) scoutLoop(ctx context.Context, s *served, slots int) {
	for ctx.Err() == nil {
		if s.busyCount() < slots || h.StoreRefusal() != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(scoutIdle):
			}
			continue
		}
		if err := h.fetchOne(ctx, s, true); err != nil && ctx.Err() == nil {
			h.log.Warn("the priority scout's fetch failed; it tries again", zap.String("function", s.fn.Name), zap.Error(err))
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// holdPriority lets the job start only when no higher priority level of its function waits;
// a job the scout fetched never starts (it marks its level and waits).
func (h *Host) holdPriority(j *job) (end, bool) {
	fn := j.s.fn
	if fn.Spec.Priority == nil {
		return end{}, true
	}
	p, err := functions.Priority(fn, j.msg.Data())
	if err != nil {
		h.waiters.done(j.rec.ID)
		return end{verdict: failed, err: jobtype.Terminal(err)}, false
	}
	j.priority = p
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	top, err := h.flow.Priority(ctx, fn.Name, j.rec.ID, p, j.scout)
	switch {
	case err != nil && j.scout:
		return h.heldEnd(j, "priority", fmt.Sprintf("waiting for a run slot (priority: %d)", p)), false
	case err != nil:
		// Order is a preference, not a bound: the job runs rather than wait on the store.
		h.log.Warn("cannot read the function's waiting priorities; the job starts", zap.String("function", fn.Name), zap.String("job_id", j.rec.ID), zap.Error(err))
	case top > p:
		return h.heldEnd(j, "priority", fmt.Sprintf("waiting for priority: %d, a %d waits", p, top)), false
	case j.scout:
		return h.heldEnd(j, "priority", fmt.Sprintf("waiting for a run slot (priority: %d)", p)), false
	}
	return end{}, true
}

// markPriority marks the job's level waiting when flow control other than priority (a limit:)
// holds it, so that a lower one does not take the room it waits for.
func (h *Host) markPriority(j *job, e end) {
	if j.s.fn.Spec.Priority == nil || e.verdict != held || j.priority == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.flow.Priority(ctx, j.s.fn.Name, j.rec.ID, j.priority, true); err != nil {
		h.log.Warn("cannot mark the waiting job's priority", zap.String("function", j.s.fn.Name), zap.String("job_id", j.rec.ID), zap.Error(err))
	}
}
