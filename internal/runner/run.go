package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/sandbox"
	"github.com/agenthost/host/internal/trace"
)

// runJob runs one job up to its outcome, and returns it with what the run holds until its
// handle is destroyed (see prepared.release). It never panics on bad input: every failure is
// in Err. The job runs in the jail of the first kind that fits it and has one ready (see
// jailkind.go): a fork of its function's template, a warm jail, or a jail of its own (cold).
func (r *Runner) runJob(ctx context.Context, job *task) (*outcome, *prepared) {
	start := time.Now()
	raw, args, err := jobtype.DecodePayload(job.Payload)
	if err != nil {
		return failedRun(err), nil
	}
	// Before a jail is taken or started: a payload that does not fit main's types fails here,
	// terminally, and neither spends a warm jail nor starts a cold one.
	if err := job.Fn.Signature.Check(raw); err != nil {
		return failedRun(err), nil
	}
	for kinds := r.kinds; ; {
		var l *lease
		if l, kinds = r.choose(job, kinds); l == nil {
			return failedRun(errors.New("no jail for the job: this is a bug of the host")), nil // cold always has one
		}
		out, p := r.run(ctx, job, raw, args, l, start)
		if out != nil {
			return r.servedBy(job, l.kind.served(), out), p
		}
		// The jail was gone before anything of the job reached it: it runs as the next kind
		// has it.
		p.release()
	}
}

// servedBy records how a job got its jail, in its outcome and the metrics: a jailed job's
// kind, and for a function with warm jails, whether one served it.
func (r *Runner) servedBy(job *task, how string, out *outcome) *outcome {
	switch how {
	case ServedWarm:
		r.warm.served(job.Fn.Name, true)
	case ServedCold:
		r.warm.served(job.Fn.Name, false)
	}
	if !job.Fn.Spec.Sandbox {
		return out
	}
	out.Served = how
	r.forks.m.served.WithLabelValues(job.Fn.Name, how).Inc()
	return out
}

// run runs the job in the jail l, up to its outcome: once every process of the job is gone,
// or, for a job without volumes, as soon as its runtime said it is done (its end lines). It
// returns nil only when l's jail was gone before anything of the job reached it (see
// jailKind.unserved); p is never nil.
func (r *Runner) run(ctx context.Context, job *task, raw []byte, args map[string]any, l *lease, start time.Time) (*outcome, *prepared) {
	out := &outcome{Outcome: jobtype.Outcome{ExitCode: -1}, marks: Marks{Start: start}}
	defer func() { out.marks.Done = time.Now() }()
	p, err := r.prepare(ctx, job, raw, args, l)
	var res *sandbox.Result
	defer func() {
		// A run with a result is gone (volumes end no run early), and one without never
		// started; but a jail that runs ahead of its job (warm) may hold the job's volumes
		// although it did not serve it: they go at release, once it is gone.
		if l.held == nil || res != nil {
			p.releaseVolumes()
		}
	}()
	if l.kind.unserved(job, err) {
		return nil, p // nothing of the job reached the jail; release frees what prepare took
	}
	if err != nil {
		out.Err = p.redact.redactErr(err)
		out.Duration = time.Since(start)
		return out, p
	}
	defer func() {
		// Nothing that leaves the runner may carry a secret's value. The result and the
		// stderr tail are redacted where they are made, before their bounds apply.
		out.Err = p.redact.redactErr(out.Err)
	}()
	budget := newOutputBudget(r.cfg.MaxLogBytes)
	stdout := newLineWriter("stdout", job.Log, budget, r.cfg.MaxResultBytes+1, 0)
	stderr := newLineWriter("stderr", job.Log, budget, stderrLine, stderrTail)
	stdout.redact, stderr.redact = p.redact, p.redact
	p.spec.Stdout, p.spec.Stderr = stdout, stderr
	var end *endWatch
	if len(p.volumes) == 0 {
		// The answer need not wait for the jail's teardown once the runtime said it is done. Not
		// with volumes: they are committed only after the death of every process that could
		// still write to them.
		end = &endWatch{}
		stdout.end, stderr.end = end, end
	}

	out.marks.Laid, out.marks.Egress = p.laid, p.egress
	res, err = p.start(ctx, end)
	if l.kind.unserved(job, err) {
		return nil, p
	}
	stdout.Close()
	stderr.Close()
	out.StderrTail = stderr.tail.redacted(p.redact)
	if published, dropped, line := budget.truncated(); dropped > 0 {
		out.LogTruncated, out.LogDropped, out.LogEnd = published, dropped, line
	}
	out.Duration = time.Since(start)
	if err != nil {
		out.Err = fmt.Errorf("start %s: %w", job.Fn.Name, err)
		return out, p
	}
	out.ExitCode = res.ExitCode
	out.marks.Jail = res.Marks
	traceJail(ctx, l.kind.served(), res)
	out.StartDelay = res.StartDelay + p.setup
	out.Err = r.finish(ctx, job, p, res, stdout, out)
	return out, p
}

