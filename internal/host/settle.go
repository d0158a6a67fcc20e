package host

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/retry"
	"github.com/agenthost/host/internal/route"
)

// verdict is how one delivery of a trigger ends. Every verdict is settled by the same steps,
// in the same order (see settle); endings says what each step does for each verdict.
type verdict int

const (
	succeeded   verdict = iota // ran, and its outputs are out
	failed                     // failed for good: dead letter, error event, message terminated
	retrying                   // failed an attempt that may succeed later: handed back with a backoff delay
	handedBack                 // still running at the drain deadline: handed back at once, for another host
	runaway                    // a flow past --max-hops (after its first refused step): stopped without running
	alreadyDone                // its id names a job of this function that has ended: answered from the record
	refused                    // its id names another function's job, or one with other arguments: refused, nothing written
	canceled                   // stopped on purpose while it ran: terminated, not retried
	dropped                    // canceled while it waited (its record says so): terminated without running
	deferred                   // came up before its function's delay passed: handed back until it has, unrun
	gathered                   // gathered into its function's join (or its join's timeout, done): acked, nothing run
	waiting                    // a join's timeout not due, or its store not answering: handed back until due, unrecorded
	awaiting                   // succeeded, with approve:: its result out, its next steps wait for a decision
	decided                    // a decision on a waiting step (or its timer), settled and answered: acked
	stale                      // a later attempt of the job holds its record: the store refused this one's, the message is left to that attempt
	held                       // over its function's limit: or rate:, or in its debounce: quiet period: handed back to look again, unrun, not an attempt, its record saying why
	superseded                 // a newer message of its debounce: key runs in its place: acked unrun, its record naming that job
)

// outputs is what a verdict publishes on the job's behalf.
type outputs int

const (
	noOutputs       outputs = iota
	resultOutputs           // agent.result.<name> and every next: subject
	errorOutputs            // the dead letter, then agent.error.<name>
	approvalOutputs         // agent.result.<name>, the approval's timer, agent.approval.<name>
)

// settlement is what JetStream is told about the message.
type settlement int

const (
	ack      settlement = iota // done: not delivered again
	term                       // done for good although it did not succeed: not delivered again
	nakDelay                   // deliver again after the retry backoff
	nak                        // deliver again now (to another host)
	leave                      // nothing: the message belongs to a later delivery (a stale attempt's)
)

// ending is what settling one verdict does, step by step.
type ending struct {
	status  jobtype.Status // the record's new status; "" writes no record
	outputs outputs
	reply   bool // whether the caller of an agent.call hears now
	settle  settlement
	metric  string // the outcome label of host_runs_total
	level   zapcore.Level
	log     string
}

// endings is every end state of a job, in one place.
var endings = [...]ending{
	succeeded:   {jobtype.Succeeded, resultOutputs, true, ack, "succeeded", zapcore.InfoLevel, "job succeeded"},
	failed:      {jobtype.Failed, errorOutputs, true, term, "failed", zapcore.WarnLevel, "job failed"},
	retrying:    {jobtype.Retrying, noOutputs, false, nakDelay, "retried", zapcore.WarnLevel, "job failed; retrying"},
	handedBack:  {jobtype.Retrying, noOutputs, false, nak, "handed_back", zapcore.WarnLevel, "job handed back at the drain deadline"},
	runaway:     {jobtype.Failed, noOutputs, true, term, "failed", zapcore.WarnLevel, "runaway flow stopped"},
	alreadyDone: {"", noOutputs, true, ack, "repeat_skipped", zapcore.InfoLevel, "trigger of a job that already ran; not running it again"},
	refused:     {"", noOutputs, true, term, "refused", zapcore.WarnLevel, "trigger refused: its message id names another function's job, or a job sent with other arguments"},
	canceled:    {jobtype.Canceled, noOutputs, true, term, "canceled", zapcore.WarnLevel, "job canceled"},
	dropped:     {"", noOutputs, true, term, "canceled", zapcore.InfoLevel, "canceled job dropped before it ran"},
	deferred:    {jobtype.Queued, noOutputs, false, nakDelay, "deferred", zapcore.DebugLevel, "job deferred until its function's delay has passed"},
	gathered:    {"", noOutputs, false, ack, "gathered", zapcore.DebugLevel, "message gathered into its join"},
	waiting:     {"", noOutputs, false, nakDelay, "waiting", zapcore.DebugLevel, "message handed back until due"},
	awaiting:    {jobtype.Waiting, approvalOutputs, true, ack, "awaiting_approval", zapcore.InfoLevel, "job succeeded; its next steps wait for a decision"},
	decided:     {"", noOutputs, false, ack, "decided", zapcore.DebugLevel, "approval decision settled"},
	stale:       {"", noOutputs, false, leave, "stale", zapcore.WarnLevel, "a later attempt of the job holds its record; this attempt's end is not the job's, and the message is left to it"},
	held:        {jobtype.Queued, noOutputs, false, nakDelay, "flow_waiting", zapcore.DebugLevel, "job waits for its function's flow control"},
	superseded:  {jobtype.Superseded, noOutputs, true, ack, "superseded", zapcore.InfoLevel, "job superseded by a newer message of its debounce: key"},
}

