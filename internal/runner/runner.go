// Package runner runs one job of a function: it checks the payload, lays out the job's
// directories, builds the runtime's command, runs it in the jail (or, for functions without
// `sandbox`, directly), streams its output and reads its result.
package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/egress"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jailfs"
	"github.com/agenthost/host/internal/jailinit/initbin"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/packages"
	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/sandbox"
	"github.com/agenthost/host/internal/secrets"
)

// Paths inside the jail. /job is the contract's; the rest are the host's own and read-only
// except the io directory, where the shim writes the result.
const (
	jailFunctionDir = "/host/fn"
	jailShimDir     = "/host/shims"
	jailIODir       = "/host/io"
)

// Defaults of Config, exported for the flags that set them.
const (
	// DefaultTimeout is the timeout of functions without a timeout: annotation.
	DefaultTimeout = 15 * time.Minute
	// DefaultMaxLogBytes bounds the output published per job.
	DefaultMaxLogBytes = 10 << 20
)

// Config is what the runner needs from the host.
type Config struct {
	// RunDir holds one scratch directory per running job; it is emptied after each run.
	RunDir string
	// ShimDir is where the runtime shims were written (runtimes.WriteShims).
	ShimDir string
	// Jail runs sandbox functions; nil when no jail tool is installed, in which case JailErr
	// says why and sandbox functions fail with it.
	Jail    Jail
	JailErr error
	// Limits are the host's limits for jailed runs; a function's memory: overrides Memory.
	Limits sandbox.Limits
	// JobDisk bounds a jailed job's directory, /job with its volumes, in bytes: it is a tmpfs
	// of that size (jailfs.Tree), and a function's disk: overrides it. 0 means DefaultJobDisk,
	// a negative value no bound (then /job is on the --data disk). A host that is not root
	// cannot mount one: it runs without, and says so at start.
	JobDisk int64
	// Direct runs functions without `sandbox`.
	Direct sandbox.Jail
	// Workspace fills $workspace.
	Workspace string
	// DefaultTimeout applies to functions without timeout:; the package's DefaultTimeout when zero.
	DefaultTimeout time.Duration
	// MaxResultBytes is the largest result that can be published (the NATS max payload less
	// room for headers).
	MaxResultBytes int
	// MaxLogBytes bounds the log bytes published per job; the rest is dropped and counted.
	// DefaultMaxLogBytes when zero.
	MaxLogBytes int64
	// Secrets resolves $secret: arguments and env: lines; nil means none are configured.
	Secrets Secrets
	// Packages installs what functions import; nil means functions that need packages fail.
	Packages Packages
	// Volumes stores functions' volumes; nil means functions with volumes fail.
	Volumes Volumes
	// Egress is the proxy that `network: proxy` jobs reach the outside through; nil means
	// such jobs get no network at all.
	Egress Egress
	// JailInit is the jail init (package jailinit), installed where the jail user can run it:
	// the first process of a `network: proxy` jail, which forwards the job's proxy connections
	// to the host. nil means such jobs cannot run.
	JailInit *initbin.Installed
	// ForwardInJail keeps the jail init as the way out of `network: proxy` jobs even on a
	// jail that lets the host hold the job's proxy address itself (see egressFromHost): for
	// hosts that should never enter a jail's network namespace, and for that path's tests.
	ForwardInJail bool
	// Warm configures the jails kept started ahead of sandboxed functions' jobs (see Warm).
	Warm WarmConfig
	// Log receives what happens outside any job (warm jails that die); nil discards it.
	Log *zap.Logger
	// Registerer takes the runner's metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
}

// Egress serves one job's proxy: on a Unix socket it creates (Listen), or on a listener of the
// caller's (Start). *egress.Proxy is one.
type Egress interface {
	Listen(ctx context.Context, path string, uid, gid int, policy egress.Policy) (io.Closer, error)
	Start(ctx context.Context, l net.Listener, policy egress.Policy) (io.Closer, error)
}

