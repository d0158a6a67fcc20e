package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/runner"
)

// job is one delivery of a message to a function, on its way through handle.
type job struct {
	s       *served
	msg     jetstream.Msg
	rec     *jobs.Record
	replyTo string
	// stopKeepAlive ends the in-progress signals; called right before the message is settled,
	// so that a job holding its outputs through a NATS outage keeps its message meanwhile.
	stopKeepAlive func()
}

// handle runs one delivered message to its end and settles it: acked after a success whose
// outputs are confirmed, terminated after a final failure, or handed back with a delay for a
// retry. It never returns without settling the message one way or another, except when the
// host is killed, in which case JetStream redelivers it after the ack wait.
func (h *Host) handle(s *served, msg jetstream.Msg) {
	h.running.Add(1)
	defer h.running.Done()
	fn := s.fn
	meta, err := msg.Metadata()
	if err != nil {
		h.log.Error("delivered message without JetStream metadata; terminating it", zap.String("function", fn.Name), zap.Error(err))
		_ = msg.Term()
		return
	}
	hdr := msg.Headers()
	id := h.ids.JobID(hdr.Get(bus.HeaderMsgID), meta.Stream, meta.Sequence.Stream, meta.Timestamp.UnixNano(), fn.Name, msg.Subject())
	flow := hdr.Get(bus.HeaderFlowID)
	if flow == "" || !ids.Safe.MatchString(flow) {
		flow = id
	}
	hop, _ := strconv.Atoi(hdr.Get(bus.HeaderHop))
	replyTo, forged := h.ids.ReplyTo(fn.Name, hdr)
	if forged {
		// Only a host forwarding an agent.call sets Reply-To; anyone else's would make this
		// host publish the result wherever they chose (another function, a job record, the
		// JetStream API).
		h.log.Warn("ignored a Reply-To header that no host signed; the job runs, its result goes only to its own outputs",
			zap.String("function", fn.Name), zap.String("job_id", id), zap.String("reply_to", hdr.Get(bus.HeaderReplyTo)))
	}
	j := &job{s: s, msg: msg, replyTo: replyTo, stopKeepAlive: func() {}, rec: &jobs.Record{
		ID:        id,
		Function:  fn.Name,
		FlowID:    flow,
		ParentJob: hdr.Get(bus.HeaderParentJob),
		Subject:   msg.Subject(),
		Hop:       max(hop, 0),
		Status:    jobs.Running,
		Attempts:  int(meta.NumDelivered),
		Host:      h.cfg.HostID,
		Enqueued:  meta.Timestamp,
		Started:   time.Now(),
	}}
	if j.rec.Hop > h.cfg.MaxHops {
		h.refuseRunaway(j)
		return
	}
	if h.repeated(j) {
		return
	}
	if j.rec.Attempts >= bus.MaxDeliver {
		// Delivered this often and never settled: each attempt died with its host, or the
		// backstop was reached. Running it again would only go round once more.
		j.rec.Finished = time.Now()
		h.fail(j, &runner.Outcome{ExitCode: -1, Err: &runner.TerminalError{Err: fmt.Errorf(
			"delivered %d times without finishing (did it take its host down each time?); kept as a dead letter", j.rec.Attempts)}})
		return
	}
	h.m.queueWait.WithLabelValues(fn.Name).Observe(j.rec.QueueWait().Seconds())
	if _, err := h.jobs.PutAsync(j.rec); err != nil {
		h.log.Warn("cannot write the job record; the job itself is unaffected", zap.String("job_id", id), zap.Error(err))
	}

	inFlight := h.m.inFlight.WithLabelValues(fn.Name)
	inFlight.Inc()
	j.stopKeepAlive = h.keepAlive(msg)
	defer j.stopKeepAlive()
	out := h.runner.Run(h.jobCtx, &runner.Job{
		ID:      id,
		FlowID:  flow,
		Attempt: j.rec.Attempts,
		Fn:      fn,
		CodeDir: s.codeDir,
		Payload: msg.Data(),
		Log:     h.logSink(fn.Name, id, flow),
	})
	inFlight.Dec()
	h.m.runDuration.WithLabelValues(fn.Name).Observe(out.Duration.Seconds())
	if out.StartDelay > 0 {
		h.m.jailStart.Observe(out.StartDelay.Seconds())
	}
	if out.LogDropped > 0 {
		h.m.logDropped.WithLabelValues(fn.Name).Add(float64(out.LogDropped))
	}
	j.rec.Finished = time.Now()
	j.rec.Volumes = out.Volumes
	if out.ExitCode >= 0 {
		code := out.ExitCode
		j.rec.ExitCode = &code
	}

	switch {
	case out.Err == nil:
		h.succeed(j, out.Result)
	case errors.Is(context.Cause(h.jobCtx), errHandedBack):
		h.handBack(j)
	case runner.IsTerminal(out.Err):
		h.fail(j, out)
	case errors.As(out.Err, new(*runner.UnavailableError)) && j.rec.Attempts < maxUnavailableAttempts:
		// Not the job's fault (its volume store is down): it waits for the store, whatever
		// its own retries say.
		h.retry(j, out.Err)
	case j.rec.Attempts > fn.Spec.Retries:
		h.fail(j, out)
	default:
		h.retry(j, out.Err)
	}
}

