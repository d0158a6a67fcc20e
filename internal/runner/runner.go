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
	"os"
	"path/filepath"
	"time"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/sandbox"
)

// Paths inside the jail. /job is the contract's; the rest are the host's own and read-only
// except the io directory, where the shim writes the result.
const (
	jailFunctionDir = "/host/fn"
	jailShimDir     = "/host/shims"
	jailIODir       = "/host/io"
)

// Config is what the runner needs from the host.
type Config struct {
	// RunDir holds one scratch directory per running job; it is emptied after each run.
	RunDir string
	// ShimDir is where the runtime shims were written (runtimes.WriteShims).
	ShimDir string
	// Jail runs sandbox functions; nil when no jail tool is installed, in which case JailErr
	// says why and sandbox functions fail with it.
	Jail    *sandbox.Bwrap
	JailErr error
	// Direct runs functions without `sandbox`.
	Direct sandbox.Jail
	// Workspace fills $workspace.
	Workspace string
	// DefaultTimeout applies to functions without timeout:.
	DefaultTimeout time.Duration
	// MaxResultBytes is the largest result that can be published (the NATS max payload less
	// room for headers).
	MaxResultBytes int
	// MaxLogBytes bounds the log bytes published per job; the rest is dropped and counted.
	MaxLogBytes int64
}

// Runner runs jobs.
type Runner struct{ cfg Config }

// New checks the configuration and prepares the run directory.
func New(cfg Config) (*Runner, error) {
	if cfg.Direct == nil {
		cfg.Direct = sandbox.NewDirect()
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = 15 * time.Minute
	}
	if err := os.MkdirAll(cfg.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("create run directory %s: %w", cfg.RunDir, err)
	}
	// The jail user must be able to traverse to its bind sources, but not list other jobs.
	if err := os.Chmod(cfg.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("chmod run directory %s: %w", cfg.RunDir, err)
	}
	return &Runner{cfg: cfg}, nil
}

// Job is one run of a function.
type Job struct {
	ID      string
	FlowID  string
	Attempt int
	Fn      *functions.Function
	// CodeDir is the function's snapshot (functions.Function.Snapshot).
	CodeDir string
	// Payload is the message body as received.
	Payload []byte
	// Log receives each output line.
	Log LineFunc
}

// Outcome is how a run ended.
type Outcome struct {
	Result     json.RawMessage // set on success
	Err        error           // set on failure; IsTerminal says whether retrying can help
	ExitCode   int
	StderrTail string
	StartDelay time.Duration // jail set-up, up to the process being started
	Duration   time.Duration
	LogDropped int64 // log bytes over the budget
}

// TerminalError is a failure that no retry can fix: the input or the function is wrong.
type TerminalError struct{ Err error }

func (e *TerminalError) Error() string { return e.Err.Error() }
func (e *TerminalError) Unwrap() error { return e.Err }

// IsTerminal reports whether err is a failure that retrying cannot fix.
func IsTerminal(err error) bool {
	var t *TerminalError
	return errors.As(err, &t) || runtimes.IsTerminal(err)
}

