package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/retry"
	"go.uber.org/zap"
)

// recordWait bounds the attempts at one record while NATS does not answer (paced by
// retry.Record): a caller waits on the record, so the minimal one follows soon, after a second
// such window.
const recordWait = 10 * time.Second

// record writes the job's new status as a move in the store, from the version of its record
// this host last read or wrote (see jobs.Store.Move). It returns e, with recordErr set when the
// record could not be written as the verdict says, or superseded when someone ended the job
// meanwhile (`host cancel` while its host was slow to answer): the store then refuses the move
// and keeps their record, which is what the caller hears.
//
// A record the store will not take (too big for the bucket's limit, say, or NATS not
// answering for a few seconds) is replaced by a minimal one: the job's identity, times and
// outputs, and an error saying what happened; a job that succeeded is then recorded failed,
// since its end could not be recorded. Without it the record would say running for ever, and
// `host invoke --wait`, `POST /run?wait` and `host cancel` would wait on a job that has ended.
func (h *Host) record(j *job, e end, status jobtype.Status, subjects []string) end {
	rec := *j.rec
	rec.Status = status
	if e.verdict == deferred {
		rec.NotBefore, rec.Started, rec.Deferrals = e.due, time.Time{}, rec.Deferrals+1
	}
	if e.verdict == held {
		rec.Held, rec.Started, rec.Deferrals = e.held, time.Time{}, rec.Deferrals+1
	}
	if e.verdict == superseded {
		rec.SupersededBy, rec.Held, rec.Started = e.supersededBy, "", time.Time{}
	}
	if e.err != nil {
		rec.Error = boundedError(e.err.Error())
	}
	rec.Outputs = subjects
	if status == jobtype.Succeeded || status == jobtype.Waiting {
		rec.ResultBytes = len(e.result)
		if len(e.result) <= jobs.MaxResultBytes {
			rec.Result = json.RawMessage(e.result)
		}
	}
	if status == jobtype.Waiting {
		// A decision routes the result by the arguments too, long after the trigger is gone.
		rec.Args, rec.Approval = json.RawMessage(j.msg.Data()), e.approval
		// Its run ends here; the decision that ends the step may come hours later, and sets
		// Finished then (decideStep): the run time must not count a person's wait.
		rec.RunEnded = rec.Finished
	}
	err := h.move(j, &rec)
	if err == nil {
		j.rec = &rec
		return e
	}
	fields := []zap.Field{zap.String("function", j.s.fn.Name), zap.String("job_id", rec.ID), zap.String("status", string(status)), zap.Error(err)}
	if st := (*jobs.StaleAttemptError)(nil); errors.As(err, &st) {
		h.m.settleErrors.WithLabelValues(j.s.fn.Name, "stale").Inc()
		e.stale = st
		return e
	}
	var moved *jobs.MoveError
	if errors.As(err, &moved) && moved.Illegal != nil && moved.Stored != nil {
		h.log.Warn("the job's record was ended by someone else meanwhile; the store keeps theirs", append(fields, zap.String("recorded", string(moved.Stored.Status)))...)
		h.m.settleErrors.WithLabelValues(j.s.fn.Name, "superseded").Inc()
		e.superseded = moved.Stored
		return e
	}
	if errors.As(err, new(*jobtype.IllegalMoveError)) {
		h.log.Error("illegal job transition refused: this is a bug in the host", fields...)
		h.m.settleErrors.WithLabelValues(j.s.fn.Name, "transition").Inc()
		return e
	}
	if !refusedByNATS(err) && !errors.Is(err, jobs.ErrEncode) {
		// NATS did not answer for recordWait (a partition, a node's restart): the record is
		// fine, and a store that answers again takes it. A second window before the minimal
		// record, which would record a success as failed for want of an answer.
		h.log.Warn("the job's record could not be written yet; trying once more", fields...)
		if err = h.move(j, &rec); err == nil {
			j.rec = &rec
			return e
		}
		if st := (*jobs.StaleAttemptError)(nil); errors.As(err, &st) {
			h.m.settleErrors.WithLabelValues(j.s.fn.Name, "stale").Inc()
			e.stale = st
			return e
		}
		fields[len(fields)-1] = zap.Error(err)
	}
	h.m.settleErrors.WithLabelValues(j.s.fn.Name, "record").Inc()
	e.recordErr = fmt.Errorf("the job's record could not be written: %w", err)
	small := minimalRecord(&rec, e.err, e.recordErr)
	if err2 := h.move(j, small); err2 != nil {
		h.log.Error("cannot write the job's record, nor a minimal one in its place; its record says what it said before the job ended",
			append(fields, zap.NamedError("minimal", err2))...)
		return e
	}
	h.log.Error("cannot write the job's record; a minimal record says so in its place", append(fields, zap.String("recorded", string(small.Status)))...)
	j.rec, e.minimal = small, true
	return e
}