// maxUnavailableAttempts bounds how often a job is handed back because something it depends on
// is down; with the backoff between attempts that is about half an hour of waiting.
const maxUnavailableAttempts = 12

// repeated settles a message whose id already names a job, without running it, and reports
// whether it did.
//
// A job of the same function that has ended for good is not run again. The stream drops a
// repeated message id only while it remembers it, and it rebuilds that memory from the messages
// it still stores when the server restarts; with interest retention, consumed messages are gone
// by then. So a job that reran after a crash can publish its next step's trigger again, under
// the same id, and have it accepted. The job record is the memory that survives: a job id with
// a final record has run. A repeated agent.call gets the recorded outcome as its reply, which
// makes calls with a Nats-Msg-Id idempotent.
//
// An id that names a job of another function is refused: its record is that function's, and
// answering with it would hand one caller another function's result.
func (h *Host) repeated(j *job) bool {
	if j.msg.Headers().Get(bus.HeaderMsgID) == "" {
		return false // its id comes from its stream position: it cannot be a repeat
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prev, err := h.jobs.Get(ctx, j.rec.ID)
	if err != nil {
		return false
	}
	if prev.Function != j.s.fn.Name {
		h.refuseForeignID(j, prev.Function)
		return true
	}
	if !prev.Status.Final() {
		return false
	}
	switch prev.Status {
	case jobs.Succeeded:
		if prev.Result != nil {
			h.reply(&job{s: j.s, rec: prev, replyTo: j.replyTo}, prev.Result, "succeeded")
		}
	case jobs.Failed:
		h.reply(&job{s: j.s, rec: prev, replyTo: j.replyTo}, errorBody(&job{s: j.s, rec: prev}, prev.Error, ""), "failed")
	}
	if err := j.msg.Ack(); err != nil {
		h.log.Warn("cannot ack a repeated trigger", zap.String("job_id", j.rec.ID), zap.Error(err))
	}
	h.m.runs.WithLabelValues(j.s.fn.Name, "repeat_skipped").Inc()
	h.log.Info("trigger of a job that already ran; not running it again", zap.String("function", j.s.fn.Name),
		zap.String("job_id", j.rec.ID), zap.String("status", string(prev.Status)))
	return true
}

// refuseForeignID ends a trigger whose Nats-Msg-Id is already the id of another function's job.
// Nothing is written: the record under that id stays the other function's.
func (h *Host) refuseForeignID(j *job, owner string) {
	msg := foreignIDError(j.rec.ID, j.s.fn.Name, owner)
	h.reply(j, errorBody(j, msg, ""), "failed")
	if err := j.msg.TermWithReason("job id belongs to another function"); err != nil {
		h.log.Warn("terminating a refused trigger failed; it may be delivered again", zap.String("job_id", j.rec.ID), zap.Error(err))
	}
	h.m.runs.WithLabelValues(j.s.fn.Name, "refused").Inc()
	h.log.Warn("trigger refused: its message id is another function's job id", zap.String("function", j.s.fn.Name),
		zap.String("job_id", j.rec.ID), zap.String("owner", owner))
}

func foreignIDError(id, function, owner string) string {
	return fmt.Sprintf("job id %q already belongs to function %q, so it cannot name a job of %q: send this trigger with another Nats-Msg-Id (or none)", id, owner, function)
}

// keepAlive tells JetStream the job is still running, well within the ack wait, so a long run
// is not handed to another host. stop may be called more than once.
func (h *Host) keepAlive(msg jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	var once sync.Once
	go func() {
		t := time.NewTicker(h.cfg.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := msg.InProgress(); err != nil {
					h.log.Warn("cannot extend the job's ack deadline", zap.String("subject", msg.Subject()), zap.Error(err))
				}
			}
		}
	}()
	return func() { once.Do(func() { close(done) }) }
}

