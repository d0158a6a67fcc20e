package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/retry"
	"github.com/agenthost/host/internal/route"
	"github.com/agenthost/host/internal/trace"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// publishOutputs publishes what a verdict sends on the job's behalf and returns the subjects
// of the job's outputs.
func (h *Host) publishOutputs(ctx context.Context, j *job, e *end, o outputs) ([]string, error) {
	fn := j.s.fn
	switch o {
	case resultOutputs:
		// Before anything goes out: a step refused its next steps publishes no result either.
		if err := h.reserve(ctx, j.rec, e.routes); err != nil {
			return nil, err
		}
		result := h.outMsg(bus.ResultSubject(fn.Name), e.result, j.rec)
		result.Header.Set(bus.HeaderMsgID, h.ids.Derive(j.rec.ID, "result"))
		h.vouchStep(result, j.rec)
		if err := h.publish(ctx, result); err != nil {
			return nil, fmt.Errorf("publish on %s: %w", result.Subject, err)
		}
		subjects, err := h.publishRoutes(ctx, j.rec, e.routes, j.msg.Headers())
		if err != nil {
			return nil, err
		}
		return append([]string{result.Subject}, subjects...), nil
	case approvalOutputs:
		a, subjects, err := h.publishApproval(ctx, j, *e)
		e.approval = a
		return subjects, err
	case errorOutputs:
		// The dead letter first: whoever sees the error event can find it at once.
		if err := h.deadLetter(ctx, j, e.err); err != nil {
			return nil, fmt.Errorf("keep the dead letter: %w", err)
		}
		m := h.outMsg(bus.ErrorSubject(fn.Name), errorBody(j.rec, e.err.Error(), e.stderrTail), j.rec)
		m.Header.Set(bus.HeaderMsgID, h.ids.Derive(j.rec.ID, "error"))
		h.vouchStep(m, j.rec)
		if err := h.publish(ctx, m); err != nil {
			return nil, fmt.Errorf("publish the error event: %w", err)
		}
		return []string{m.Subject}, nil
	}
	return nil, nil
}

// publishRoutes publishes the next steps of rec's job and returns their subjects, each once.
// trigger is the headers of the job's trigger, whose item of a map stays one as it goes on;
// nil when it is not at hand (a decided approval).
func (h *Host) publishRoutes(ctx context.Context, rec *jobs.Record, routes []route.Message, trigger nats.Header) ([]string, error) {
	var subjects []string
	msgs := make([]*nats.Msg, 0, len(routes))
	for _, next := range routes {
		m := h.outMsg(next.Subject, next.Data, rec)
		m.Header.Set(bus.HeaderParentJob, rec.ID)
		// The next step's message id is fixed by this job and the edge, so a rerun of this
		// job cannot start the next step twice.
		if next.Count > 0 {
			m.Header.Set(bus.HeaderMsgID, h.ids.Item(rec.ID, next.Subject, next.Index))
			m.Header.Set(bus.HeaderItem, strconv.Itoa(next.Index))
			m.Header.Set(bus.HeaderItems, strconv.Itoa(next.Count))
		} else {
			m.Header.Set(bus.HeaderMsgID, h.ids.Next(rec.ID, next.Subject))
			// An item of a map stays one as it goes on, so that a join knows how many to await.
			for _, k := range []string{bus.HeaderItem, bus.HeaderItems} {
				if v := trigger.Get(k); v != "" {
					m.Header.Set(k, v)
				}
			}
		}
		if rec.Approval != nil {
			// A gate's next steps carry its decision; only this signature makes them take it.
			m.Header.Set(bus.HeaderApprovalSig, h.ids.ApprovalNoteSig(rec.ID, m.Data))
		}
		h.vouchStep(m, rec)
		msgs = append(msgs, m)
		if !slices.Contains(subjects, next.Subject) {
			subjects = append(subjects, next.Subject)
		}
	}
	if err := h.publishAll(ctx, msgs); err != nil {
		return nil, err
	}
	return subjects, nil
}

