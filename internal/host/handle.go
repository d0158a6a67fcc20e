package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/trace"
)

// Runner starts jobs and hands back their handles; it never settles the message, which is the
// host's. ctx bounds the run: ending it stops the run. *runner.Runner is the one the host is
// wired with (see package app).
type Runner interface {
	Start(ctx context.Context, fn *functions.Function, codeDir string, job *jobtype.Job) jobtype.Handle
}

// Warmer is a Runner that keeps jails started ahead of a function's jobs (*runner.Runner is
// one): the host tells it which function versions it serves, and when it stops serving them.
type Warmer interface {
	// Warm keeps f's warm jails for its version in codeDir, replacing those of another.
	Warm(f *functions.Function, codeDir string)
	// Cool tears down a function's warm jails and returns once they are gone.
	Cool(function string)
	// WarmWanted is how many warm jails Warm keeps for f (0: none), which the host announces.
	WarmWanted(f *functions.Function) int
}

// job is one delivery of a message to a function, on its way through handle.
type job struct {
	s         *served
	msg       jetstream.Msg
	rec       *jobs.Record
	delivered int // how often JetStream has delivered the trigger, this time included
	// joinFailed is why the join this trigger starts failed (see gather); "" when it did not.
	joinFailed    string
	isJoinTimeout bool // it is a join's timeout trigger
	// ver is the job's record as this host last read or wrote it, which every write of it
	// moves from (jobs.Store.Move); the zero Version: it had none.
	ver     jobs.Version
	replyTo string
	// toolDepth is how deeply the job is nested as a tool call (see lineage).
	toolDepth int
	// stopKeepAlive ends the in-progress signals; called right before the message is settled,
	// so that a job holding its outputs through a NATS outage keeps its message meanwhile.
	stopKeepAlive func()
	// scout: fetched by the priority scout, so it waits (see scoutLoop); priority is its
	// priority: value once known (0 before).
	scout    bool
	priority int
	// trace holds the delivery's span (tracing.go); nil when tracing is off. delivery is when
	// it was delivered, set with it.
	trace    context.Context
	delivery time.Time
	// staged are the volume versions the run staged (approve: ... stage): kept in the waiting
	// record, or discarded when the step ends any other way (see settle).
	staged []jobs.StagedVolume
}

// handle runs one delivered message to its end and settles it (see settle). It never returns
// without settling the message one way or another, except when the host is killed, in which
// case JetStream redelivers it after the ack wait.
func (h *Host) handle(s *served, msg jetstream.Msg, scout bool) {
	h.running.Add(1)
	defer h.running.Done()
	j, err := h.newJob(s, msg)
	if err != nil {
		h.log.Error("delivered message without JetStream metadata; terminating it", zap.String("function", s.fn.Name), zap.Error(err))
		if err := msg.Term(); err != nil {
			h.log.Warn("terminating a message without metadata failed; it may be delivered again", zap.String("function", s.fn.Name), zap.Error(err))
		}
		return
	}
	defer func() { j.stopKeepAlive() }() // run replaces it once the job starts
	j.scout = scout
	h.traceJob(j)
	e := h.decide(j)
	h.settle(j, e)
	h.endTrace(j, e)
	// The caller has its answer; the slot (this fetch loop) and the drain's count of running
	// jobs wait for the jail to be gone, so that --concurrency bounds live jails, not answers.
	if e.teardown != nil {
		e.teardown()
	}
}

