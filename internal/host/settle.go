package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/retry"
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
)

// outputs is what a verdict publishes on the job's behalf.
type outputs int

const (
	noOutputs     outputs = iota
	resultOutputs         // agent.result.<name> and every next: subject
	errorOutputs          // the dead letter, then agent.error.<name>
)

// settlement is what JetStream is told about the message.
type settlement int

const (
	ack      settlement = iota // done: not delivered again
	term                       // done for good although it did not succeed: not delivered again
	nakDelay                   // deliver again after the retry backoff
	nak                        // deliver again now (to another host)
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
}

// end is a verdict with what settling it needs.
type end struct {
	verdict    verdict
	result     []byte // succeeded: the result
	err        error  // why the job did not succeed
	stderrTail string
	prev       *jobs.Record // alreadyDone: the record of the run that counted; refused: the owner's; dropped: the canceled one
	// teardown is the run's (the run's jobtype.Handle.Destroy): the job may be settled before its
	// jail is gone, but its run slot is held until then.
	teardown func()
	// recordErr is why the job's record could not be written as its verdict says (see
	// record); the caller is then answered with it. minimal says a minimal record was written
	// in its place.
	recordErr error
	minimal   bool
	// superseded is the record someone else ended the job with while it ran (a cancel), which
	// the store kept over this verdict's; the caller is answered with it.
	superseded *jobs.Record
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

	subjects, err := h.publishOutputs(ctx, j, e, how.outputs)
	if err != nil {
		h.m.settleErrors.WithLabelValues(fn, "outputs").Inc()
		fields := []zap.Field{zap.String("function", fn), zap.String("job_id", j.rec.ID), zap.Error(err)}
		switch {
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
		e = h.record(j, e, how.status, subjects)
	}

	if how.reply {
		h.replyEnd(j, e)
	}

	j.stopKeepAlive()
	var delay time.Duration
	if how.settle == nakDelay {
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
	}
	if e.err != nil {
		fields = append(fields, zap.Error(e.err))
	}
	if e.recordErr != nil {
		fields = append(fields, zap.NamedError("record_error", e.recordErr))
	}
	h.log.Log(how.level, how.log, fields...)
}

// refusedByNATS reports whether err is NATS refusing a message itself (bigger than the
// server's max_payload, a stream's size or header limit, a bad subject): publishing the same
// message again gets the same answer. Anything else (a timeout, no connection, a stream that
// is not answering) may pass.
func refusedByNATS(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) {
		return true
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && api.Code >= 400 && api.Code < 500
}

// recordWait bounds the attempts at one record while NATS does not answer (paced by
// retry.Record): a caller waits on the record, so the minimal one follows soon.
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
	if e.err != nil {
		rec.Error = boundedError(e.err.Error())
	}
	rec.Outputs = subjects
	if status == jobtype.Succeeded {
		rec.ResultBytes = len(e.result)
		if len(e.result) <= jobs.MaxResultBytes {
			rec.Result = json.RawMessage(e.result)
		}
	}
	err := h.move(j, &rec)
	if err == nil {
		j.rec = &rec
		return e
	}
	fields := []zap.Field{zap.String("function", j.s.fn.Name), zap.String("job_id", rec.ID), zap.String("status", string(status)), zap.Error(err)}
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
	pace, conflicts := retry.Record.New(), 0
	for {
		v, err := h.jobs.Move(ctx, rec, j.ver)
		if err == nil {
			j.ver = v
			return nil
		}
		var moved *jobs.MoveError
		switch {
		case errors.As(err, &moved) && moved.Illegal == nil && conflicts < claimTries:
			conflicts++
			j.ver = moved.At
			continue
		case errors.Is(err, jobs.ErrConflict), errors.As(err, new(*jobtype.IllegalMoveError)), refusedByNATS(err), errors.Is(err, jobs.ErrEncode):
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pace.NextBackOff()):
		}
	}
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
		LogLastSeq: rec.LogLastSeq, LogTruncated: rec.LogTruncated, LogLost: rec.LogLost,
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
	default:
		return j.msg.Nak()
	}
}