// outputWait bounds how long a finished job holds its outputs while NATS is unreachable; past
// it the job is left for redelivery, and its rerun's outputs deduplicate against anything that
// did get through.
const outputWait = 2 * time.Minute

func (h *Host) succeed(j *job, result []byte) {
	fn := j.s.fn
	ctx, cancel := context.WithTimeout(context.Background(), outputWait)
	defer cancel()
	outputs := append([]string{bus.ResultSubject(fn.Name)}, fn.Spec.Next...)
	for i, subject := range outputs {
		m := h.outMsg(subject, result, j.rec)
		if i == 0 {
			m.Header.Set(bus.HeaderMsgID, h.ids.Derive(j.rec.ID, "result"))
		} else {
			// The next step's message id is fixed by this job and the subject, so a rerun of
			// this job cannot start the next step twice.
			m.Header.Set(bus.HeaderMsgID, h.ids.Next(j.rec.ID, subject))
			m.Header.Set(bus.HeaderParentJob, j.rec.ID)
		}
		if err := h.publish(ctx, m); err != nil {
			h.log.Error("cannot publish the job's output; handing the job back to run again", zap.String("job_id", j.rec.ID),
				zap.String("subject", subject), zap.Error(err))
			j.rec.Status, j.rec.Error = jobs.Retrying, "publishing the result failed: "+err.Error()
			h.putRecord(j.rec)
			j.stopKeepAlive()
			_ = j.msg.NakWithDelay(retryDelay(j.rec.Attempts))
			return
		}
	}
	// The caller hears first: the record that follows is bookkeeping, not the result.
	h.reply(j, result, "succeeded")
	j.rec.Status, j.rec.Outputs, j.rec.ResultBytes = jobs.Succeeded, outputs, len(result)
	if len(result) <= jobs.MaxResultBytes {
		j.rec.Result = json.RawMessage(result)
	}
	h.putRecord(j.rec)
	j.stopKeepAlive()
	if err := j.msg.DoubleAck(ctx); err != nil {
		// The outputs are out and deduplicated by id, so a redelivery only costs a rerun.
		h.log.Warn("ack not confirmed; the job may run again", zap.String("job_id", j.rec.ID), zap.Error(err))
	}
	h.m.runs.WithLabelValues(fn.Name, "succeeded").Inc()
	h.log.Info("job succeeded", zap.String("function", fn.Name), zap.String("job_id", j.rec.ID),
		zap.String("flow_id", j.rec.FlowID), zap.Int("attempt", j.rec.Attempts), zap.Duration("run", j.rec.RunTime()))
}