// Volumes checks volumes out into a job and commits them back. *objstore.Volumes is one.
type Volumes interface {
	// MountAt checks volume name out at rel beneath root, a job's tree, following no link.
	MountAt(ctx context.Context, name string, root *jailfs.Dir, rel, holder string) (*objstore.Mounted, error)
}

// Jail is a jail that runs as a user of its own, who must own what the job writes.
type Jail interface {
	sandbox.Jail
	Owner() (uid, gid int)
}

// Secrets resolves secret references at run time. *secrets.Store is one.
type Secrets interface {
	// ResolveArgs refuses, before reading anything, a name for which declared is false.
	ResolveArgs(ctx context.Context, args map[string]any, declared func(name string) bool) (map[string]any, *secrets.Redactor, error)
	Resolve(ctx context.Context, name string) (string, *secrets.Redactor, error)
}

// Packages installs a function's packages once and says where they are. *packages.Installer is one.
type Packages interface {
	Ensure(ctx context.Context, codeDir, entry string, logf func(format string, args ...any)) (*packages.Installed, error)
}

// Runner runs jobs.
type Runner struct {
	cfg  Config
	warm *warmPools
	// installed remembers, per function version (its snapshot directory), what Ensure found,
	// so that a version's sources are scanned for imports once, not on every run.
	installed sync.Map // codeDir → *packages.Installed (nil: needs none)
	// unbounded says why this host cannot mount a bounded job tree (jailfs.CanMount); nil when
	// it can.
	unbounded error
}

// New checks the configuration and prepares the run directory.
func New(cfg Config) (*Runner, error) {
	if cfg.Direct == nil {
		cfg.Direct = sandbox.NewDirect()
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = DefaultTimeout
	}
	if cfg.MaxLogBytes <= 0 {
		cfg.MaxLogBytes = DefaultMaxLogBytes
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = 1 << 20
	}
	if cfg.JobDisk == 0 {
		cfg.JobDisk = DefaultJobDisk
	}
	if err := os.MkdirAll(cfg.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("create run directory %s: %w", cfg.RunDir, err)
	}
	// The jail user must be able to traverse to its bind sources, but not list other jobs.
	if err := os.Chmod(cfg.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("chmod run directory %s: %w", cfg.RunDir, err)
	}
	// Jobs of a host that was killed left their scratch directories, arguments with resolved
	// secrets among them; nothing in there belongs to a living job at start.
	if err := clearRunDir(cfg.RunDir); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	r := &Runner{cfg: cfg}
	if cfg.Jail != nil {
		if err := jailfs.CanMount(cfg.RunDir); err != nil {
			r.unbounded = err
			if cfg.JobDisk > 0 {
				cfg.Log.Warn("jailed jobs' directories are not bounded: a job can fill the --data disk, and a function with a `disk:` annotation fails; run the host as root with CAP_SYS_ADMIN, or pass --job-disk 0 to say so on purpose",
					zap.Int64("job_disk", cfg.JobDisk), zap.Error(err))
			}
		}
	}
	r.warm = newWarmPools(r)
	return r, nil
}

// task is one job as the runner runs it: the engine's job and the function version it runs.
type task struct {
	*jobtype.Job
	Fn *functions.Function
	// CodeDir is the function's snapshot (functions.Function.Snapshot).
	CodeDir string
}

// sayOmitted tells the job's log which ARG_ variables its script will find unset, and why: a
// script reading one would otherwise see an empty value and no reason.
func sayOmitted(job *task, cmd *runtimes.Command) {
	for _, o := range cmd.Omitted {
		job.say("%s", o.Reason())
	}
}

// say puts a line of the host's own in the job's log.
func (j *task) say(format string, args ...any) {
	if j.Log != nil {
		j.Log("stderr", fmt.Appendf(nil, "[host] "+format, args...))
	}
}

// outcome is a run's end as the runner knows it: the engine's part, the moments it passed (for
// `host bench`), and, when the run answered before its jail was gone, when that is.
type outcome struct {
	jobtype.Outcome
	marks Marks
	// teardown, when not nil, is closed once the job's jail is gone and what it held released.
	teardown <-chan struct{}
}