// end is a verdict with what settling it needs.
type end struct {
	verdict    verdict
	result     []byte          // succeeded: the result
	routes     []route.Message // succeeded: the next: messages the result goes to
	err        error           // why the job did not succeed
	stderrTail string
	prev       *jobs.Record // alreadyDone: the record of the run that counted; refused: the owner's; dropped: the canceled one
	due        time.Time    // deferred, waiting, held: when it may run, or look again
	// held is why a held job waits (its record's Held).
	held string
	// supersededBy is the job that runs in a superseded one's place (its record's SupersededBy).
	supersededBy string
	// teardown is the run's (the run's jobtype.Handle.Destroy): the job may be settled before its
	// jail is gone, but its run slot is held until then.
	teardown func()
	// recordErr is why the job's record could not be written as its verdict says (see
	// record); the caller is then answered with it. minimal says a minimal record was written
	// in its place.
	recordErr error
	minimal   bool
	// approval is what an awaiting job's record keeps of its approval (see publishApproval).
	approval *jobs.Approval
	// superseded is the record someone else ended the job with while it ran (a cancel), which
	// the store kept over this verdict's; the caller is answered with it.
	superseded *jobs.Record
	// stale is the store's refusal of this attempt's record: a later attempt holds it (see
	// jobs.StaleAttemptError). The verdict is then stale.
	stale *jobs.StaleAttemptError
}

// outputWait bounds how long a finished job holds its outputs while NATS is unreachable; past
// it the job is left for redelivery, and its rerun's outputs deduplicate against anything that
// did get through.
const outputWait = 2 * time.Minute