func (h *Host) fail(j *job, out *runner.Outcome) {
	fn := j.s.fn
	ctx, cancel := context.WithTimeout(context.Background(), outputWait)
	defer cancel()
	// The dead letter first: whoever sees the error event can find it at once.
	if err := h.deadLetter(ctx, j, out.Err); err != nil {
		h.log.Error("cannot keep the job's dead letter; handing the job back", zap.String("job_id", j.rec.ID), zap.Error(err))
		j.stopKeepAlive()
		_ = j.msg.NakWithDelay(retryDelay(j.rec.Attempts))
		return
	}
	body := errorBody(j, out.Err.Error(), out.StderrTail)
	m := h.outMsg(bus.ErrorSubject(fn.Name), body, j.rec)
	m.Header.Set(bus.HeaderMsgID, h.ids.Derive(j.rec.ID, "error"))
	if err := h.publish(ctx, m); err != nil {
		h.log.Error("cannot publish the job's error event; handing the job back", zap.String("job_id", j.rec.ID), zap.Error(err))
		j.stopKeepAlive()
		_ = j.msg.NakWithDelay(retryDelay(j.rec.Attempts))
		return
	}
	j.rec.Status, j.rec.Error, j.rec.Outputs = jobs.Failed, out.Err.Error(), []string{m.Subject}
	h.putRecord(j.rec)
	h.reply(j, body, "failed")
	j.stopKeepAlive()
	if err := j.msg.TermWithReason(truncate(out.Err.Error(), 200)); err != nil {
		h.log.Warn("terminating the message failed; it may be delivered again", zap.String("job_id", j.rec.ID), zap.Error(err))
	}
	h.m.runs.WithLabelValues(fn.Name, "failed").Inc()
	h.log.Warn("job failed", zap.String("function", fn.Name), zap.String("job_id", j.rec.ID), zap.String("flow_id", j.rec.FlowID),
		zap.Int("attempt", j.rec.Attempts), zap.Bool("terminal", runner.IsTerminal(out.Err)), zap.Error(out.Err))
}

// refuseRunaway stops a flow that has taken more than --max-hops steps. The first refused step
// publishes its error event so the loop is visible on agent.error.<name>; steps triggered by
// that event (an error handler in the loop) are refused without one, or the loop would go on
// through the error handler.
func (h *Host) refuseRunaway(j *job) {
	err := &runner.TerminalError{Err: fmt.Errorf("flow %s has taken %d steps, more than --max-hops %d allows; a next:/on: chain probably loops back on itself",
		j.rec.FlowID, j.rec.Hop, h.cfg.MaxHops)}
	j.rec.Finished = time.Now()
	if j.rec.Hop == h.cfg.MaxHops+1 {
		h.fail(j, &runner.Outcome{Err: err, ExitCode: -1})
		return
	}
	j.rec.Status, j.rec.Error = jobs.Failed, err.Error()
	h.putRecord(j.rec)
	h.reply(j, errorBody(j, err.Error(), ""), "failed")
	_ = j.msg.TermWithReason("max hops")
	h.m.runs.WithLabelValues(j.s.fn.Name, "failed").Inc()
	h.log.Warn("runaway flow stopped", zap.String("function", j.s.fn.Name), zap.String("job_id", j.rec.ID), zap.String("flow_id", j.rec.FlowID), zap.Int("hop", j.rec.Hop))
}

func (h *Host) retry(j *job, err error) {
	delay := retryDelay(j.rec.Attempts)
	j.rec.Status, j.rec.Error = jobs.Retrying, err.Error()
	h.putRecord(j.rec)
	j.stopKeepAlive()
	if nerr := j.msg.NakWithDelay(delay); nerr != nil {
		h.log.Warn("cannot hand the job back; JetStream redelivers it after the ack wait", zap.String("job_id", j.rec.ID), zap.Error(nerr))
	}
	h.m.runs.WithLabelValues(j.s.fn.Name, "retried").Inc()
	h.log.Warn("job failed; retrying", zap.String("function", j.s.fn.Name), zap.String("job_id", j.rec.ID),
		zap.Int("attempt", j.rec.Attempts), zap.Int("retries", j.s.fn.Spec.Retries), zap.Duration("in", delay), zap.Error(err))
}

func (h *Host) handBack(j *job) {
	j.rec.Status, j.rec.Error = jobs.Retrying, errHandedBack.Error()
	h.putRecord(j.rec)
	j.stopKeepAlive()
	_ = j.msg.Nak()
	h.m.runs.WithLabelValues(j.s.fn.Name, "handed_back").Inc()
	h.log.Warn("job handed back at the drain deadline", zap.String("function", j.s.fn.Name), zap.String("job_id", j.rec.ID))
}