// newJob reads what a delivery says about its job: its id, flow, hop, attempt and caller.
func (h *Host) newJob(s *served, msg jetstream.Msg) (*job, error) {
	fn := s.fn
	meta, err := msg.Metadata()
	if err != nil {
		return nil, err
	}
	hdr := msg.Headers()
	id := h.ids.JobID(hdr.Get(bus.HeaderMsgID), meta.Stream, meta.Sequence.Stream, meta.Timestamp.UnixNano(), fn.Name, msg.Subject())
	lin := readLineage(hdr, id)
	replyTo, forged := h.ids.ReplyTo(fn.Name, hdr)
	if forged {
		// Only a host forwarding an agent.call sets Reply-To; anyone else's would make this
		// host publish the result wherever they chose (another function, a job record, the
		// JetStream API).
		h.log.Warn("ignored a Reply-To header that no host signed; the job runs, its result goes only to its own outputs",
			zap.String("function", fn.Name), zap.String("job_id", id), zap.String("reply_to", hdr.Get(bus.HeaderReplyTo)))
	}
	j := &job{s: s, msg: msg, replyTo: replyTo, toolDepth: lin.toolDepth, stopKeepAlive: func() {}, delivered: int(meta.NumDelivered), rec: &jobs.Record{
		ID:           id,
		Function:     fn.Name,
		FlowID:       lin.flow,
		ParentJob:    lin.parent,
		ReplayedFrom: lin.replayOf,
		Caller:       lin.caller,
		Subject:      msg.Subject(),
		Hop:          lin.hop,
		Status:       jobtype.Queued,
		Attempts:     int(meta.NumDelivered),
		Host:         h.cfg.HostID,
		Enqueued:     meta.Timestamp,
		Started:      time.Now(),
		Scheduled:    h.tickOf(fn.Name, hdr),
		Deployment:   h.flowDeployment(hdr, msg.Data(), fn.Name),
		Version:      fn.Hash,
	}}
	j.rec.KeepArgs(msg.Data())
	j.rec.StartedBy, j.rec.Starter = h.startOf(hdr, msg.Data(), fn.Name, j.rec.Scheduled)
	return j, nil
}

// tickOf is the tick of a scheduled run, or zero for any other trigger. Anyone may set the
// Scheduled-At header; only a trigger whose message id is the tick's, which only a host can
// derive, was published by the schedule.
func (h *Host) tickOf(function string, hdr nats.Header) time.Time {
	at, err := time.Parse(time.RFC3339, hdr.Get(bus.HeaderScheduledAt))
	if err != nil || hdr.Get(bus.HeaderMsgID) != h.ids.Tick(function, at) {
		return time.Time{}
	}
	return at
}

