package runner

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/packages"
	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/sandbox"
	"github.com/agenthost/host/internal/trace"
)

// prepare lays the job out for its jail l: what every kind needs (the jail check, its volumes'
// names, its secrets and tools), then what l's kind does (jailKind.layOut).
func (r *Runner) prepare(ctx context.Context, job *task, raw []byte, args map[string]any, l *lease) (_ *prepared, err error) {
	t0 := time.Now()
	// Beside, not above, what it lays out: the job's egress proxy outlives it.
	_, span := trace.Start(ctx, "prepare", oteltrace.WithAttributes(attribute.String("agent.jail", l.kind.served())))
	defer func() { trace.EndErr(span, err) }()
	fn := job.Fn
	// From here on the job owns what l holds (a warm jail and its directory): its release ends
	// it whatever happens.
	p := &prepared{lease: l, jd: l.jd}
	if fn.Spec.Sandbox && r.cfg.Jail == nil {
		return p, terminal("function %s is marked `sandbox` but this host cannot jail it: %v", fn.Name, r.cfg.JailErr)
	}
	volumes, err := r.volumeNames(fn, args)
	if err != nil {
		return p, err
	}
	if l.placeholders != nil {
		job.placeholders = l.placeholders
	}
	raw, extraEnv, err := r.resolveSecrets(ctx, job, raw, args, &p.redact)
	if err != nil {
		return p, err
	}
	extraEnv = append(extraEnv, r.openTools(job, p)...)
	if job.Trace != "" {
		// The job's own calls join its flow's trace (W3C Trace Context, as Windmill passes it).
		extraEnv = append(extraEnv, "TRACEPARENT="+job.Trace)
	}
	return p, l.kind.layOut(ctx, job, p, &layIn{raw: raw, args: args, extraEnv: extraEnv, volumes: volumes, t0: t0})
}

// volumeNames are the names of fn's volumes, expanded from the arguments as sent, before
// secrets are resolved: a secret must never become part of a storage path.
func (r *Runner) volumeNames(fn *functions.Function, args map[string]any) ([]string, error) {
	vars := annot.Vars{Workspace: r.cfg.Workspace, Function: fn.Name, Args: args}
	names := make([]string, len(fn.Spec.Volumes))
	for i, v := range fn.Spec.Volumes {
		name, err := v.Expand(vars)
		if err != nil {
			return nil, terminal("volume %s: %w", v.Path, err)
		}
		names[i] = name
	}
	if len(names) > 0 && r.cfg.Volumes == nil {
		return nil, terminal("function %s declares volumes, but this host has no volume store", fn.Name)
	}
	return names, nil
}

// prepareCold lays out a job that runs in a jail of its own, or, for a function without
// `sandbox`, directly: its directory with its arguments and volumes, its command and
// environment, and for a jailed run its limits, mounts and egress.
func (r *Runner) prepareCold(ctx context.Context, job *task, p *prepared, in *layIn) error {
	fn, raw, args := job.Fn, in.raw, in.args
	jd, err := r.makeJobDir(fn, job.ID+"-")
	if err != nil {
		return err
	}
	p.jd = jd
	if err := r.writeArgs(fn, jd, raw); err != nil {
		return err
	}
	if err := r.mountVolumes(ctx, job, p, jd.root, in.volumes); err != nil {
		return err
	}
	place := r.placeCold(job, jd)
	cmd, err := runtimes.Build(fn.Runtime, place.paths, raw, args)
	if err != nil {
		return terminal("%s: %w", fn.Name, err)
	}
	sayOmitted(job, cmd)
	pkgs, err := r.ensurePackages(ctx, job)
	if err != nil {
		return err
	}
	p.spec = &sandbox.Spec{
		Argv:    cmd.Argv,
		WorkDir: jd.workDir,
		Env:     place.env(job, cmd, in.extraEnv, pkgs),
		Network: networkOf(fn.Spec.Network.Mode),
		Timeout: r.timeoutOf(fn),
	}
	if cmd.Stdin != nil {
		p.spec.Stdin = bytes.NewReader(cmd.Stdin)
	}
	if place.jailed {
		r.jailLimitsAndMounts(p.spec, fn, job.CodeDir, jd.ioDir, pkgs)
		if fn.Spec.Network.Mode == annot.NetworkProxy && r.cfg.Egress != nil {
			p.laid = time.Now()
			if err := r.wireEgress(ctx, job, p); err != nil {
				return err
			}
			p.egress = time.Now()
		}
	}
	if p.laid.IsZero() {
		p.laid = time.Now()
	}
	p.setup = time.Since(in.t0)
	return nil
}

// writeArgs gives Python and Bun their arguments in a file, which their shim deletes once
// read; bash and executables get them on stdin, so nothing of them is written to disk.
func (r *Runner) writeArgs(fn *functions.Function, jd *jobDir, raw []byte) error {
	if fn.Runtime != runtimes.Python && fn.Runtime != runtimes.Bun {
		return nil
	}
	if err := jd.io.WriteFile(runtimes.ArgsFile, raw, 0o600); err != nil {
		return hostTrouble("write arguments", err)
	}
	if fn.Spec.Sandbox && os.Geteuid() == 0 {
		uid, gid := r.cfg.Jail.Owner()
		if err := jd.io.Lchown(runtimes.ArgsFile, uid, gid); err != nil {
			return fmt.Errorf("hand the arguments to the jail user %d: %w", uid, err)
		}
	}
	return nil
}

// placement is where a cold run finds its script, the shims, its io directory and its home:
// in its jail, or, for a function without `sandbox`, on the host.
type placement struct {
	jailed bool
	paths  runtimes.Paths
	home   string
}

func (r *Runner) placeCold(job *task, jd *jobDir) placement {
	if job.Fn.Spec.Sandbox {
		return placement{jailed: true, paths: jailPaths(job.Fn), home: sandbox.JobDir}
	}
	return placement{home: jd.workDir,
		paths: runtimes.Paths{Script: filepath.Join(job.CodeDir, job.Fn.Entry), ShimDir: r.cfg.ShimDir, IODir: jd.ioDir}}
}

// env is a cold run's environment: the host's part, the runtime's, what the job's secrets set
// (extraEnv) and what its packages need.
func (pl placement) env(job *task, cmd *runtimes.Command, extraEnv []string, pkgs *packages.Installed) []string {
	env := []string{
		"HOME=" + pl.home,
		"LANG=C.UTF-8",
		"TMPDIR=/tmp",
		"JOB_ID=" + job.ID,
		"FLOW_ID=" + job.FlowID,
		"FUNCTION=" + job.Fn.Name,
		"FUNCTION_DIR=" + filepath.Dir(pl.paths.Script),
	}
	if pl.jailed {
		env = append(env, "PATH="+sandbox.JailPath)
	}
	env = append(env, cmd.Env...)
	env = append(env, extraEnv...)
	switch {
	case pkgs == nil:
	case pl.jailed:
		env = append(env, pkgs.Env...)
	default:
		env = append(env, pkgs.HostEnv...)
	}
	return env
}

// timeoutOf is fn's timeout: its `timeout:`, else the host's default.
func (r *Runner) timeoutOf(fn *functions.Function) time.Duration {
	if fn.Spec.Timeout > 0 {
		return fn.Spec.Timeout
	}
	return r.cfg.DefaultTimeout
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
