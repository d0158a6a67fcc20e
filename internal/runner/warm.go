package runner

import (
	"errors"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/runtimes"
)

// Warm jails.
//
// For each sandboxed function the runner can keep jails started ahead of its jobs: built through
// the very Jail.Start a cold job goes through (same namespaces, cgroup limits, seccomp, mounts,
// init), each with a job directory of its own bound at /job, and the runtime loaded and blocked
// reading its stdin. A job takes one (take), gets its volumes checked out into that /job, its
// egress socket served, and is handed over on stdin (runtimes.Handover: the arguments, and the
// environment only the job brings: JOB_ID, secrets, bash's ARG_*). Its timeout counts from the
// hand-over. The jail serves that one job and ends with it; a replacement starts at once.
//
// Until the hand-over a jail holds nothing of any job: no secret, no argument, no volume, and
// its egress socket refuses connections. Its output meanwhile (the top-level code's) is kept
// and given to the job it then serves.

// Defaults of WarmConfig.
const (
	// DefaultWarm is how many jails wait per sandboxed function without a warm: annotation.
	DefaultWarm = 1
	// DefaultWarmMax caps the warm jails of a host: enough for a 40-step chain of distinct
	// functions to find a jail waiting at every step.
	DefaultWarmMax = 64
	// DefaultWarmMaxMemory caps the memory the warm jails of a host reserve.
	DefaultWarmMaxMemory = 4 << 30
	// WarmReserve is what a warm jail of a function without memory: reserves against
	// MaxMemory: more than a waiting Python or Bun with a few libraries loaded takes.
	WarmReserve = 64 << 20
)

const (
	// warmEarlyOutput bounds the output a waiting jail's top-level code may leave for its job.
	warmEarlyOutput = 1 << 20
	// warmLoadHold bounds how long a warm jail that has not said it is ready holds its start
	// slot (see warmPools.loading): a script whose top-level code takes long, or never ends,
	// must not keep every other function's jails from starting.
	warmLoadHold = 2 * time.Second
	// warmMaxDeaths is how many jails of a function in a row may die while waiting before
	// the runner stops replacing them ahead of demand: a function whose runtime cannot wait
	// would otherwise be restarted forever.
	warmMaxDeaths = 3
)

// WarmConfig sets how many warm jails a host keeps.
type WarmConfig struct {
	// PerFunction is the number of jails kept waiting for each sandboxed function without a
	// warm: annotation; none when zero.
	PerFunction int
	// Max caps the warm jails of the host, waiting or starting; DefaultWarmMax when zero.
	Max int
	// MaxMemory caps the memory they reserve, each its function's memory: limit or
	// WarmReserve without one; DefaultWarmMaxMemory when zero.
	MaxMemory int64
}

var (
	// errWarmGone: the warm jail had ended before its hand-over; the job runs cold.
	errWarmGone = errors.New("the warm jail ended before its job was handed over")
	// errWarmTimeout is the cause a warm jail is killed with at its job's timeout.
	errWarmTimeout = errors.New("timeout")
	// errWarmStopped is the cause a waiting jail is killed with when it is not needed anymore.
	errWarmStopped = errors.New("warm jail torn down")
)

// Warm keeps fn's warm jails: as many as its warm: annotation says, or the host's default,
// for this version (codeDir); jails of an earlier version are torn down. Functions that are
// not sandboxed, or whose runtime cannot wait (executables), get none. It does not block.
func (r *Runner) Warm(fn *functions.Function, codeDir string) {
	if r.keepReused(fn, codeDir) {
		return
	}
	want := r.WarmWanted(fn)
	why := r.forkable(fn)
	if want > 0 && why == "" && r.forks.set(fn, codeDir, true) {
		// Its template serves the jobs ahead of demand; warm jails would only hold memory.
		r.warm.set(fn, codeDir, 0)
		return
	}
	r.forks.set(fn, codeDir, false)
	if want > 0 && r.cfg.Fork && fn.Spec.Sandbox && r.cfg.Jail != nil {
		r.cfg.Log.Info("the function's jobs are not forked from a template; they run in warm jails", zap.String("function", fn.Name), zap.String("why", why))
	}
	r.warm.set(fn, codeDir, want)
}