// decide brings a queued job to its verdict: refused or answered without running, or run and
// judged by its outcome.
func (h *Host) decide(j *job) end {
	if err := h.pin(j); err != nil {
		return end{verdict: failed, err: jobtype.Terminal(err)}
	}
	if j.rec.Hop > h.cfg.MaxHops {
		err := &jobtype.TerminalError{Err: fmt.Errorf("flow %s has taken %d steps, more than --max-hops %d allows; a next:/on: chain probably loops back on itself",
			j.rec.FlowID, j.rec.Hop, h.cfg.MaxHops)}
		// The first refused step fails as any job does, so the loop is visible on
		// agent.error.<name>; steps triggered by that event (an error handler in the loop)
		// are stopped without one, or the loop would go on through the error handler.
		if j.rec.Hop == h.cfg.MaxHops+1 {
			return end{verdict: failed, err: err}
		}
		return end{verdict: runaway, err: err}
	}
	if j.toolDepth > h.cfg.MaxToolDepth {
		// Cycles are refused at load, so a chain this deep is one that spans hosts whose
		// functions differ, or a tool tree grown too deep: each level holds a run slot of its
		// function while it waits on the next, so the bound also bounds what one call can hold.
		return end{verdict: failed, err: &jobtype.TerminalError{Err: fmt.Errorf(
			"tool call refused: it would be nested %d deep, past the bound of %d nested tool calls (--tool-depth); a tool that calls tools should not call back into its own chain",
			j.toolDepth, h.cfg.MaxToolDepth)}}
	}
	// Messages that are not jobs of their own: a decision on a waiting step (approve.go), and
	// what a join gathers (gather.go). Approval-* headers count only when a host made them, and
	// a step after an approval gate takes an "approval" argument only from its gate's decision.
	if of, ok := h.decisionOf(j); ok {
		if j.s.fn.Spec.Approve == nil {
			// Never run as a job of its own: a decision sent while the job ran, to a function
			// that turns out to wait for none.
			h.log.Warn("a decision for a function without approve: is dropped", zap.String("function", j.s.fn.Name), zap.String("approval_of", abbreviate(of, 100)))
			return end{verdict: decided}
		}
		return h.decideApproval(j)
	}
	if err := h.checkApprovalNote(j); err != nil {
		return end{verdict: failed, err: jobtype.Terminal(err)}
	}
	if len(j.s.fn.Spec.Join) > 0 {
		if e, ok := h.gather(j); ok {
			return e
		}
	}
	// A first delivery that nobody queued a record for (a flow's next step, a webhook, a
	// schedule, a plain publish) normally has no record: claim creates it and reads the job
	// store only when one was there after all (a repeated message id), which saves a read on
	// every such job. Redeliveries, jobs whose caller queued a record, and delayed ones (whose
	// record counts the deliveries spent waiting) read it first.
	delay := j.s.fn.Spec.Delay
	if j.rec.Attempts > 1 || delay > 0 || j.msg.Headers().Get(bus.HeaderQueued) != "" {
		if e, ok := h.repeated(j); ok {
			return e
		}
	}
	if due := j.rec.Enqueued.Add(delay); delay > 0 && time.Now().Before(due) {
		// Back to the stream until it is due, holding no run slot meanwhile; its record says
		// when it runs, and the deliveries spent waiting are not attempts.
		return end{verdict: deferred, due: due}
	}
	if j.joinFailed != "" {
		if why := h.flowCanceled(j); why != "" {
			return end{verdict: dropped, err: errors.New(why)}
		}
		return end{verdict: failed, err: jobtype.Terminal(fmt.Errorf("join: %s", j.joinFailed))}
	}
	if j.rec.Attempts >= bus.MaxDeliver {
		// Delivered this often and never settled: each attempt died with its host, or the
		// backstop was reached. Running it again would only go round once more.
		return end{verdict: failed, err: &jobtype.TerminalError{Err: fmt.Errorf(
			"delivered %d times without finishing (did it take its host down each time?); kept as a dead letter", j.rec.Attempts)}}
	}
	if err := h.callerRights(j); err != nil {
		if jobtype.IsTerminal(err) {
			return end{verdict: failed, err: err}
		}
		return end{verdict: retrying, err: err}
	}
	release, e, ok := h.holdFlow(j)
	if !ok {
		return e
	}
	defer release()
	return h.run(j)
}

// run runs a job and judges its outcome.
func (h *Host) run(j *job) end {
	fn := j.s.fn
	// Each job has a context of its own under the host's, so that one job can be stopped
	// (canceled) without the others. It is stoppable before its record says running, so a
	// cancel that reads that record always finds it here (see claim).
	ctx, cancel := context.WithCancelCause(h.jobCtx)
	defer cancel(nil)
	h.stops.Store(j.rec.ID, cancel)
	defer h.stops.Delete(j.rec.ID)
	h.traceQueue(j)
	claimed := h.step(j, "claim")
	ce, ok := h.claim(j)
	claimed()
	if !ok {
		return ce
	}
	// After the claim, which `host cancel --flow` lists jobs after marking the flow: a job of a
	// canceled flow is either seen running by that cancel, or sees its mark here.
	if why := h.flowCanceled(j); why != "" {
		return end{verdict: canceled, err: errors.New(why)}
	}
	h.m.queueWait.WithLabelValues(fn.Name).Observe(j.rec.QueueWait().Seconds())
	inFlight := h.m.inFlight.WithLabelValues(fn.Name)
	inFlight.Inc()
	j.stopKeepAlive = h.keepAlive(j.msg)
	jobLog := h.openJobLog(fn.Name, j.rec.ID, j.rec.FlowID)
	if j.rec.Attempts > 1 {
		// Every attempt's lines go to the same log: without a mark, a retry's (or a dead
		// host's job run again) followed the attempt before it as if one run had printed both.
		jobLog.Line("stderr", attemptMark(j.rec.Attempts, h.cfg.HostID))
	}
	run := h.runner.Start(trace.Join(ctx, j.trace), fn, j.s.codeDir, &jobtype.Job{
		ID:        j.rec.ID,
		Trace:     j.rec.Trace,
		FlowID:    j.rec.FlowID,
		Attempt:   j.rec.Attempts,
		Hop:       j.rec.Hop,
		ToolDepth: j.toolDepth,
		Starter:   j.rec.Starter,
		Payload:   j.msg.Data(),
		Log:       jobLog.Line,
	})
	out := <-run.Wait(context.Background()) // the run's own context bounds it
	// The record names the log's last line, so that a reader of the final record knows when it
	// has every line (invoke --wait, logs -f) instead of guessing how long lines take. A cut
	// log's notice goes last, after the runner's own lines (volumes committed) too.
	j.rec.LogLastSeq, j.rec.LogLost = jobLog.Close(out.LogEnd)
	j.rec.LogTruncated = out.LogTruncated
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
	j.staged = out.Staged
	j.rec.Served = out.Served
	if out.ExitCode >= 0 {
		code := out.ExitCode
		j.rec.ExitCode = &code
	}
	e := h.judge(j, out, ctx)
	e.teardown = run.Destroy
	return e
}