// publishAll publishes msgs as publish does, each safe once it returns. Those JetStream stores
// go out at once, without waiting for each acknowledgement in turn (a map's thousand items
// would otherwise wait for a thousand disk syncs one after another); any the store did not
// acknowledge is published again the careful way, deduplicated by its message id.
func (h *Host) publishAll(ctx context.Context, msgs []*nats.Msg) error {
	type sent struct {
		m   *nats.Msg
		ack jetstream.PubAckFuture
	}
	var pending []sent
	for _, m := range msgs {
		if len(msgs) > 1 && h.isCaptured(m.Subject) {
			if f, err := h.js.PublishMsgAsync(m); err == nil {
				pending = append(pending, sent{m, f})
				continue
			}
		}
		if err := h.publish(ctx, m); err != nil {
			return fmt.Errorf("publish on %s: %w", m.Subject, err)
		}
	}
	// One attempt's wait for all the acknowledgements: one that is lost (its leader cut off)
	// is not waited for longer; the careful publish below goes to whichever leader answers.
	attempt, cancel := context.WithTimeout(ctx, publishAttempt)
	defer cancel()
	for _, p := range pending {
		select {
		case <-p.ack.Ok():
			continue
		case <-p.ack.Err():
		case <-attempt.Done():
		}
		if err := h.publish(ctx, p.m); err != nil {
			return fmt.Errorf("publish on %s: %w", p.m.Subject, err)
		}
	}
	return nil
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
	case e.verdict == awaiting:
		h.reply(j, j.rec, e.result, string(jobtype.Waiting))
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

// outMsg builds a message the host publishes on behalf of a job.
func (h *Host) outMsg(subject string, data []byte, rec *jobs.Record) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(bus.HeaderJobID, rec.ID)
	m.Header.Set(bus.HeaderFlowID, rec.FlowID)
	m.Header.Set(bus.HeaderFunction, rec.Function)
	setDeployment(m.Header, rec)
	// The job's span is the parent of whatever its message starts (tracing.go).
	trace.SetHeaders(m.Header, rec.Trace, rec.TraceState)
	// Everything a job sends on counts as one more step of its flow: results and errors can
	// trigger functions too (on: agent.error.>), and a loop through them must stop as well.
	m.Header.Set(bus.HeaderHop, strconv.Itoa(rec.Hop+1))
	return m
}

// publishAttempt bounds one attempt at an output. A publish whose acknowledgement is lost (the
// stream's leader cut off, or replaced, after the message left) is not answered at all: without
// a bound of its own, one attempt waited the whole outputWait (2 minutes) while a new leader
// would have taken it in seconds (TestPartitions, a site cut). Attempts publish the same message
// id, so one that did get through is not stored twice.
const publishAttempt = 5 * time.Second

// publish sends an output and waits until it is safe: through JetStream (stored, deduplicated
// by its message id) when a stream captures the subject, else as a core message followed by a
// flush, which confirms the server has it.
//
// While NATS is unreachable the output is held and retried with backoff until ctx ends, so a
// run that finishes during an outage still delivers once the server is back.
func (h *Host) publish(ctx context.Context, m *nats.Msg) error {
	attempt := 0
	_, err := retry.Do(ctx, retry.Publish, func() (struct{}, error) {
		attempt++
		actx, cancel := context.WithTimeout(ctx, publishAttempt)
		err := h.publishOnce(actx, m)
		cancel()
		if err == nil {
			return struct{}{}, nil
		}
		if refusedByNATS(err) {
			if errors.Is(err, nats.ErrMaxPayload) {
				err = fmt.Errorf("%w: the message is %d bytes, over the server's max_payload of %d", err, len(m.Data), h.nc.MaxPayload())
			}
			return struct{}{}, retry.Permanent(err)
		}
		if attempt == 1 {
			h.log.Warn("output not confirmed yet; holding it and retrying", zap.String("subject", m.Subject), zap.Error(err))
		}
		return struct{}{}, err
	})
	return err
}