// publishOutputs publishes what a verdict sends on the job's behalf and returns the subjects
// of the job's outputs.
func (h *Host) publishOutputs(ctx context.Context, j *job, e end, o outputs) ([]string, error) {
	fn := j.s.fn
	switch o {
	case resultOutputs:
		subjects := append([]string{bus.ResultSubject(fn.Name)}, fn.Spec.Next...)
		for i, subject := range subjects {
			m := h.outMsg(subject, e.result, j.rec)
			if i == 0 {
				m.Header.Set(bus.HeaderMsgID, h.ids.Derive(j.rec.ID, "result"))
			} else {
				// The next step's message id is fixed by this job and the subject, so a rerun of
				// this job cannot start the next step twice.
				m.Header.Set(bus.HeaderMsgID, h.ids.Next(j.rec.ID, subject))
				m.Header.Set(bus.HeaderParentJob, j.rec.ID)
			}
			if err := h.publish(ctx, m); err != nil {
				return nil, fmt.Errorf("publish on %s: %w", subject, err)
			}
		}
		return subjects, nil
	case errorOutputs:
		// The dead letter first: whoever sees the error event can find it at once.
		if err := h.deadLetter(ctx, j, e.err); err != nil {
			return nil, fmt.Errorf("keep the dead letter: %w", err)
		}
		m := h.outMsg(bus.ErrorSubject(fn.Name), errorBody(j.rec, e.err.Error(), e.stderrTail), j.rec)
		m.Header.Set(bus.HeaderMsgID, h.ids.Derive(j.rec.ID, "error"))
		if err := h.publish(ctx, m); err != nil {
			return nil, fmt.Errorf("publish the error event: %w", err)
		}
		return []string{m.Subject}, nil
	}
	return nil, nil
}

// replyEnd answers the caller of an agent.call with the job's end: its result, its error, or,
// for a job that already ran, what its record says. When the job's record could not be written
// the caller hears that, as an error.
func (h *Host) replyEnd(j *job, e end) {
	switch {
	case e.superseded != nil:
		rec := e.superseded
		h.reply(j, rec, errorBody(rec, fmt.Sprintf("job %s was %s meanwhile: %s", rec.ID, rec.Status, rec.Error), ""), string(jobtype.Failed))
	case e.recordErr != nil:
		msg := j.rec.Error // the minimal record's, which says everything
		if !e.minimal {
			// Not even the minimal record was written: the record says what it said before.
			msg = e.recordErr.Error() + "; `host job` shows the job as it was before it ended"
			if e.err != nil {
				msg += "; the job ended with: " + e.err.Error()
			}
		}
		h.reply(j, j.rec, errorBody(j.rec, msg, e.stderrTail), string(jobtype.Failed))
	case e.verdict == succeeded:
		h.reply(j, j.rec, e.result, string(jobtype.Succeeded))
	case e.verdict == alreadyDone && e.prev.Status == jobtype.Succeeded:
		if e.prev.Result != nil { // too big for the record: it is on agent.result.<name> only
			h.reply(j, e.prev, e.prev.Result, string(jobtype.Succeeded))
		}
	case e.verdict == alreadyDone:
		h.reply(j, e.prev, errorBody(e.prev, e.prev.Error, ""), string(jobtype.Failed))
	case e.verdict == failed:
		h.reply(j, j.rec, errorBody(j.rec, e.err.Error(), e.stderrTail), string(jobtype.Failed))
	default:
		h.reply(j, j.rec, errorBody(j.rec, e.err.Error(), ""), string(jobtype.Failed))
	}
}

// deadLetter keeps the original trigger of a job that gave up, with its headers and last error,
// so it can be inspected and replayed (`host dead`).
func (h *Host) deadLetter(ctx context.Context, j *job, cause error) error {
	d := jobs.DeadLetter{JobID: j.rec.ID, Function: j.s.fn.Name, Subject: j.msg.Subject(), Error: cause.Error(),
		Attempts: j.rec.Attempts, Data: j.msg.Data(), Header: j.msg.Headers()}
	_, err := h.js.PublishMsg(ctx, d.Msg(j.rec.FlowID, h.ids.Derive(j.rec.ID, "dead"), int(h.nc.MaxPayload())))
	return err
}