// flowCanceled says why the job's flow was canceled; "" when it was not (or the mark cannot be
// read: the job runs, and a cancel still reaches it running).
func (h *Host) flowCanceled(j *job) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := h.jobs.FlowCanceled(ctx, j.rec.FlowID)
	if err != nil {
		h.log.Warn("cannot read whether the job's flow is canceled; running it", zap.String("job_id", j.rec.ID), zap.Error(err))
		return ""
	}
	if c == nil {
		return ""
	}
	return fmt.Sprintf("flow %s was canceled by %s at %s, before this step started", j.rec.FlowID, c.By, c.At.Format(time.RFC3339))
}

// judge turns a run's outcome into the job's verdict.
func (h *Host) judge(j *job, out *jobtype.Outcome, ctx context.Context) end {
	e := end{err: out.Err, result: out.Result, stderrTail: out.StderrTail}
	if e.err == nil && len(e.result) > 0 && !json.Valid(e.result) {
		// What the runner hands over is published, stored and replied as JSON: text that is
		// not (a redactor writing {"pin":[REDACTED]} did) would fail the record's write and
		// leave the job running for ever, and give every reader a result it cannot parse.
		e.err = &jobtype.TerminalError{Err: fmt.Errorf("the run's result is not valid JSON (%d bytes, starting %q); nothing was published: this is a bug in the host",
			len(e.result), truncate(string(e.result), 40))}
		e.result = nil
	}
	if e.err == nil {
		// Before anything is published: an expression that fails on this result fails the step,
		// terminally (the same result fails the same way), and routes nothing.
		if e.routes, e.err = j.s.fn.Routes.Route(e.result, j.msg.Data()); e.err != nil {
			e.err, e.result = jobtype.Terminal(e.err), nil
		}
	}
	if a := j.s.fn.Spec.Approve; a != nil && e.err == nil {
		// Its result and arguments wait in its record for the decision.
		if len(e.result) > jobs.MaxResultBytes || len(j.msg.Data()) > jobs.MaxResultBytes {
			e.err = jobtype.Terminal(fmt.Errorf("approve: a step that waits for a decision keeps its result and arguments in its record, at most %d bytes each; this one has %d and %d: return a reference (a volume's path) rather than the data",
				jobs.MaxResultBytes, len(e.result), len(j.msg.Data())))
			e.result, e.routes = nil, nil
		}
	}
	switch {
	case e.err == nil && j.s.fn.Spec.Approve != nil:
		e.verdict = awaiting
	case e.err == nil:
		e.verdict = succeeded
	case errors.Is(context.Cause(h.jobCtx), errHandedBack):
		e.verdict, e.err = handedBack, errHandedBack
	case ctx.Err() != nil || jobtype.IsCanceled(e.err):
		// The job's own context ended while the host is not draining: someone stopped it on
		// purpose, and running it again would undo that.
		e.verdict = canceled
	case jobtype.IsTerminal(e.err):
		e.verdict = failed
	case jobtype.IsUnavailable(e.err) && j.rec.Attempts < maxUnavailableAttempts:
		// Not the job's fault (its volume store is down): it waits for the store, whatever
		// its own retries say.
		e.verdict = retrying
	case j.rec.Attempts > j.s.fn.Spec.Retries:
		e.verdict = failed
	default:
		e.verdict = retrying
	}
	return e
}