// Cool tears down the warm jails of a function (removed, or no longer served) and returns
// once they are gone.
func (r *Runner) Cool(function string) {
	r.reuse.keep(function, "", "")
	r.forks.set(&functions.Function{Name: function}, "", false)
	r.warm.set(&functions.Function{Name: function}, "", 0)
}

// Close tears down every warm jail and returns once they are gone; jails already serving a
// job end with it. Runs after Close are cold.
func (r *Runner) Close() error {
	r.reuse.close()
	r.forks.close()
	r.warm.close()
	return nil
}

// WarmWanted is how many warm jails Warm keeps for fn: its `warm:` annotation, else the host's
// default; none for a function that is not jailed or whose runtime cannot wait warm.
func (r *Runner) WarmWanted(fn *functions.Function) int {
	if !fn.Spec.Sandbox || r.cfg.Jail == nil || !runtimes.CanWarm(fn.Runtime) {
		return 0
	}
	if fn.Spec.Warm != nil {
		return *fn.Spec.Warm
	}
	return r.cfg.Warm.PerFunction
}

// warmPools are the warm jails of every function.
type warmPools struct {
	r *Runner
	m *warmMetrics

	mu       sync.Mutex
	pools    map[string]*warmPool
	jails    int   // waiting or starting, over all pools
	reserved int64 // their reserves
	closed   bool
	wg       sync.WaitGroup // starts and teardowns in flight
	// loading has a slot per jail that may be loading at once. A jail's start is the CPU of a
	// runtime and a script's imports; a job that takes a warm jail starts its replacement,
	// and a flow of many steps would otherwise start as many replacements at once, all of
	// them competing with the flow's next steps for the machine.
	loading chan struct{}
}

// warmPool is one function version's waiting jails.
type warmPool struct {
	fn      *functions.Function
	codeDir string
	want    int
	reserve int64
	// importAhead: the runtime imports the script before its job. Off for functions with
	// secrets in their environment (their top-level code may read them), and once an import
	// ahead failed (runtimes.ExitImportAhead).
	importAhead bool
	ready       []*warmJail
	starting    int
	starts      sync.WaitGroup // the starts in flight, which Cool waits for
	stopped     bool
	deaths      int // jails in a row that died waiting
}

func newWarmPools(r *Runner) *warmPools {
	return &warmPools{r: r, m: newWarmMetrics(r.cfg.Registerer), pools: map[string]*warmPool{},
		loading: make(chan struct{}, max(1, runtime.NumCPU()/2))}
}

func (ps *warmPools) limits() (int, int64) {
	n, mem := ps.r.cfg.Warm.Max, ps.r.cfg.Warm.MaxMemory
	if n <= 0 {
		n = DefaultWarmMax
	}
	if mem <= 0 {
		mem = DefaultWarmMaxMemory
	}
	return n, mem
}

// set makes fn's pool want jails of version codeDir, replacing a pool of another version.
func (ps *warmPools) set(fn *functions.Function, codeDir string, want int) {
	ps.mu.Lock()
	var drop []*warmJail
	old := ps.pools[fn.Name]
	if old != nil && old.codeDir == codeDir && old.fn.Hash == fn.Hash && want > 0 {
		old.want = want
		ps.fill(old)
		ps.mu.Unlock()
		return
	}
	if old != nil {
		drop = ps.stop(old)
		delete(ps.pools, fn.Name)
		defer old.starts.Wait() // a start in flight tears its jail down itself
	}
	if want > 0 && !ps.closed {
		reserve := int64(WarmReserve)
		if lim := ps.r.cfg.Limits.Memory; lim > 0 {
			reserve = lim
		}
		if fn.Spec.Memory > 0 {
			reserve = fn.Spec.Memory
		}
		secretEnv := slices.ContainsFunc(fn.Spec.Env, func(e annot.Env) bool { return e.Secret != "" })
		p := &warmPool{fn: fn, codeDir: codeDir, want: want, reserve: reserve, importAhead: !secretEnv}
		ps.pools[fn.Name] = p
		ps.fill(p)
	}
	ps.mu.Unlock()
	ps.teardown(drop)
}