// unstartedCalls are the job's tool calls that had not started when it timed out (see
// UnstartedCalls); none when it has no tool endpoint.
func (r *Runner) unstartedCalls(job *task) []string {
	u, ok := job.tools.(UnstartedCalls)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return u.Unstarted(ctx)
}

// finish reads the outcome of a run that ended with res: its error, or its result and
// volumes, into out.
func (r *Runner) finish(ctx context.Context, job *task, p *prepared, res *sandbox.Result, stdout *lineWriter, out *outcome) error {
	switch {
	case res.TimedOut:
		if calls := r.unstartedCalls(job); len(calls) > 0 {
			return terminal("timeout: the run exceeded its limit of %s while its tool calls had not started (%s): it is not retried, since a retry would wait the same way; "+
				"the tools' run slots were taken (raise their concurrency:), or this function's `timeout:` is too short for the calls it makes", p.spec.Timeout, strings.Join(calls, ", "))
		}
		return fmt.Errorf("timeout: the run exceeded its limit of %s and its processes were killed (raise it with a `timeout:` annotation)", p.spec.Timeout)
	case res.Limit != "":
		return fmt.Errorf("%s (%s)", res.LimitMessage(p.spec.Limits, p.spec.Timeout), limitHint(res.Limit))
	case res.Canceled:
		return fmt.Errorf("the run was stopped before it finished: %w", context.Cause(ctx))
	}
	if stdout.lastOverflow && (job.Fn.Runtime == runtimes.Bash || job.Fn.Runtime == runtimes.Exec) {
		return terminal("result: the last output line is over %d bytes, more than a NATS message can carry; write large outputs to a volume and return a reference", r.cfg.MaxResultBytes)
	}
	result, err := runtimes.Outcome(job.Fn.Runtime, p.jd.io, int64(r.cfg.MaxResultBytes), stdout.last, res.ExitCode)
	if derr := p.jd.diskErr(err != nil, out.StderrTail, p.spec.Limits.TmpSize); derr != nil {
		return derr
	}
	if err != nil {
		return err
	}
	// One canonical, compact form whatever the runtime printed: results are compared and
	// stored as they are.
	var compact bytes.Buffer
	if err := json.Compact(&compact, result); err == nil {
		result = compact.Bytes()
	}
	// By value, so that the result stays JSON; and before the size check, because a
	// redacted result can be longer than the job's ("[REDACTED]" for each 4-byte secret).
	printed := len(result)
	if result, err = p.redact.result(result); err != nil {
		return terminal("result: the runtime's result is not valid JSON, so its secrets cannot be redacted (%v); this is a bug of the host's runtime shims", err)
	}
	if len(result) > r.cfg.MaxResultBytes {
		grew := ""
		if len(result) > printed {
			grew = fmt.Sprintf(" once its secrets were redacted (%d bytes as the job returned it)", printed)
		}
		return terminal("result: %d bytes%s, more than the %d a NATS message can carry (the server's max_payload less room for headers); write large outputs to a volume and return a reference",
			len(result), grew, r.cfg.MaxResultBytes)
	}
	// Volumes are committed only now that the run has succeeded, and before its result is
	// published, so a next step that reads the volume sees what this run wrote.
	staged, err := r.commitVolumes(ctx, job, p)
	out.Staged = staged
	if err != nil {
		return err
	}
	for _, v := range p.volumes {
		out.Volumes = append(out.Volumes, v.use)
	}
	out.Result = result
	return nil
}