// settle ends one delivery, whatever its verdict, by the same steps in the same order:
//
//  1. outputs: the result and next: steps, or the dead letter and error event. If NATS does not
//     take them (it is unreachable) the verdict becomes retrying: a job whose outputs are not
//     out has not ended, and its rerun's outputs deduplicate against whatever did get through.
//     If NATS refuses them (refusedByNATS: too big, or a stream's limit), it would refuse them
//     again: a succeeded job becomes failed, terminally, and a failed one is recorded and
//     answered without them.
//  2. record: the job's new status, a move the store checks against the record it holds (see
//     the package doc): a job canceled meanwhile stays canceled. A record the store cannot take
//     is replaced by a minimal one that says why (see record).
//  3. reply: the caller of an agent.call hears the job's end, as its record tells it; after the
//     record, so that a caller is told when the record could not be written.
//  4. the message: ack, term or nak. Last, so that a host dying before it leaves the job to run
//     again rather than lost.
//  5. metric and log.
//
// No step's failure is dropped: each is logged with the job and counted in
// host_settle_errors_total{step}.
func (h *Host) settle(j *job, e end) {
	how := endings[e.verdict]
	fn := j.s.fn.Name
	if j.rec.Finished.IsZero() {
		j.rec.Finished = time.Now()
	}
	ctx, cancel := context.WithTimeout(context.Background(), outputWait)
	defer cancel()

	stepped := h.step(j, "outputs")
	subjects, err := h.publishOutputs(ctx, j, &e, how.outputs)
	stepped()
	if err != nil {
		h.m.settleErrors.WithLabelValues(fn, "outputs").Inc()
		fields := []zap.Field{zap.String("function", fn), zap.String("job_id", j.rec.ID), zap.Error(err)}
		switch {
		case jobtype.IsTerminal(err) && e.verdict == succeeded:
			// A limit on its next steps (budget.go): the same result is refused again.
			h.log.Error("the job's next steps pass a limit; the job fails for good", fields...)
			h.settle(j, end{verdict: failed, err: err, stderrTail: e.stderrTail, teardown: e.teardown})
			return
		case !refusedByNATS(err):
			h.log.Error("cannot publish the job's outputs; handing the job back to run again", fields...)
			h.settle(j, end{verdict: retrying, err: fmt.Errorf("publishing the job's outputs failed: %w", err), teardown: e.teardown})
			return
		case e.verdict == succeeded:
			// Running it again would repeat its side effects only to be refused again (a result
			// grown past max_payload was retried 7 times under retries: 0).
			h.log.Error("NATS refused the job's outputs; the job fails for good", fields...)
			h.settle(j, end{verdict: failed, err: &jobtype.TerminalError{Err: fmt.Errorf("the job's outputs could not be published: %w", err)},
				stderrTail: e.stderrTail, teardown: e.teardown})
			return
		default:
			h.log.Error("NATS refused the failed job's dead letter or error event; recording the failure without them", fields...)
			e.err = fmt.Errorf("%w (its dead letter or error event could not be published: %v)", e.err, err)
		}
	}

	if how.status != "" {
		status := how.status
		if e.verdict == held {
			status = heldStatus(j.ver.Status())
		}
		stepped := h.step(j, "record")
		e = h.record(j, e, status, subjects)
		stepped()
		if e.stale != nil {
			// Fenced (as Temporal rejects a stale attempt's completion): the record, reply and message
			// are the later attempt's; outputs already out stand (their ids derive from the job id).
			e.verdict, how = stale, endings[stale]
		}
	}
	h.dropUnawaited(ctx, j, e.verdict)

	if how.reply {
		h.replyEnd(j, e)
	}

	j.stopKeepAlive()
	var delay time.Duration
	switch {
	case e.verdict == deferred || e.verdict == waiting || e.verdict == held:
		delay = time.Until(e.due)
	case how.settle == nakDelay:
		delay = retryDelay(j.rec.Attempts)
	}
	if err := h.settleMsg(ctx, j, e, how.settle, delay); err != nil {
		h.log.Warn("cannot settle the message; JetStream delivers it again after the ack wait, and its outputs deduplicate",
			zap.String("function", fn), zap.String("job_id", j.rec.ID), zap.Error(err))
		h.m.settleErrors.WithLabelValues(fn, "message").Inc()
	}

	h.m.runs.WithLabelValues(fn, how.metric).Inc()
	fields := []zap.Field{zap.String("function", fn), zap.String("job_id", j.rec.ID), zap.String("flow_id", j.rec.FlowID),
		zap.Int("attempt", j.rec.Attempts)}
	switch e.verdict {
	case succeeded:
		fields = append(fields, zap.Duration("run", j.rec.RunTime()))
	case failed:
		fields = append(fields, zap.Bool("terminal", jobtype.IsTerminal(e.err)))
	case retrying:
		fields = append(fields, zap.Int("retries", j.s.fn.Spec.Retries), zap.Duration("in", delay))
	case runaway:
		fields = append(fields, zap.Int("hop", j.rec.Hop))
	case alreadyDone:
		fields = append(fields, zap.String("status", string(e.prev.Status)))
	case refused:
		fields = append(fields, zap.String("owner", e.prev.Function))
	case stale:
		fields = append(fields, zap.Int("current_attempt", e.stale.Current))
	}
	if e.err != nil {
		fields = append(fields, zap.Error(e.err))
	}
	if e.recordErr != nil {
		fields = append(fields, zap.NamedError("record_error", e.recordErr))
	}
	h.log.Log(how.level, how.log, fields...)
}

// settleMsg tells JetStream what became of the message.
func (h *Host) settleMsg(ctx context.Context, j *job, e end, s settlement, delay time.Duration) error {
	switch s {
	case ack:
		// DoubleAck: a success must not be run again for want of a lost ack.
		return j.msg.DoubleAck(ctx)
	case term:
		reason := "failed"
		if e.err != nil {
			reason = truncate(e.err.Error(), 200)
		}
		return j.msg.TermWithReason(reason)
	case nakDelay:
		return j.msg.NakWithDelay(delay)
	case leave:
		// An ack or a nak of this stale delivery would settle the message under the later
		// attempt that holds it (an ack: gone, its record left retrying for good).
		return nil
	default:
		return j.msg.Nak()
	}
}

// retryDelay is the wait before attempt+1 on the schedule of a job's retries (retry.JobRetry).
func retryDelay(attempt int) time.Duration {
	return retry.JobRetry.Wait(attempt)
}
