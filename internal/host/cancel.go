package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
)

// Canceling a job. A job is canceled where it is:
//
//   - waiting (its record queued, or retrying between attempts): `host cancel` writes the
//     record canceled over the revision it read, and the host that takes its trigger drops it
//     (repeated, claim): the message is terminated and nothing runs.
//   - running: the record says so only once the host running it has registered the job as
//     stoppable (run), so `host cancel` asks on agent.cancel.<job_id>; the host running it
//     stops it (stopJob: its context ends, the jail and every process in it are killed) and
//     answers; the others stay silent. The job ends canceled: terminated, not retried, no
//     volume written back, and its run slot takes the next message.
//
// Both writes of a waiting job's record are checked against the revision read, so a cancel and
// a host taking the job cannot both win: whichever writes second sees the other's record.

// claimTries bounds how often claim reads the record again after losing a race for it; each
// loss means someone else moved the job, which happens once or twice, not forever.
const claimTries = 5

// claim writes the job's record running, as a move from the version repeated read (none when
// it read nothing), and reports whether the job may run. When someone wrote the record
// meanwhile (`host cancel`, or a caller's queued record) it decides again from what they wrote,
// and returns the end that record gives. When the store cannot be written the job runs all the
// same, as it always has: the record is bookkeeping, and its final write claims it first.
func (h *Host) claim(j *job) (end, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	running := *j.rec
	running.Status = jobtype.Running
	for range claimTries {
		v, err := h.jobs.Move(ctx, &running, j.ver)
		if err == nil {
			j.rec, j.ver = &running, v
			return end{}, true
		}
		if st := (*jobs.StaleAttemptError)(nil); errors.As(err, &st) {
			return end{verdict: stale, stale: st, err: st}, false // a later delivery has claimed it
		}
		var moved *jobs.MoveError
		if !errors.As(err, &moved) {
			h.log.Warn("cannot write the job record; the job itself is unaffected", zap.String("job_id", j.rec.ID), zap.Error(err))
			h.m.settleErrors.WithLabelValues(j.s.fn.Name, "record").Inc()
			return end{}, true
		}
		if moved.Stored == nil {
			j.ver = jobs.Version{} // deleted meanwhile: none to move from
			continue
		}
		if e, done := h.verdictOf(j, moved.Stored, moved.At); done {
			return e, false
		}
	}
	h.log.Warn("the job record kept changing under this host; running the job", zap.String("job_id", j.rec.ID))
	return end{}, true
}

// stopJob stops a job running on this host on purpose, for cause; it ends canceled (see
// judge). It reports whether the job was running here.
func (h *Host) stopJob(id string, cause error) bool {
	cancel, ok := h.stops.Load(id)
	if ok {
		cancel.(context.CancelCauseFunc)(cause)
	}
	return ok
}

// subscribeCancel answers cancel requests for the jobs running here. Every host subscribes
// (no queue group): only the one running the job knows it.
func (h *Host) subscribeCancel() (*nats.Subscription, error) {
	sub, err := h.nc.Subscribe(bus.CancelPrefix+"*", func(m *nats.Msg) {
		id := strings.TrimPrefix(m.Subject, bus.CancelPrefix)
		// The requester names itself; it goes into the record and the log, so it is bounded.
		by := abbreviate(m.Header.Get(jobs.HeaderCanceledBy), 200)
		if by == "" {
			by = "a cancel request"
		}
		if !h.stopJob(id, fmt.Errorf("canceled by %s", by)) {
			return
		}
		h.log.Info("canceling job", zap.String("job_id", id), zap.String("by", by))
		body, _ := json.Marshal(jobs.CancelReply{JobID: id, Host: h.cfg.HostID})
		if err := m.Respond(body); err != nil {
			h.log.Warn("cannot answer a cancel request; the job is canceled all the same", zap.String("job_id", id), zap.Error(err))
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s*: %w", bus.CancelPrefix, err)
	}
	return sub, nil
}
