package runner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/sandbox"
)

// Fork per job (Config.Fork).
//
// For a sandboxed Python function the runner keeps, per version, one template jail
// (sandbox.Template): the interpreter and the shim started in the jail's mounts, which never
// runs a job nor any code of the function. Every job of that version is a fork of it, in
// namespaces, a cgroup and a filter of its own (see internal/sandbox/doc.go for why that is as
// isolated as a fresh bwrap). A job is laid out as a cold one is (its directory, arguments,
// volumes, egress); only the jail it starts in differs. A template serves any number of jobs at
// once, so, unlike a warm jail, nothing is consumed and replaced per job.
//
// A function the template cannot serve runs as before, warm or cold, and the log says why
// once: a runtime that cannot fork (Bun, bash), an environment that sets what the interpreter
// reads at its start (PYTHON*), a `network: proxy` on a host that does not hold the proxy
// address itself, `warm: 0` (nothing ahead of demand). A template that fails to start or dies
// is restarted with backoff; its jobs run warm or cold meanwhile.

const (
	// forkReadyTimeout bounds a template's start: an interpreter and the shim, no user code.
	forkReadyTimeout = 20 * time.Second
	forkBackoffMin   = time.Second
	forkBackoffMax   = time.Minute
)

// Served says how a jailed job got its jail (jobtype.Outcome.Served).
const (
	ServedFork = "fork"
	ServedWarm = "warm"
	ServedCold = "cold"
)

// templateStarter is a jail that can start template jails (*sandbox.Bwrap).
type templateStarter interface {
	StartTemplate(ctx context.Context, ts *sandbox.TemplateSpec) (*sandbox.Template, error)
}

// forkPools are the templates of every function.
type forkPools struct {
	r *Runner
	m *forkMetrics

	mu     sync.Mutex
	pools  map[string]*forkPool
	closed bool
	wg     sync.WaitGroup
}

// forkPool is one function version's template, kept up until the version goes.
type forkPool struct {
	fn      *functions.Function
	codeDir string
	tmpl    *sandbox.Template // ready, or nil
	stop    chan struct{}
	stopped bool
}

func newForkPools(r *Runner) *forkPools {
	return &forkPools{r: r, m: newForkMetrics(r.cfg.Registerer), pools: map[string]*forkPool{}}
}

// forkable says why fn's jobs cannot be forked from a template; "" when they can.
func (r *Runner) forkable(fn *functions.Function) string {
	switch {
	case !r.cfg.Fork:
		return "off (serve --fork)"
	case !fn.Spec.Sandbox || r.cfg.Jail == nil:
		return "not jailed"
	case !runtimes.CanFork(fn.Runtime):
		return "its runtime (" + string(fn.Runtime) + ") cannot be forked safely"
	}
	if _, ok := r.cfg.Jail.(templateStarter); !ok {
		return "this host's jail cannot start templates"
	}
	if fn.Spec.Network.Mode == annot.NetworkProxy && r.cfg.Egress != nil && !r.egressFromHost() {
		return "its proxy socket comes through the jail init, which a fork does not have"
	}
	for _, e := range fn.Spec.Env {
		if strings.HasPrefix(e.Name, "PYTHON") {
			return "its env: sets " + e.Name + ", which the interpreter reads at its start, before any job"
		}
	}
	return ""
}

// set keeps a template for fn's version codeDir when want, replacing one of another version;
// it tears the function's template down otherwise. It reports whether fn will be forked.
func (fp *forkPools) set(fn *functions.Function, codeDir string, want bool) bool {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	old := fp.pools[fn.Name]
	if old != nil && want && old.codeDir == codeDir && old.fn.Hash == fn.Hash {
		return true
	}
	if old != nil {
		fp.stopPool(old)
		delete(fp.pools, fn.Name)
	}
	if !want || fp.closed {
		return false
	}
	p := &forkPool{fn: fn, codeDir: codeDir, stop: make(chan struct{})}
	fp.pools[fn.Name] = p
	fp.wg.Add(1)
	go fp.keep(p)
	return true
}

// stopPool ends p's keeper and its template. fp.mu is held.
func (fp *forkPools) stopPool(p *forkPool) {
	if !p.stopped {
		p.stopped = true
		close(p.stop)
	}
}

// keep starts p's template and restarts it, with backoff, until p is stopped.
func (fp *forkPools) keep(p *forkPool) {
	defer fp.wg.Done()
	log := fp.r.cfg.Log.With(zap.String("function", p.fn.Name))
	backoff := forkBackoffMin
	for {
		t0 := time.Now()
		tmpl, err := fp.start(p)
		if err == nil {
			fp.mu.Lock()
			if p.stopped {
				fp.mu.Unlock()
				tmpl.Close()
				return
			}
			p.tmpl = tmpl
			fp.mu.Unlock()
			fp.m.templates.WithLabelValues(p.fn.Name).Set(1)
			fp.m.starts.Observe(time.Since(t0).Seconds())
			log.Info("a template jail serves the function's jobs by fork", zap.Duration("start", time.Since(t0)))
			select {
			case <-tmpl.Gone():
				err = errors.New("the template ended")
				if res := tmpl.Result(); res != nil {
					log.Warn("the function's template ended; its jobs run warm or cold until it is back", zap.Int("exit_code", res.ExitCode), zap.String("limit", res.Limit))
				}
				backoff = forkBackoffMin
			case <-p.stop:
			}
			fp.mu.Lock()
			p.tmpl = nil
			fp.mu.Unlock()
			fp.m.templates.WithLabelValues(p.fn.Name).Set(0)
			tmpl.Close()
		}
		select {
		case <-p.stop:
			return
		default:
		}
		fp.m.failed.WithLabelValues(p.fn.Name).Inc()
		log.Warn("the function's template is not serving; its jobs run warm or cold, and it is retried", zap.Duration("retry_in", backoff), zap.Error(err))
		select {
		case <-p.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, forkBackoffMax)
	}
}