// stop marks p stopped and returns its waiting jails, for teardown. ps.mu is held.
func (ps *warmPools) stop(p *warmPool) []*warmJail {
	p.stopped = true
	drop := p.ready
	p.ready = nil
	for _, w := range drop {
		ps.release(p, w)
	}
	return drop
}

// release takes w out of the host's counts. ps.mu is held.
func (ps *warmPools) release(p *warmPool, w *warmJail) {
	ps.jails--
	ps.reserved -= w.reserve
	if w.loaded {
		ps.m.waiting.WithLabelValues(p.fn.Name).Dec()
	} else {
		ps.m.starting.WithLabelValues(p.fn.Name).Dec()
	}
}

// teardown ends jails that no job took, in parallel, and returns once they are gone.
func (ps *warmPools) teardown(drop []*warmJail) {
	var wg sync.WaitGroup
	for _, w := range drop {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.teardown()
		}()
	}
	wg.Wait()
}

// fill starts jails until p has what it wants, as far as the host's caps allow. ps.mu is held.
func (ps *warmPools) fill(p *warmPool) {
	maxJails, maxMem := ps.limits()
	for !p.stopped && !ps.closed && p.deaths < warmMaxDeaths && len(p.ready)+p.starting < p.want {
		if ps.jails+1 > maxJails || ps.reserved+p.reserve > maxMem {
			return
		}
		p.starting++
		ps.jails++
		ps.reserved += p.reserve
		ps.wg.Add(1)
		p.starts.Add(1)
		go ps.start(p, p.importAhead)
	}
}

// start starts one jail for p.
func (ps *warmPools) start(p *warmPool, importAhead bool) {
	defer ps.wg.Done()
	defer p.starts.Done()
	var loading bool
	unload := sync.OnceFunc(func() {
		if loading {
			<-ps.loading
		}
	})
	// The slot is taken once the jail is laid out and its packages are there (an install can
	// take minutes), right before its runtime starts loading.
	w, err := ps.r.startWarm(p.fn, p.codeDir, importAhead, p.reserve, func() {
		ps.loading <- struct{}{}
		loading = true
	})
	ps.mu.Lock()
	p.starting--
	if err != nil {
		unload()
		ps.jails--
		ps.reserved -= p.reserve
		p.deaths++
		ps.mu.Unlock()
		ps.r.cfg.Log.Warn("cannot start a warm jail; the function's jobs run cold", zap.String("function", p.fn.Name), zap.Error(err))
		return
	}
	if p.stopped || ps.closed {
		ps.jails--
		ps.reserved -= p.reserve
		ps.mu.Unlock()
		w.teardown()
		unload()
		return
	}
	p.ready = append(p.ready, w)
	ps.m.starting.WithLabelValues(p.fn.Name).Inc()
	ps.mu.Unlock()
	go func() {
		hold := time.NewTimer(warmLoadHold)
		defer hold.Stop()
		select {
		case <-w.stdout.ready:
			ps.loaded(p, w)
		case <-w.exited:
		case <-hold.C:
			unload()
			select {
			case <-w.stdout.ready:
				ps.loaded(p, w)
			case <-w.exited:
			}
		}
		unload()
		<-w.exited
		ps.ended(p, w, importAhead)
	}()
}

// loaded counts w as waiting: its runtime is loaded and reads its stdin for a job.
func (ps *warmPools) loaded(p *warmPool, w *warmJail) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if slices.Contains(p.ready, w) && !w.loaded {
		w.loaded = true
		ps.m.starting.WithLabelValues(p.fn.Name).Dec()
		ps.m.waiting.WithLabelValues(p.fn.Name).Inc()
	}
}