func failedRun(err error) *outcome {
	return &outcome{Outcome: jobtype.Outcome{ExitCode: -1, Err: err}}
}

func terminal(format string, args ...any) error {
	return jobtype.Terminal(fmt.Errorf(format, args...))
}

// DecodePayload turns a message body into the arguments object: an empty body is no arguments,
// anything else must be a JSON object.
func DecodePayload(body []byte) (raw []byte, args map[string]any, err error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return []byte("{}"), map[string]any{}, nil
	}
	if err := json.Unmarshal(body, &args); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) || !json.Valid(body) {
			return nil, nil, terminal("payload is not valid JSON (%v); send a JSON object such as {\"name\":\"Ada\"}, or nothing", err)
		}
		return nil, nil, terminal("payload must be a JSON object of arguments, got %s; wrap it, e.g. {\"value\": %s}", jsonKind(body), abbreviate(body, 40))
	}
	if args == nil { // the body was `null`
		return nil, nil, terminal("payload must be a JSON object of arguments, got null")
	}
	return body, args, nil
}

func jsonKind(b []byte) string {
	switch b[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

func abbreviate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}

// runJob runs one job to its end. It never panics on bad input: every failure is in Err.
// A sandboxed function's job is handed to one of its warm jails when one is waiting, and runs
// in a jail of its own (cold) otherwise.
func (r *Runner) runJob(ctx context.Context, job *task) *outcome {
	start := time.Now()
	raw, args, err := DecodePayload(job.Payload)
	if err != nil {
		return failedRun(err)
	}
	// Before a jail is taken or started: a payload that does not fit main's types fails here,
	// terminally, and neither spends a warm jail nor starts a cold one.
	if err := job.Fn.Signature.Check(raw); err != nil {
		return failedRun(err)
	}
	if w := r.warm.take(job.Fn, job.CodeDir); w != nil {
		if out := r.run(ctx, job, raw, args, w, start); out != nil {
			r.warm.served(job.Fn.Name, true)
			return out
		}
		// The jail died between being taken and its hand-over: it never saw the job.
	}
	r.warm.served(job.Fn.Name, false)
	return r.run(ctx, job, raw, args, nil, start)
}

// run runs the job in w, or cold when w is nil. It returns nil only when w was found dead at
// the hand-over, before anything of the job reached it.
func (r *Runner) run(ctx context.Context, job *task, raw []byte, args map[string]any, w *warmJail, start time.Time) *outcome {
	out := &outcome{Outcome: jobtype.Outcome{ExitCode: -1}, marks: Marks{Start: start}}
	defer func() { out.marks.Done = time.Now() }()
	p, err := r.prepare(ctx, job, raw, args, w)
	// gone is set when the jail answered before its teardown (see endWatch): the job's directory,
	// egress socket and warm jail are released only once every process of it is gone.
	var gone <-chan struct{}
	defer func() {
		switch {
		case p == nil:
		case gone == nil:
			p.cleanup()
		default:
			done := make(chan struct{})
			out.teardown = done
			go func() {
				<-gone
				p.cleanup()
				close(done)
			}()
		}
	}()
	if errors.Is(err, errWarmGone) {
		return nil // nothing of the job reached the jail; cleanup releases what prepare took
	}
	if err != nil {
		out.Err = err
		if p != nil {
			out.Err = p.redact.redactErr(err)
		}
		out.Duration = time.Since(start)
		return out
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
	if len(p.volumes) == 0 {
		// The answer need not wait for the jail's teardown once the runtime said it is done. Not
		// with volumes: they are committed only after the death of every process that could
		// still write to them.
		finished := make(chan int, 1)
		if p.warm != nil {
			finished = p.warm.finished
		}
		p.spec.Finished = finished
		stdout.end = &endWatch{finished: finished}
		stderr.end = stdout.end
	}

	out.marks.Laid, out.marks.Egress = p.laid, p.egress
	res, err := p.run(ctx)
	if errors.Is(err, errWarmGone) {
		return nil
	}
	if res != nil && res.Teardown != nil {
		select {
		case <-res.Teardown:
		default:
			gone = res.Teardown
		}
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
		return out
	}
	out.ExitCode = res.ExitCode
	out.marks.Jail = res.Marks
	out.StartDelay = res.StartDelay + p.setup
	switch {
	case res.TimedOut:
		out.Err = fmt.Errorf("timeout: the run exceeded its limit of %s and its processes were killed (raise it with a `timeout:` annotation)", p.spec.Timeout)
		return out
	case res.Limit != "":
		out.Err = fmt.Errorf("%s (%s)", res.LimitMessage(p.spec.Limits, p.spec.Timeout), limitHint(res.Limit))
		return out
	case res.Canceled:
		out.Err = fmt.Errorf("the run was stopped before it finished: %w", context.Cause(ctx))
		return out
	}
	if stdout.lastOverflow && (job.Fn.Runtime == runtimes.Bash || job.Fn.Runtime == runtimes.Exec) {
		out.Err = terminal("result: the last output line is over %d bytes, more than a NATS message can carry; write large outputs to a volume and return a reference", r.cfg.MaxResultBytes)
		return out
	}
	result, err := runtimes.Outcome(job.Fn.Runtime, p.jd.io, int64(r.cfg.MaxResultBytes), stdout.last, res.ExitCode)
	if derr := p.jd.diskErr(err != nil, out.StderrTail, p.spec.Limits.TmpSize); derr != nil {
		out.Err = derr
		return out
	}
	if err != nil {
		out.Err = err
		return out
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
		out.Err = terminal("result: the runtime's result is not valid JSON, so its secrets cannot be redacted (%v); this is a bug of the host's runtime shims", err)
		return out
	}
	if len(result) > r.cfg.MaxResultBytes {
		grew := ""
		if len(result) > printed {
			grew = fmt.Sprintf(" once its secrets were redacted (%d bytes as the job returned it)", printed)
		}
		out.Err = terminal("result: %d bytes%s, more than the %d a NATS message can carry (the server's max_payload less room for headers); write large outputs to a volume and return a reference",
			len(result), grew, r.cfg.MaxResultBytes)
		return out
	}
	// Volumes are committed only now that the run has succeeded, and before its result is
	// published, so a next step that reads the volume sees what this run wrote.
	if out.Err = r.commitVolumes(ctx, job, p); out.Err != nil {
		return out
	}
	for _, v := range p.volumes {
		out.Volumes = append(out.Volumes, v.use)
	}
	out.Result = result
	return out
}

// prepared is a job laid out on disk and ready to start.
type prepared struct {
	spec     *sandbox.Spec
	jail     sandbox.Jail
	warm     *warmJail // the jail the job is handed to, when it runs warm
	handover []byte    // what warm reads to become the job (runtimes.Handover)
	jd       *jobDir
	setup    time.Duration
	laid     time.Time // see Marks
	egress   time.Time
	redact   redactor
	volumes  []*mountedVolume
	closers  []io.Closer // per-job servers (the egress socket), closed at cleanup
}

// run starts the job: in its own jail, or by handing it over to its warm jail.
func (p *prepared) run(ctx context.Context) (*sandbox.Result, error) {
	if p.warm != nil {
		return p.warm.serve(ctx, p.handover, p.spec.Stdout, p.spec.Stderr, p.spec.Timeout)
	}
	return p.jail.Run(ctx, p.spec)
}

// cleanup releases the job's volume leases at once, and removes its directory in the
// background: the result should not wait for a directory tree to be unlinked.
func (p *prepared) cleanup() {
	for i := len(p.closers) - 1; i >= 0; i-- { // the reverse of how they were opened
		p.closers[i].Close()
	}
	for _, v := range p.volumes {
		_ = v.m.Release(context.Background())
	}
	if p.jd != nil {
		go p.jd.remove()
	}
}

// prepare lays the job out, in its own directory, or for w in the warm jail's, which the jail
// has bound since it started: the job's volumes are checked out into its /job now.
func (r *Runner) prepare(ctx context.Context, job *task, raw []byte, args map[string]any, w *warmJail) (*prepared, error) {
	t0 := time.Now()
	fn := job.Fn
	p := &prepared{}
	if w != nil {
		// From here on the job owns the warm jail: its cleanup ends it whatever happens.
		p.jd = w.jd
		p.closers = append(p.closers, w)
	}
	if fn.Spec.Sandbox && r.cfg.Jail == nil {
		return p, terminal("function %s is marked `sandbox` but this host cannot jail it: %v", fn.Name, r.cfg.JailErr)
	}
	// Volume names are expanded from the arguments as sent, before secrets are resolved: a
	// secret must never become part of a storage path.
	vars := annot.Vars{Workspace: r.cfg.Workspace, Function: fn.Name, Args: args}
	names := make([]string, len(fn.Spec.Volumes))
	for i, v := range fn.Spec.Volumes {
		name, err := v.Expand(vars)
		if err != nil {
			return p, terminal("volume %s: %w", v.Path, err)
		}
		names[i] = name
	}
	if len(names) > 0 && r.cfg.Volumes == nil {
		return p, terminal("function %s declares volumes, but this host has no volume store", fn.Name)
	}
	raw, extraEnv, err := r.resolveSecrets(ctx, fn, raw, args, &p.redact)
	if err != nil {
		return p, err
	}
	if w != nil {
		return r.prepareHandover(ctx, job, p, w, raw, args, extraEnv, names, t0)
	}

	jd, err := r.makeJobDir(fn, job.ID+"-")
	if err != nil {
		return p, err
	}
	p.jd = jd
	workDir := jd.workDir
	// Python and Bun read their arguments from a file (and delete it at once); bash and
	// executables get them on stdin, so nothing of them is written to disk.
	if fn.Runtime == runtimes.Python || fn.Runtime == runtimes.Bun {
		if err := jd.io.WriteFile(runtimes.ArgsFile, raw, 0o600); err != nil {
			return p, hostTrouble("write arguments", err)
		}
		if fn.Spec.Sandbox && os.Geteuid() == 0 {
			uid, gid := r.cfg.Jail.Owner()
			if err := jd.io.Lchown(runtimes.ArgsFile, uid, gid); err != nil { // the shim deletes it once read
				return p, fmt.Errorf("hand the arguments to the jail user %d: %w", uid, err)
			}
		}
	}
	if err := r.mountVolumes(ctx, job, p, jd.root, names); err != nil {
		return p, err
	}

	var paths runtimes.Paths
	if fn.Spec.Sandbox {
		p.jail = r.cfg.Jail
		paths = jailPaths(fn)
	} else {
		p.jail = r.cfg.Direct
		paths = runtimes.Paths{Script: filepath.Join(job.CodeDir, fn.Entry), ShimDir: r.cfg.ShimDir, IODir: jd.ioDir}
	}
	cmd, err := runtimes.Build(fn.Runtime, paths, raw, args)
	if err != nil {
		return p, terminal("%s: %w", fn.Name, err)
	}
	sayOmitted(job, cmd)

	home := workDir
	if fn.Spec.Sandbox {
		home = "/job"
	}
	env := []string{
		"HOME=" + home,
		"LANG=C.UTF-8",
		"TMPDIR=/tmp",
		"JOB_ID=" + job.ID,
		"FLOW_ID=" + job.FlowID,
		"FUNCTION=" + fn.Name,
		"FUNCTION_DIR=" + filepath.Dir(paths.Script),
	}
	if fn.Spec.Sandbox {
		env = append(env, "PATH="+sandbox.JailPath)
	}
	env = append(env, cmd.Env...)
	env = append(env, extraEnv...)
	pkgs, err := r.ensurePackages(ctx, job)
	if err != nil {
		return p, err
	}
	if pkgs != nil {
		if fn.Spec.Sandbox {
			env = append(env, pkgs.Env...)
		} else {
			env = append(env, pkgs.HostEnv...)
		}
	}

	timeout := fn.Spec.Timeout
	if timeout <= 0 {
		timeout = r.cfg.DefaultTimeout
	}
	p.spec = &sandbox.Spec{
		Argv:    cmd.Argv,
		WorkDir: workDir,
		Env:     env,
		Network: networkOf(fn.Spec.Network.Mode),
		Timeout: timeout,
	}
	if cmd.Stdin != nil {
		p.spec.Stdin = bytes.NewReader(cmd.Stdin)
	}
	if fn.Spec.Sandbox {
		r.jailLimitsAndMounts(p.spec, fn, job.CodeDir, jd.ioDir, pkgs)
		if fn.Spec.Network.Mode == annot.NetworkProxy && r.cfg.Egress != nil {
			p.laid = time.Now()
			if err := r.wireEgress(ctx, job, p); err != nil {
				return p, err
			}
			p.egress = time.Now()
		}
	}
	if p.laid.IsZero() {
		p.laid = time.Now()
	}
	p.setup = time.Since(t0)
	return p, nil
}

// jailPaths are where a jailed run of fn finds its script, the shims and its io directory.
func jailPaths(fn *functions.Function) runtimes.Paths {
	return runtimes.Paths{Script: jailFunctionDir + "/" + fn.Entry, ShimDir: jailShimDir, IODir: jailIODir}
}

// jailLimitsAndMounts gives a jailed run of fn its limits and binds its code, the shims, its io
// directory and its packages.
func (r *Runner) jailLimitsAndMounts(spec *sandbox.Spec, fn *functions.Function, codeDir, ioDir string, pkgs *packages.Installed) {
	spec.Limits = r.cfg.Limits
	if fn.Spec.Memory > 0 {
		spec.Limits.Memory = fn.Spec.Memory
	}
	spec.Mounts = []sandbox.Mount{
		{Source: codeDir, Target: jailFunctionDir},
		{Source: r.cfg.ShimDir, Target: jailShimDir},
		{Source: ioDir, Target: jailIODir, Writable: true},
	}
	if pkgs != nil {
		spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: pkgs.Dir, Target: pkgs.Target})
	}
}