// start starts a template for p and waits until its runtime is ready.
func (fp *forkPools) start(p *forkPool) (*sandbox.Template, error) {
	r, fn := fp.r, p.fn
	paths := jailPaths(fn)
	tcmd, err := runtimes.BuildTemplate(fn.Runtime, paths)
	if err != nil {
		return nil, err
	}
	jcmd, err := runtimes.Build(fn.Runtime, paths, nil, nil)
	if err != nil {
		return nil, err
	}
	pkgs, err := r.ensurePackages(context.Background(), &task{Job: &jobtype.Job{}, Fn: fn, CodeDir: p.codeDir})
	if err != nil {
		return nil, err
	}
	// The mounts and limits of the function's cold jobs, less what each job brings (its io
	// directory is a slot; see Template).
	spec := &sandbox.Spec{Argv: tcmd.Argv, Network: networkOf(fn.Spec.Network.Mode)}
	r.jailLimitsAndMounts(spec, fn, p.codeDir, "", pkgs)
	var ro []sandbox.Mount
	for _, m := range spec.Mounts {
		if !m.Writable {
			ro = append(ro, m)
		}
	}
	spec.Mounts = ro
	if fn.Spec.Network.Mode == annot.NetworkProxy && r.cfg.Egress != nil {
		r.trustHostCA(spec) // as wireEgress does for a cold job
		var kept []sandbox.Mount
		for _, m := range spec.Mounts {
			if !m.Writable {
				kept = append(kept, m)
			}
		}
		spec.Mounts, spec.Env = kept, nil
	}
	// Nothing of the function: not its env: (each job's fork gets its whole environment from
	// the host), not its packages' PYTHONPATH.
	spec.Env = keptJailEnv(fn, paths, tcmd.Env)
	ready := make(chan struct{})
	out := &handoffWriter{ready: ready}
	errs := &handoffWriter{}
	spec.Stdout, spec.Stderr = out, errs
	ts := &sandbox.TemplateSpec{Spec: *spec, JobArgv: jcmd.Argv, Slots: []string{jailIODir}}
	if fn.Spec.Network.Mode == annot.NetworkProxy && r.cfg.Egress != nil && r.egressFromHost() {
		ts.ListenAt = egressAddr // each spare gets the socket wireEgress would give its job
	}
	tmpl, err := r.cfg.Jail.(templateStarter).StartTemplate(context.Background(), ts)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(forkReadyTimeout)
	defer timer.Stop()
	select {
	case <-ready:
		// What the template prints from now on is its own (a fork's output goes to its job).
		out.attach(discardLog{})
		errs.attach(templateLog{fp.r.cfg.Log.With(zap.String("function", fn.Name))})
		return tmpl, nil
	case <-tmpl.Gone():
		err = errors.New("the template ended before it was ready: " + strings.TrimSpace(errs.tail()))
	case <-timer.C:
		err = errors.New("the template was not ready within " + forkReadyTimeout.String() + ": " + strings.TrimSpace(errs.tail()))
	case <-p.stop:
		err = errors.New("stopped")
	}
	tmpl.Close()
	return nil, err
}

type discardLog struct{}

func (discardLog) Write(p []byte) (int, error) { return len(p), nil }

// templateLog puts what a template (or a fork before its job exists) prints on stderr in the
// host's log.
type templateLog struct{ log *zap.Logger }

func (l templateLog) Write(p []byte) (int, error) {
	l.log.Warn("the function's template says", zap.String("output", strings.TrimSpace(string(p))))
	return len(p), nil
}

// take returns the ready template of fn's version codeDir, or nil.
func (fp *forkPools) take(fn *functions.Function, codeDir string) *sandbox.Template {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	p := fp.pools[fn.Name]
	if p == nil || p.codeDir != codeDir || p.fn.Hash != fn.Hash || p.tmpl == nil {
		return nil
	}
	select {
	case <-p.tmpl.Gone():
		return nil // its keeper restarts it
	default:
		return p.tmpl
	}
}

// close tears every template down.
func (fp *forkPools) close() {
	fp.mu.Lock()
	fp.closed = true
	for name, p := range fp.pools {
		fp.stopPool(p)
		delete(fp.pools, name)
	}
	fp.mu.Unlock()
	fp.wg.Wait()
}

// forkMetrics are the templates' Prometheus series; how each job was served is in
// host_jobs_served_total.
type forkMetrics struct {
	templates *prometheus.GaugeVec
	failed    *prometheus.CounterVec
	served    *prometheus.CounterVec
	starts    prometheus.Histogram
}

func newForkMetrics(reg prometheus.Registerer) *forkMetrics {
	f := promauto.With(reg) // nil: not registered
	m := &forkMetrics{
		templates: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "host_fork_templates_ready", Help: "Template jails ready to fork the function's jobs (0 or 1).",
		}, []string{"function"}),
		failed: f.NewCounterVec(prometheus.CounterOpts{
			Name: "host_fork_template_failures_total", Help: "Template jails that failed to start or ended; each is retried with backoff.",
		}, []string{"function"}),
		served: f.NewCounterVec(prometheus.CounterOpts{
			Name: "host_jobs_served_total", Help: "Jailed jobs by how they got their jail: fork (of a template), warm (a jail started ahead), cold (a jail of their own).",
		}, []string{"function", "how"}),
		starts: f.NewHistogram(prometheus.HistogramOpts{
			Name: "host_fork_template_start_seconds", Help: "Time from starting a template jail to its runtime being ready.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
	}
	return m
}