// ended handles a jail's end: one that was still waiting died (it was not torn down or taken),
// and is replaced.
func (ps *warmPools) ended(p *warmPool, w *warmJail, importAhead bool) {
	ps.mu.Lock()
	i := slices.Index(p.ready, w)
	if i < 0 {
		ps.mu.Unlock()
		return // taken by a job, or torn down
	}
	p.ready = slices.Delete(p.ready, i, i+1)
	ps.release(p, w)
	res := w.res
	aheadFailed := importAhead && res != nil && res.ExitCode == runtimes.ExitImportAhead
	if aheadFailed {
		p.importAhead = false
	} else {
		p.deaths++
		ps.m.died.WithLabelValues(p.fn.Name).Inc()
	}
	ps.fill(p)
	ps.mu.Unlock()
	if !aheadFailed {
		fields := []zap.Field{zap.String("function", p.fn.Name), zap.String("output", w.earlyOutput())}
		if res != nil {
			fields = append(fields, zap.Int("exit_code", res.ExitCode), zap.String("limit", res.Limit))
		}
		if w.err != nil {
			fields = append(fields, zap.Error(w.err))
		}
		ps.r.cfg.Log.Warn("a warm jail died while waiting for a job; it is replaced, and no job was handed to it", fields...)
	}
	w.teardown()
}

// take returns a live waiting jail of fn's version codeDir, or nil; a replacement starts.
func (ps *warmPools) take(fn *functions.Function, codeDir string) *warmJail {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.pools[fn.Name]
	if p == nil || p.codeDir != codeDir || p.stopped {
		return nil
	}
	// A loaded one first, else the oldest still starting (it has had the most time to load):
	// either beats a cold start. A dead one is left for ended.
	i := slices.IndexFunc(p.ready, func(w *warmJail) bool { return w.loaded && w.alive() })
	if i < 0 {
		i = slices.IndexFunc(p.ready, (*warmJail).alive)
	}
	if i < 0 {
		// Demand restarts a pool that gave up after deaths, one jail at a time.
		p.deaths = min(p.deaths, warmMaxDeaths-1)
		ps.fill(p)
		return nil
	}
	w := p.ready[i]
	p.ready = slices.Delete(p.ready, i, i+1)
	ps.release(p, w)
	ps.fill(p)
	return w
}

// served counts a job of function as a hit (run warm) or a miss (cold, although the function
// has warm jails).
func (ps *warmPools) served(function string, hit bool) {
	ps.mu.Lock()
	p := ps.pools[function]
	if p != nil && hit {
		p.deaths = 0
	}
	ps.mu.Unlock()
	switch {
	case hit:
		ps.m.hits.WithLabelValues(function).Inc()
	case p != nil:
		ps.m.misses.WithLabelValues(function).Inc()
	}
}

// close tears every waiting jail down and waits for starts in flight.
func (ps *warmPools) close() {
	ps.mu.Lock()
	ps.closed = true
	var drop []*warmJail
	for name, p := range ps.pools {
		drop = append(drop, ps.stop(p)...)
		delete(ps.pools, name)
	}
	ps.mu.Unlock()
	ps.teardown(drop)
	ps.wg.Wait()
}

// warmMetrics are the warm jails' Prometheus series.
type warmMetrics struct {
	hits, misses, died *prometheus.CounterVec
	waiting, starting  *prometheus.GaugeVec
	handover           prometheus.Histogram
}

func newWarmMetrics(reg prometheus.Registerer) *warmMetrics {
	f := promauto.With(reg) // nil: not registered
	m := &warmMetrics{
		hits: f.NewCounterVec(prometheus.CounterOpts{
			Name: "host_warm_hits_total", Help: "Jobs handed to a warm jail.",
		}, []string{"function"}),
		misses: f.NewCounterVec(prometheus.CounterOpts{
			Name: "host_warm_misses_total", Help: "Jobs of functions with warm jails that ran cold: none was waiting (or it had died).",
		}, []string{"function"}),
		died: f.NewCounterVec(prometheus.CounterOpts{
			Name: "host_warm_died_total", Help: "Warm jails that died while waiting for a job (OOM, killed, a runtime that exited); each is replaced.",
		}, []string{"function"}),
		waiting: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "host_warm_jails_waiting", Help: "Warm jails loaded (runtime, shim, and the script's top-level code when it is imported ahead) and waiting for a job.",
		}, []string{"function"}),
		starting: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "host_warm_jails_starting", Help: "Warm jails started but not loaded yet; a job that arrives meanwhile takes one rather than run cold.",
		}, []string{"function"}),
		handover: f.NewHistogram(prometheus.HistogramOpts{
			Name: "host_warm_handover_seconds", Help: "Time from taking a warm jail to its job being handed over (secrets, volumes, egress included).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14),
		}),
	}
	return m
}