// ensurePackages installs the function's packages once per version; a first run that has to
// wait for the install says so in its log.
func (r *Runner) ensurePackages(ctx context.Context, job *task) (*packages.Installed, error) {
	if r.cfg.Packages == nil {
		return nil, nil
	}
	if v, ok := r.installed.Load(job.CodeDir); ok {
		return v.(*packages.Installed), nil
	}
	inst, err := r.cfg.Packages.Ensure(ctx, job.CodeDir, job.Fn.Entry, job.say)
	if err != nil {
		return nil, fmt.Errorf("install packages for %s: %w", job.Fn.Name, err)
	}
	r.installed.Store(job.CodeDir, inst)
	return inst, nil
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

// networkOf maps the annotation to the jail's network namespace: only `host` shares the host's;
// `proxy` is an empty namespace whose one way out is the egress socket (wireEgress).
func networkOf(m annot.NetworkMode) sandbox.Network {
	if m == annot.NetworkHost {
		return sandbox.NetworkHost
	}
	return sandbox.NetworkNone
}

func chownForJail(j Jail, paths ...string) error {
	if os.Geteuid() != 0 {
		return nil // the jail runs as us, and already owns what we create
	}
	uid, gid := j.Owner()
	for _, p := range paths {
		if err := os.Lchown(p, uid, gid); err != nil {
			return fmt.Errorf("hand %s to the jail user %d: %w", p, uid, err)
		}
	}
	return nil
}

// hostTrouble is a failure of this host's own disk while laying out a job: not the job's
// fault, so the job is handed back for a host (or a moment) with room.
func hostTrouble(what string, err error) error {
	return &jobtype.UnavailableError{Err: fmt.Errorf("%s: %w (the host's --data disk may be full)", what, err)}
}