// limitHint says how to give a run more of what it ran out of.
func limitHint(limit string) string {
	switch limit {
	case sandbox.LimitMemory:
		return "raise it with a `memory:` annotation"
	case sandbox.LimitPids:
		return "the host's --job-pids sets it"
	case sandbox.LimitCPU:
		return "the host's --job-cpu-time sets it"
	case sandbox.LimitFileSize:
		return "the host's --job-file-size sets it; keep large outputs in a volume"
	}
	return "see the host's --job-* flags"
}

// prepared is a job laid out on disk and ready to start, and, once started, what it holds until
// its handle is destroyed.
type prepared struct {
	lease   *lease // the job's jail, of its kind
	spec    *sandbox.Spec
	proc    sandbox.Handle // the job's run, once started
	jd      *jobDir
	setup   time.Duration
	laid    time.Time // see Marks
	egress  time.Time
	redact  redactor
	volumes []*mountedVolume
	closers []io.Closer // per-job servers (the egress socket), closed at release
	// volumesReleased: the volume leases went back once nothing of the job could write.
	volumesReleased bool
}

// start starts the job in its jail, whatever its kind, and returns its result; end, when not
// nil, ends the run on the runtime's end lines (sandbox.Handle.End).
func (p *prepared) start(ctx context.Context, end *endWatch) (*sandbox.Result, error) {
	proc, err := p.lease.jail.Start(ctx, p.spec)
	if err != nil {
		return nil, err
	}
	p.proc = proc
	end.bind(proc.End)
	res := <-proc.Wait(context.Background()) // ctx bounds the run itself
	if res.Err != nil {
		return nil, res.Err
	}
	return res, nil
}

// release ends what the job holds: its run (every process gone, what the jail held
// released), a jail it held before it started (warm), its egress socket and its volume leases,
// at once, and its directory in the background.
func (p *prepared) release() {
	if p.proc != nil {
		p.proc.Destroy()
	}
	if p.lease.held != nil {
		p.lease.held.Close()
	}
	for i := len(p.closers) - 1; i >= 0; i-- { // the reverse of how they were opened
		p.closers[i].Close()
	}
	p.releaseVolumes()
	if p.jd != nil {
		go p.jd.remove()
	}
}

// undo takes back a layout whose jail never started (a warm or reused jail that failed on its
// way up): its servers and its directory.
func (p *prepared) undo() {
	for _, c := range p.closers {
		c.Close()
	}
	p.jd.remove()
}

// releaseVolumes gives the job's volume leases back, once.
func (p *prepared) releaseVolumes() {
	if p.volumesReleased {
		return
	}
	p.volumesReleased = true
	for _, v := range p.volumes {
		_ = v.m.Release(context.Background())
	}
}

// traceJail records, under the job's span, its jail's start (up to the command being let go)
// and its run (from there to its exit), from the moments the jail noted; nothing for a step
// the jail did not note (a warm jail started before the job).
func traceJail(ctx context.Context, served string, res *sandbox.Result) {
	m := res.Marks
	if !trace.Span(ctx).IsRecording() || m.Released.IsZero() {
		return
	}
	if !m.Entered.IsZero() {
		_, span := trace.Start(ctx, "jail start", oteltrace.WithTimestamp(m.Entered),
			oteltrace.WithAttributes(attribute.String("agent.jail", served)))
		span.End(oteltrace.WithTimestamp(m.Released))
	}
	end := m.Exited
	if end.IsZero() {
		end = time.Now()
	}
	_, span := trace.Start(ctx, "run", oteltrace.WithTimestamp(m.Released),
		oteltrace.WithAttributes(attribute.Int("agent.exit_code", res.ExitCode)))
	span.End(oteltrace.WithTimestamp(end))
}