// maxUnavailableAttempts bounds how often a job is handed back because something it depends on
// is down; with the backoff between attempts that is about half an hour of waiting.
const maxUnavailableAttempts = 12

// repeated decides a message whose id already names a job, without running it, and reports
// whether it did. It remembers the record's revision, which claim writes over.
//
// A job of the same function that has ended for good is not run again. The stream drops a
// repeated message id only while it remembers it, and it rebuilds that memory from the messages
// it still stores when the server restarts; with interest retention, consumed messages are gone
// by then. So a job that reran after a crash can publish its next step's trigger again, under
// the same id, and have it accepted. The job record is the memory that survives: a job id with
// a final record has run. A repeated agent.call gets the recorded outcome as its reply, which
// makes calls with a Nats-Msg-Id idempotent. A job canceled while it waited is dropped.
//
// An id that names a job of another function is refused: its record is that function's, and
// answering with it would hand one caller another function's result. So is an id whose job was
// triggered with other arguments (see verdictOf).
func (h *Host) repeated(j *job) (end, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prev, at, err := h.jobs.GetRev(ctx, j.rec.ID)
	if err != nil {
		if !errors.Is(err, jobs.ErrNotFound) {
			h.log.Warn("cannot read the job record to tell a repeated trigger; running it", zap.String("job_id", j.rec.ID), zap.Error(err))
		}
		return end{}, false
	}
	return h.verdictOf(j, prev, at)
}

// verdictOf is what a job's existing record says of its delivery: nothing (run it), or the end
// it has without running.
func (h *Host) verdictOf(j *job, prev *jobs.Record, at jobs.Version) (end, bool) {
	j.ver = at
	// Deliveries that only waited for a delay were not attempts. A delivery read after the
	// record was written is no older an attempt than the one that wrote it (the store fences
	// older ones), though its count may be lower when that one counted without the record.
	j.rec.Deferrals, j.rec.NotBefore = prev.Deferrals, prev.NotBefore
	j.rec.Attempts = max(j.delivered-prev.Deferrals, prev.Attempts)
	if prev.Function != j.s.fn.Name {
		return end{verdict: refused, prev: prev, err: jobs.TakenID(j.rec.ID, j.s.fn.Name, prev.Function)}, true
	}
	// A queued record with other arguments was written for a trigger that lost the race into
	// the stream under this id (its publish was the duplicate): this message is the job, and
	// claim writes its hash over that record. Any later record was written for the message that
	// ran, so other arguments under its id are someone else's call.
	if prev.Status != jobtype.Queued && prev.ArgsSHA256 != "" && prev.ArgsSHA256 != j.rec.ArgsSHA256 {
		return end{verdict: refused, prev: prev, err: jobs.ReusedID(j.rec.ID, j.s.fn.Name)}, true
	}
	if prev.Status == jobtype.Canceled {
		return end{verdict: dropped, prev: prev, err: fmt.Errorf("job %s was canceled before it ran", j.rec.ID)}, true
	}
	if !prev.Status.Final() {
		return end{}, false
	}
	return end{verdict: alreadyDone, prev: prev}, true
}

// keepAlive tells JetStream the job is still running, well within the ack wait, so a long run
// is not handed to another host. stop may be called more than once.
func (h *Host) keepAlive(msg jetstream.Msg) (stop func()) {
	return every(h.cfg.AckWait/3, func() {
		if err := msg.InProgress(); err != nil {
			h.log.Warn("cannot extend the job's ack deadline", zap.String("subject", msg.Subject()), zap.Error(err))
		}
	})
}

// every calls f every d, from a goroutine of its own, until stop is called (any number of
// times): what a running job keeps up while it runs (its ack deadline, its limit: lease).
func every(d time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var once sync.Once
	go func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { once.Do(func() { close(done) }) }
}
