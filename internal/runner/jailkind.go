package runner

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/sandbox"
)

// Jail kinds.
//
// Every way for a job to get its jail is a jailKind: a fork of its function's template
// (fork.go), a warm jail started ahead of it (warm.go), or a jail of its own (cold; for a
// function without `sandbox`, the direct runner). As a Nomad task driver declares its
// Capabilities, each kind says up front which functions it can serve (fits); the runner
// chooses in one place (runJob), in the order of r.kinds: the first kind that fits and has a
// jail ready now (acquire). Whatever the kind, the job is then laid out (layOut), started
// through the sandbox.Jail its lease names (prepared.start) and released (prepared.release)
// the same way: the warm jail is a sandbox.Jail too, whose Start hands the job over.
//
// The one fallback left is a race no declaration rules out: a template or a warm jail that fit
// and was ready when chosen, but that was gone before anything of the job reached it
// (unserved). The job then runs as the next kind has it; nothing of it was lost.

// jailKind is one way for a job to get its jail.
type jailKind interface {
	// served is how an outcome and host_jobs_served_total name the kind.
	served() string
	// fits says why fn's jobs cannot get a jail of this kind at all; "" when they can.
	fits(fn *functions.Function) string
	// acquire returns a jail of this kind for job, or nil when none is ready now (its
	// template restarts, no warm jail waits).
	acquire(job *task) *lease
	// layOut lays the job out for its jail (see prepare): its directory, volumes and command,
	// in p.spec.
	layOut(ctx context.Context, job *task, p *prepared, in *layIn) error
	// unserved reports whether err, from laying the job out or starting it, means the jail
	// was gone before anything of the job reached it: the job then runs as the next kind has
	// it.
	unserved(job *task, err error) bool
}

// lease is the jail a job got from its kind.
type lease struct {
	kind jailKind
	// jail starts the job's spec: the host's jail (or Direct), the function's template, or
	// the warm jail itself.
	jail sandbox.Jail
	// What a jail running ahead of its job (warm) brings: the job directory it has bound since
	// it started, the placeholders its sealed secrets started with, and the jail itself, which
	// the job owns from now on: its release closes it whatever happens. held is nil for a jail
	// started for its job: nothing of the job is in a process before it starts.
	jd           *jobDir
	placeholders map[string]string
	held         io.Closer
}

// layIn is what prepare hands a kind's layOut.
type layIn struct {
	raw      []byte
	args     map[string]any
	extraEnv []string // what the job's secrets and tools set
	volumes  []string // its volumes' names
	t0       time.Time
}

// jailKinds are the ways to a jail, in the order they are chosen (Runner.kinds).
func (r *Runner) jailKinds() []jailKind {
	return []jailKind{reuseKind{r}, forkKind{r}, warmKind{r}, coldKind{r}}
}

// choose returns a lease of the first of kinds that fits job and has a jail ready, nil when
// none has; the log's debug level says why the kinds before it did not serve.
func (r *Runner) choose(job *task, kinds []jailKind) (*lease, []jailKind) {
	var passed []string
	for i, k := range kinds {
		why := k.fits(job.Fn)
		if why == "" {
			if l := k.acquire(job); l != nil {
				if ce := r.cfg.Log.Check(zap.DebugLevel, "the job's jail"); ce != nil {
					ce.Write(zap.String("function", job.Fn.Name), zap.String("job", job.ID), zap.String("kind", k.served()),
						zap.String("passed", strings.Join(passed, "; ")))
				}
				return l, kinds[i+1:]
			}
			why = "none ready"
		}
		passed = append(passed, k.served()+": "+why)
	}
	return nil, nil
}

// coldKind is a jail of the job's own, started for it: the host's jail, or Direct for a
// function without `sandbox`.
type coldKind struct{ r *Runner }

func (coldKind) served() string                  { return ServedCold }
func (coldKind) fits(*functions.Function) string { return "" }
func (k coldKind) acquire(job *task) *lease {
	l := &lease{kind: k, jail: k.r.cfg.Direct}
	if job.Fn.Spec.Sandbox && k.r.cfg.Jail != nil {
		l.jail = k.r.cfg.Jail
	}
	return l
}
func (k coldKind) layOut(ctx context.Context, job *task, p *prepared, in *layIn) error {
	return k.r.prepareCold(ctx, job, p, in)
}
func (coldKind) unserved(*task, error) bool { return false }

// forkKind is a fork of the function version's template (fork.go), laid out as a cold job.
type forkKind struct{ r *Runner }

func (forkKind) served() string                       { return ServedFork }
func (k forkKind) fits(fn *functions.Function) string { return k.r.forkable(fn) }
func (k forkKind) acquire(job *task) *lease {
	t := k.r.forks.take(job.Fn, job.CodeDir)
	if t == nil {
		return nil
	}
	return &lease{kind: k, jail: t}
}
func (k forkKind) layOut(ctx context.Context, job *task, p *prepared, in *layIn) error {
	return k.r.prepareCold(ctx, job, p, in)
}

// unserved: the template could not fork the job, before anything of it reached a process.
func (k forkKind) unserved(job *task, err error) bool {
	if !errors.Is(err, sandbox.ErrTemplateGone) && !errors.Is(err, sandbox.ErrForkUnfit) {
		return false
	}
	k.r.cfg.Log.Warn("the function's template could not fork a job; it runs warm or cold", zap.String("function", job.Fn.Name),
		zap.String("job", job.ID), zap.Error(err))
	return true
}

// warmKind is a warm jail of the function version (warm.go), which the job is handed to.
type warmKind struct{ r *Runner }

func (warmKind) served() string { return ServedWarm }
func (k warmKind) fits(fn *functions.Function) string {
	if k.r.WarmWanted(fn) == 0 {
		return "no warm jails (not jailed, warm: 0, or a runtime that cannot wait)"
	}
	return ""
}
func (k warmKind) acquire(job *task) *lease {
	w := k.r.warm.take(job.Fn, job.CodeDir)
	if w == nil {
		return nil
	}
	return w.lease(k)
}
func (k warmKind) layOut(ctx context.Context, job *task, p *prepared, in *layIn) error {
	return k.r.prepareHandover(ctx, job, p, in)
}

// unserved: the jail died between being taken and its hand-over: it never saw the job.
func (warmKind) unserved(_ *task, err error) bool { return errors.Is(err, errWarmGone) }