// move writes rec over the job's record, from the version this host last saw, and keeps the
// version it wrote. A job that ran although its claim was never written (the store did not
// answer then) is claimed first, so that its record goes the legal way. While NATS does not
// answer it tries again for up to recordWait; a record written meanwhile by a writer that
// leaves the move legal (another attempt's claim, after this host was slow) is written over,
// from what that writer wrote. Anything else the store refuses is returned.
func (h *Host) move(j *job, rec *jobs.Record) error {
	ctx, cancel := context.WithTimeout(context.Background(), recordWait)
	defer cancel()
	from := j.ver.Status()
	if from.To(rec.Status) != nil && from.To(jobtype.Running) == nil && jobtype.Running.To(rec.Status) == nil {
		running := *rec
		running.Status = jobtype.Running
		if err := h.moveOnce(ctx, j, &running); err != nil {
			return err
		}
	}
	return h.moveOnce(ctx, j, rec)
}

func (h *Host) moveOnce(ctx context.Context, j *job, rec *jobs.Record) error {
	conflicts := 0
	var last error
	_, err := retry.Do(ctx, retry.Record, func() (struct{}, error) {
		for {
			write := h.jobs.Move
			if j.ver.Status() == rec.Status && j.ver.Status().To(rec.Status) != nil {
				write = h.jobs.Amend // a record that stays where it is (queued, deferred again)
			}
			v, err := write(ctx, rec, j.ver)
			if last = err; err == nil {
				j.ver = v
				return struct{}{}, nil
			}
			var moved *jobs.MoveError
			switch {
			case errors.As(err, &moved) && moved.Illegal == nil && moved.Stale == nil && conflicts < claimTries:
				conflicts++
				j.ver = moved.At
				continue // at once, from where the record is now
			case errors.Is(err, jobs.ErrConflict), errors.As(err, new(*jobtype.IllegalMoveError)), errors.As(err, new(*jobs.StaleAttemptError)),
				refusedByNATS(err), errors.Is(err, jobs.ErrEncode):
				return struct{}{}, retry.Permanent(err)
			}
			return struct{}{}, err
		}
	})
	if err != nil && last != nil {
		err = last // the store's answer, not the context's, which says less
	}
	return err
}

// minimalRecord is what is written in place of rec when the store refused it: small enough for
// any store that takes records at all, final when rec was (a success that could not be
// recorded is recorded failed), and saying why.
func minimalRecord(rec *jobs.Record, jobErr, recordErr error) *jobs.Record {
	status := rec.Status
	why := recordErr.Error()
	switch status {
	case jobtype.Succeeded:
		status = jobtype.Failed
		why = "the job succeeded and its outputs were published, but " + why
	case jobtype.Failed, jobtype.Canceled, jobtype.Retrying:
		// The record's failure first: the job's own error may be long, and is cut.
		if jobErr != nil {
			why += "; the job had " + string(status) + ": " + jobErr.Error()
		}
	}
	return &jobs.Record{
		ID: rec.ID, Function: rec.Function, FlowID: rec.FlowID, ParentJob: rec.ParentJob, Subject: rec.Subject, Hop: rec.Hop,
		Status: status, Attempts: rec.Attempts, Host: rec.Host, Enqueued: rec.Enqueued, Started: rec.Started, Finished: rec.Finished,
		ExitCode: rec.ExitCode, Error: truncate(why, 1000), ResultBytes: rec.ResultBytes, Outputs: rec.Outputs, ReplayedFrom: rec.ReplayedFrom,
		Caller: rec.Caller, LogLastSeq: rec.LogLastSeq, LogTruncated: rec.LogTruncated, LogLost: rec.LogLost, Scheduled: rec.Scheduled,
		StartedBy: rec.StartedBy, Starter: rec.Starter,
	}
}

// maxErrorText bounds the error a record and an error event carry: a message for people, and
// a record or event that must fit in a NATS message whatever a run's error says.
const maxErrorText = 8 << 10

func boundedError(msg string) string {
	if len(msg) <= maxErrorText {
		return msg
	}
	return fmt.Sprintf("%s …[%d bytes cut from this error]", truncateUTF8(msg, maxErrorText), len(msg)-maxErrorText)
}