// deadLetter keeps the original trigger of a job that gave up, with its headers and last error,
// so it can be inspected and replayed (`host dead`).
func (h *Host) deadLetter(ctx context.Context, j *job, cause error) error {
	m := nats.NewMsg(bus.DeadSubject(j.s.fn.Name, j.rec.ID))
	m.Data = j.msg.Data()
	// The trigger's headers, less those that would steer this publish (a caller's
	// Nats-Expected-Stream would keep the letter from ever being written) and the reply,
	// whose caller is long gone by the time anyone replays the letter.
	bus.CarryHeaders(m.Header, j.msg.Headers())
	m.Header.Set(bus.HeaderMsgID, h.ids.Derive(j.rec.ID, "dead"))
	m.Header.Set(bus.HeaderJobID, j.rec.ID)
	m.Header.Set(bus.HeaderFlowID, j.rec.FlowID)
	m.Header.Set(bus.HeaderDeadSubject, j.msg.Subject())
	m.Header.Set(bus.HeaderDeadFunction, j.s.fn.Name)
	m.Header.Set(bus.HeaderDeadError, truncate(strings.Join(strings.Fields(cause.Error()), " "), 1000)) // headers are one line
	m.Header.Set(bus.HeaderDeadAttempts, strconv.Itoa(j.rec.Attempts))
	// A trigger near the size limit leaves no room for the dead letter's headers: keep what
	// fits and say how much there was, rather than failing to give up.
	if room := int(h.nc.MaxPayload()) - 8<<10; len(m.Data) > room {
		m.Header.Set(bus.HeaderDeadTruncated, strconv.Itoa(len(m.Data)))
		m.Data = m.Data[:max(room, 0)]
	}
	_, err := h.js.PublishMsg(ctx, m)
	return err
}

func errorBody(j *job, msg, stderrTail string) []byte {
	body, _ := json.Marshal(jobs.ErrorEvent{
		JobID: j.rec.ID, Function: j.s.fn.Name, FlowID: j.rec.FlowID, Error: msg,
		Attempts: j.rec.Attempts, ExitCode: j.rec.ExitCode, StderrTail: stderrTail,
	})
	return body
}

// retryDelay is the exponential backoff before attempt+1: 1s, 2s, 4s … up to 5 minutes, with
// ±20% jitter so that jobs failed together do not come back together.
func retryDelay(attempt int) time.Duration {
	d := time.Second << min(max(attempt-1, 0), 9)
	d = min(d, 5*time.Minute)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
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
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 50*time.Millisecond, 500*time.Millisecond, 0
	attempt := 0
	return backoff.Retry(func() error {
		attempt++
		err := h.publishOnce(ctx, m)
		if err == nil || errors.Is(err, nats.ErrMaxPayload) {
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

// reply answers the agent.call request that started the job, if there was one.
func (h *Host) reply(j *job, body []byte, status string) {
	if j.replyTo == "" {
		return
	}
	m := h.outMsg(j.replyTo, body, j.rec)
	m.Header.Set(bus.HeaderJobStatus, status)
	if err := h.nc.PublishMsg(m); err != nil {
		h.log.Warn("cannot answer the caller", zap.String("job_id", j.rec.ID), zap.Error(err))
	}
}

func (h *Host) putRecord(r *jobs.Record) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.jobs.Put(ctx, r); err != nil {
		h.log.Warn("cannot write the job record; the job itself is unaffected", zap.String("job_id", r.ID), zap.Error(err))
	}
}

// logSink publishes each output line of a job on agent.logs.<function>.<job>.
func (h *Host) logSink(function, jobID, flowID string) runner.LineFunc {
	subject := bus.LogsSubject(function, jobID)
	return func(stream string, line []byte) {
		m := nats.NewMsg(subject)
		m.Data = append([]byte(nil), line...)
		m.Header.Set(bus.HeaderJobID, jobID)
		m.Header.Set(bus.HeaderFlowID, flowID)
		m.Header.Set(bus.HeaderStream, stream)
		if err := h.nc.PublishMsg(m); err != nil {
			h.log.Debug("dropped a log line", zap.String("job_id", jobID), zap.Error(err))
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