func (h *Host) publishOnce(ctx context.Context, m *nats.Msg) error {
	if bus.IsOutput(m.Subject) {
		return h.publishOutputOnce(ctx, m)
	}
	if h.isCaptured(m.Subject) {
		_, err := h.js.PublishMsg(ctx, m)
		if !errors.Is(err, jetstream.ErrNoStreamResponse) {
			return err
		}
		if err := h.streamGone(ctx, bus.RunStream, err); err != nil {
			return err
		}
		// The stream is gone (removed by hand; the host makes it again at its next start):
		// the subject is a plain one until then.
	}
	if err := h.nc.PublishMsg(m); err != nil {
		return err
	}
	return h.nc.FlushWithContext(ctx)
}

// publishOutputOnce publishes a result or error event (agent.result.<fn>, agent.error.<fn>)
// where bus.EnsureResultStream says: first for the functions that listen on it, then into the
// results stream, which republishes it, once, on its own subject. Both are acknowledged and
// deduplicated by the message's id, so a job that runs again is heard once, and a function
// listening on the result runs once.
func (h *Host) publishOutputOnce(ctx context.Context, m *nats.Msg) error {
	if trigger := bus.TriggerIn(m.Subject); h.isCaptured(trigger) {
		_, err := h.js.PublishMsg(ctx, redirect(m, trigger))
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			err = h.streamGone(ctx, bus.RunStream, err)
		}
		if err != nil {
			return fmt.Errorf("queue it for the functions listening on %s: %w", m.Subject, err)
		}
	}
	_, err := h.js.PublishMsg(ctx, redirect(m, bus.OutputIn(m.Subject)))
	if !errors.Is(err, jetstream.ErrNoStreamResponse) {
		return err
	}
	if err := h.streamGone(ctx, bus.ResultStream, err); err != nil {
		return err
	}
	// The results stream is gone (removed by hand; the host makes it again at its next
	// start): its subscribers still hear the output, as a core message.
	if err := h.nc.PublishMsg(m); err != nil {
		return err
	}
	return h.nc.FlushWithContext(ctx)
}

// streamGone tells, after a publish into a stream got no response (noResponse), whether the
// stream is gone, by asking JetStream for it: nil when JetStream answers that no stream of that
// name exists, noResponse (wrapped) otherwise.
//
// No response is not the stream's absence. In a cluster only the stream's leader listens on its
// subjects, so a host beside a node cut off from the leader, or publishing while a new leader
// is elected, gets no responders although the stream is there: taking that for "no stream" and
// publishing the output as a core message lost it (a result missing from the results stream,
// seen in 1 of 668 jobs of a site cut in TestPartitions). It is retried like any unconfirmed
// output instead.
func (h *Host) streamGone(ctx context.Context, name string, noResponse error) error {
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := h.js.Stream(ictx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err == nil {
		err = errors.New("the stream exists, so its leader is out of reach or being elected")
	}
	return fmt.Errorf("%w (stream %s: %v)", noResponse, name, err)
}

// redirect is m on another subject, m itself untouched (a retry publishes it again).
func redirect(m *nats.Msg, subject string) *nats.Msg {
	c := nats.NewMsg(subject)
	c.Data = m.Data
	for k, v := range m.Header {
		c.Header[k] = slices.Clone(v)
	}
	return c
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
	defer h.step(j, "reply")()
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

// refusedByNATS reports whether err is NATS refusing a message itself (bigger than the
// server's max_payload, a stream's size or header limit, a bad subject): publishing the same
// message again gets the same answer. Anything else (a timeout, no connection, a stream that
// is not answering) may pass.
func refusedByNATS(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) {
		return true
	}
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	// "duplicate message id is in process": the same message (a job run again after its host
	// was cut off) is being stored right now; asked again, the stream answers duplicate.
	if api.ErrorCode == errDuplicateInProcess {
		return false
	}
	return api.Code >= 400 && api.Code < 500
}

// errDuplicateInProcess is JetStream's JSStreamDuplicateMessageConflict (409).
const errDuplicateInProcess jetstream.ErrorCode = 10158