func errorBody(rec *jobs.Record, msg, stderrTail string) []byte {
	body, _ := json.Marshal(jobs.ErrorEvent{
		JobID: rec.ID, Function: rec.Function, FlowID: rec.FlowID, Error: boundedError(msg),
		Attempts: rec.Attempts, ExitCode: rec.ExitCode, StderrTail: stderrTail,
	})
	return body
}

// retryDelay is the wait before attempt+1 on the schedule of a job's retries (retry.JobRetry).
func retryDelay(attempt int) time.Duration {
	b := retry.JobRetry.New()
	d := b.NextBackOff()
	for range min(attempt, 20) - 1 { // past 20 doublings the cap holds anyway
		d = b.NextBackOff()
	}
	return d
}

// outMsg builds a message the host publishes on behalf of a job.
func (h *Host) outMsg(subject string, data []byte, rec *jobs.Record) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(bus.HeaderJobID, rec.ID)
	m.Header.Set(bus.HeaderFlowID, rec.FlowID)
	// Everything a job sends on counts as one more step of its flow: results and errors can
	// trigger functions too (on: agent.error.>), and a loop through them must stop as well.
	m.Header.Set(bus.HeaderHop, strconv.Itoa(rec.Hop+1))
	return m
}

// publish sends an output and waits until it is safe: through JetStream (stored, deduplicated
// by its message id) when a stream captures the subject, else as a core message followed by a
// flush, which confirms the server has it.
//
// While NATS is unreachable the output is held and retried with backoff until ctx ends, so a
// run that finishes during an outage still delivers once the server is back.
func (h *Host) publish(ctx context.Context, m *nats.Msg) error {
	b := retry.Publish.New()
	attempt := 0
	return backoff.Retry(func() error {
		attempt++
		err := h.publishOnce(ctx, m)
		if err == nil {
			return nil
		}
		if refusedByNATS(err) {
			if errors.Is(err, nats.ErrMaxPayload) {
				err = fmt.Errorf("%w: the message is %d bytes, over the server's max_payload of %d", err, len(m.Data), h.nc.MaxPayload())
			}
			return backoff.Permanent(err)
		}
		if attempt == 1 {
			h.log.Warn("output not confirmed yet; holding it and retrying", zap.String("subject", m.Subject), zap.Error(err))
		}
		return err
	}, backoff.WithContext(b, ctx))
}

func (h *Host) publishOnce(ctx context.Context, m *nats.Msg) error {
	if h.isCaptured(m.Subject) {
		_, err := h.js.PublishMsg(ctx, m)
		if !errors.Is(err, jetstream.ErrNoStreamResponse) {
			return err
		}
		// Nothing answered for the stream: treat it as a plain subject.
	}
	if err := h.nc.PublishMsg(m); err != nil {
		return err
	}
	return h.nc.FlushWithContext(ctx)
}

func (h *Host) isCaptured(subject string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.captured {
		if bus.SubjectMatches(p, subject) {
			return true
		}
	}
	return false
}

// reply answers the agent.call request that started the job, if there was one, as the job
// of rec.
func (h *Host) reply(j *job, rec *jobs.Record, body []byte, status string) {
	if j.replyTo == "" {
		return
	}
	m := h.outMsg(j.replyTo, body, rec)
	m.Header.Set(bus.HeaderJobStatus, status)
	err := h.nc.PublishMsg(m)
	if errors.Is(err, nats.ErrMaxPayload) {
		// The caller must hear something: that the answer is too big, and where it went.
		msg := fmt.Sprintf("the job's answer (%d bytes) is over the server's max_payload of %d bytes, so it cannot be a reply; a result is on %s",
			len(body), h.nc.MaxPayload(), bus.ResultSubject(j.s.fn.Name))
		m = h.outMsg(j.replyTo, errorBody(rec, msg, ""), rec)
		m.Header.Set(bus.HeaderJobStatus, string(jobtype.Failed))
		err = h.nc.PublishMsg(m)
	}
	if err != nil {
		h.log.Warn("cannot answer the caller; it times out waiting", zap.String("job_id", j.rec.ID), zap.Error(err))
		h.m.settleErrors.WithLabelValues(j.s.fn.Name, "reply").Inc()
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return truncateUTF8(s, n) + "…"
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