func terminal(format string, args ...any) error {
	return &TerminalError{Err: fmt.Errorf(format, args...)}
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

// Run runs one job to its end. It never panics on bad input: every failure is in Outcome.Err.
func (r *Runner) Run(ctx context.Context, job *Job) *Outcome {
	start := time.Now()
	out := &Outcome{ExitCode: -1}
	raw, args, err := DecodePayload(job.Payload)
	if err != nil {
		out.Err = err
		return out
	}
	p, err := r.prepare(job, raw, args)
	if p != nil {
		defer p.cleanup()
	}
	if err != nil {
		out.Err = err
		out.Duration = time.Since(start)
		return out
	}
	budget := &outputBudget{left: r.cfg.MaxLogBytes}
	stdout := newLineWriter("stdout", job.Log, budget, r.cfg.MaxResultBytes+1, 0)
	stderr := newLineWriter("stderr", job.Log, budget, maxLogLine, 4<<10)
	p.spec.Stdout, p.spec.Stderr = stdout, stderr

	res, err := p.jail.Run(ctx, p.spec)
	stdout.Close()
	stderr.Close()
	out.StderrTail = stderr.tail.String()
	out.LogDropped = budget.droppedBytes()
	if out.LogDropped > 0 && job.Log != nil {
		job.Log("stderr", fmt.Appendf(nil, "[host] %d bytes of output over the per-job log limit (--max-output-bytes %d) were dropped", out.LogDropped, r.cfg.MaxLogBytes))
	}
	out.Duration = time.Since(start)
	if err != nil {
		out.Err = fmt.Errorf("start %s: %w", job.Fn.Name, err)
		return out
	}
	out.ExitCode = res.ExitCode
	out.StartDelay = res.StartDelay + p.setup
	switch {
	case res.TimedOut:
		out.Err = fmt.Errorf("timeout: the run exceeded its limit of %s and its processes were killed (raise it with a `timeout:` annotation)", p.spec.Timeout)
		return out
	case res.Canceled:
		out.Err = fmt.Errorf("the run was stopped before it finished: %w", context.Cause(ctx))
		return out
	}
	if stdout.lastOverflow && (job.Fn.Runtime == runtimes.Bash || job.Fn.Runtime == runtimes.Exec) {
		out.Err = terminal("result: the last output line is over %d bytes, more than a NATS message can carry; write large outputs to a volume and return a reference", r.cfg.MaxResultBytes)
		return out
	}
	result, err := runtimes.Outcome(job.Fn.Runtime, p.hostIODir, stdout.last, res.ExitCode)
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
	if len(result) > r.cfg.MaxResultBytes {
		out.Err = terminal("result: %d bytes, more than the %d a NATS message can carry; write large outputs to a volume and return a reference", len(result), r.cfg.MaxResultBytes)
		return out
	}
	out.Result = result
	return out
}

// prepared is a job laid out on disk and ready to start.
type prepared struct {
	spec      *sandbox.Spec
	jail      sandbox.Jail
	hostIODir string
	dir       string
	setup     time.Duration
}

func (p *prepared) cleanup() { os.RemoveAll(p.dir) }

// Prepare lays out a job exactly as Run would and returns the spec to start it with, and a
// cleanup; the benchmark uses it to time the bare jail the host builds.
func (r *Runner) Prepare(job *Job) (*sandbox.Spec, sandbox.Jail, func(), error) {
	raw, args, err := DecodePayload(job.Payload)
	if err != nil {
		return nil, nil, nil, err
	}
	p, err := r.prepare(job, raw, args)
	if err != nil {
		if p != nil {
			p.cleanup()
		}
		return nil, nil, nil, err
	}
	return p.spec, p.jail, p.cleanup, nil
}

func (r *Runner) prepare(job *Job, raw []byte, args map[string]any) (*prepared, error) {
	t0 := time.Now()
	fn := job.Fn
	if fn.Spec.Sandbox && r.cfg.Jail == nil {
		return nil, terminal("function %s is marked `sandbox` but this host cannot jail it: %v", fn.Name, r.cfg.JailErr)
	}
	vars := annot.Vars{Workspace: r.cfg.Workspace, Function: fn.Name, Args: args}
	for _, v := range fn.Spec.Volumes {
		if _, err := v.Expand(vars); err != nil {
			return nil, terminal("volume %s: %w", v.Path, err)
		}
	}
	if len(fn.Spec.Volumes) > 0 {
		// Volumes need the store that the volumes issue brings; refusing beats running an
		// agent whose memory silently vanishes.
		return nil, terminal("function %s declares volumes, which this host cannot store yet", fn.Name)
	}
	for _, e := range fn.Spec.Env {
		if e.Secret != "" {
			return nil, terminal("env %s: secret %q cannot be resolved: this host has no secret store configured", e.Name, e.Secret)
		}
	}

	dir, err := os.MkdirTemp(r.cfg.RunDir, job.ID+"-")
	if err != nil {
		return nil, fmt.Errorf("create job directory: %w", err)
	}
	p := &prepared{dir: dir, hostIODir: filepath.Join(dir, "io")}
	if err := os.Chmod(dir, 0o711); err != nil { // the jail user only passes through
		return p, fmt.Errorf("create job directory: %w", err)
	}
	workDir := filepath.Join(dir, "job")
	for _, d := range []string{workDir, p.hostIODir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return p, fmt.Errorf("create job directory: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(p.hostIODir, runtimes.ArgsFile), raw, 0o600); err != nil {
		return p, fmt.Errorf("write arguments: %w", err)
	}

	var paths runtimes.Paths
	if fn.Spec.Sandbox {
		p.jail = r.cfg.Jail
		paths = runtimes.Paths{Script: jailFunctionDir + "/" + fn.Entry, ShimDir: jailShimDir, IODir: jailIODir}
		if err := chownForJail(r.cfg.Jail, workDir, p.hostIODir, filepath.Join(p.hostIODir, runtimes.ArgsFile)); err != nil {
			return p, err
		}
	} else {
		p.jail = r.cfg.Direct
		paths = runtimes.Paths{Script: filepath.Join(job.CodeDir, fn.Entry), ShimDir: r.cfg.ShimDir, IODir: p.hostIODir}
	}
	cmd, err := runtimes.Build(fn.Runtime, paths, raw, args)
	if err != nil {
		return p, terminal("%s: %w", fn.Name, err)
	}

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
		env = append(env, "PATH=/usr/local/bin:/usr/bin:/bin")
	}
	env = append(env, cmd.Env...)
	for _, e := range fn.Spec.Env {
		env = append(env, e.Name+"="+e.Value)
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
		p.spec.Mounts = []sandbox.Mount{
			{Source: job.CodeDir, Target: jailFunctionDir},
			{Source: r.cfg.ShimDir, Target: jailShimDir},
			{Source: p.hostIODir, Target: jailIODir, Writable: true},
		}
	}
	p.setup = time.Since(t0)
	return p, nil
}

// networkOf maps the annotation to the jail's network. The egress proxy is not built yet, so
// `proxy` (the default) means no network at all: closed is the safe reading of "only through
// the proxy" until the proxy exists.
func networkOf(m annot.NetworkMode) sandbox.Network {
	if m == annot.NetworkHost {
		return sandbox.NetworkHost
	}
	return sandbox.NetworkNone
}

func chownForJail(j *sandbox.Bwrap, paths ...string) error {
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
