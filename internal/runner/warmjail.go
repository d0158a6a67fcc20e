package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/egress"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/sandbox"
)

// warmJail is one jail started ahead of its job: the handle of a jail started as a cold job's
// is (Jail.Start), and what its hand-over needs.
type warmJail struct {
	fn      *functions.Function
	reserve int64
	// jd is laid out as a cold job's: its job/ is bound at /job, its io/ at the io directory.
	jd         *jobDir
	egressDir  string      // where the job's egress socket goes (the jail init's way out)
	egressGate *egressGate // the proxy address the host holds in the jail (egressFromHost)
	// placeholders are its sealed secrets' placeholders, by variable, set from the start.
	placeholders map[string]string
	closers      []io.Closer // what else the jail holds (an egress directory elsewhere)

	stdin          *os.File // the write end of the runtime's stdin: the hand-over goes there
	stdout, stderr *handoffWriter

	// ctx bounds the jail: it is canceled at its job's end or timeout, or to tear it down.
	ctx     context.Context
	cancel  context.CancelCauseFunc
	started chan struct{}  // closed once Jail.Start returned: proc is set, or err
	proc    sandbox.Handle // the jail
	err     error          // Jail.Start's
	exited  chan struct{}  // closed once the jail ended (res is set) or never started
	res     *sandbox.Result

	// loaded is set, under warmPools.mu, once the runtime said it is ready and the jail is
	// still in its pool: it then counts as waiting, not starting.
	loaded bool

	closeOnce sync.Once
}

// startWarm starts a warm jail for fn's version in codeDir. It returns once the jail is laid
// out; the jail starts in the background and runs until it is handed a job or torn down. load is called
// right before the jail starts, once it is laid out; it may block (see warmPools.loading).
func (r *Runner) startWarm(fn *functions.Function, codeDir string, importAhead bool, reserve int64, load func()) (w *warmJail, err error) {
	lay := &prepared{}
	defer func() {
		if err != nil {
			lay.undo()
		}
	}()
	if lay.jd, err = r.makeJobDir(fn, "warm-"+fn.Name+"-"); err != nil {
		return nil, err
	}
	workDir := lay.jd.workDir
	paths := jailPaths(fn)
	cmd, err := runtimes.BuildWarm(fn.Runtime, paths, importAhead)
	if err != nil {
		return nil, err
	}
	pkgs, err := r.ensurePackages(context.Background(), &task{Job: &jobtype.Job{}, Fn: fn, CodeDir: codeDir})
	if err != nil {
		return nil, err
	}
	// What every job of the function gets, and nothing that only a job brings: its id, its
	// secrets and its arguments come with the hand-over.
	env := keptJailEnv(fn, paths, cmd.Env)
	// A sealed secret's placeholder is no secret, and this jail serves one job only: it is made
	// now, so that top-level code reading it at import sees what the job will, and the value is
	// bound to it at the hand-over.
	placeholders := map[string]string{}
	for _, e := range fn.Spec.Env {
		switch {
		case e.Sealed != nil:
			ph, err := egress.NewPlaceholder()
			if err != nil {
				return nil, err
			}
			placeholders[e.Name] = ph
			env = append(env, e.Name+"="+ph)
		case e.Secret == "":
			env = append(env, e.Name+"="+e.Value)
		}
	}
	if pkgs != nil {
		env = append(env, pkgs.Env...)
	}
	spec := &sandbox.Spec{Argv: cmd.Argv, WorkDir: workDir, Env: env, Network: networkOf(fn.Spec.Network.Mode)}
	r.jailLimitsAndMounts(spec, fn, codeDir, lay.jd.ioDir, pkgs)

	w = &warmJail{fn: fn, reserve: reserve, jd: lay.jd, placeholders: placeholders, stdout: &handoffWriter{ready: make(chan struct{})}, stderr: &handoffWriter{},
		started: make(chan struct{}), exited: make(chan struct{})}
	switch {
	case fn.Spec.Network.Mode != annot.NetworkProxy || r.cfg.Egress == nil:
	case r.egressFromHost():
		w.egressGate = newEgressGate()
		lay.closers = append(lay.closers, w.egressGate)
		spec.Listen = &sandbox.Listen{Addr: egressAddr, Ready: w.egressGate.hold}
		spec.Env = append(spec.Env, egress.Env("")...)
		r.trustHostCA(spec)
	default:
		if err := r.jailInitReady(); err != nil {
			return nil, err
		}
		if w.egressDir, err = r.egressDir(lay); err != nil {
			return nil, err
		}
		// The init wants its socket there from the start; until the hand-over nothing serves
		// it, so the top-level code gets no connection out. prepareHandover replaces it.
		if err := placeholderSocket(filepath.Join(w.egressDir, "egress.sock")); err != nil {
			return nil, err
		}
		r.bindEgress(spec, w.egressDir)
	}
	w.closers = lay.closers

	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("create the warm jail's hand-over pipe: %w", err)
	}
	w.stdin = stdinW
	spec.Stdin, spec.Stdout, spec.Stderr = stdinR, w.stdout, w.stderr
	w.ctx, w.cancel = context.WithCancelCause(context.Background())
	load()
	go w.run(r.cfg.Jail, spec, stdinR)
	return w, nil
}

// run starts the jail and waits for its end. A job may take the jail meanwhile: its hand-over
// waits in the stdin pipe.
func (w *warmJail) run(jail sandbox.Jail, spec *sandbox.Spec, stdinR *os.File) {
	defer close(w.exited)
	w.proc, w.err = jail.Start(w.ctx, spec)
	// The jail holds its own end now, or never will: a hand-over written to a jail that died
	// finds no reader and fails.
	stdinR.Close()
	close(w.started)
	if w.err == nil {
		w.res = <-w.proc.Wait(context.Background()) // w.ctx bounds the jail
	}
}

// placeholderSocket leaves a socket file at path that nothing accepts on.
func placeholderSocket(path string) error {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("create the warm jail's egress socket: %w", err)
	}
	l.SetUnlinkOnClose(false)
	return l.Close()
}

// alive reports whether the jail is still there.
func (w *warmJail) alive() bool {
	select {
	case <-w.exited:
		return false
	default:
		return true
	}
}

// lease makes w the jail of a job that took it: the job owns w from now on.
func (w *warmJail) lease(k jailKind) *lease {
	return &lease{kind: k, jail: w, jd: w.jd, placeholders: w.placeholders, held: w}
}

// Name implements sandbox.Jail.
func (w *warmJail) Name() string { return "warm" }

// Start implements sandbox.Jail: it hands a job over to the waiting jail and returns the
// jail's handle. spec.Stdin is the hand-over (runtimes.Handover); spec.Stdout and spec.Stderr
// get what the runtime printed so far and everything after; spec.Timeout counts from now. The
// rest of the job's spec has been the jail's since it started. It fails with errWarmGone when
// the jail had already ended, or never started: nothing of the job reached it.
func (w *warmJail) Start(ctx context.Context, spec *sandbox.Spec) (sandbox.Handle, error) {
	t0 := time.Now()
	if !w.alive() {
		return nil, errWarmGone
	}
	var handover []byte
	if spec.Stdin != nil {
		var err error
		if handover, err = io.ReadAll(spec.Stdin); err != nil {
			return nil, fmt.Errorf("read the job's hand-over: %w", err)
		}
	}
	w.stdout.attach(spec.Stdout)
	w.stderr.attach(spec.Stderr)
	stop := context.AfterFunc(ctx, func() { w.cancel(context.Cause(ctx)) })
	var timer *time.Timer
	if spec.Timeout > 0 {
		timer = time.AfterFunc(spec.Timeout, func() { w.cancel(errWarmTimeout) })
	}
	go func() {
		<-w.exited
		stop()
		if timer != nil {
			timer.Stop()
		}
	}()
	// A goroutine, as a bash script that never reads its stdin leaves a large payload unread;
	// the write ends with the jail at the latest (its read end closes).
	go func() {
		_, _ = w.stdin.Write(handover)
		w.stdin.Close()
	}()
	handed := time.Since(t0)
	<-w.started
	if w.err != nil {
		// The jail never started (Jail.Start's error), so nothing of the job reached it.
		return nil, fmt.Errorf("%w: %w", errWarmGone, w.err)
	}
	return &warmRun{w: w, handed: handed}, nil
}

// warmRun is the Handle of a job handed over to a warm jail: the jail's, whose Result counts
// the start from the hand-over and says TimedOut for the job's timeout.
type warmRun struct {
	w      *warmJail
	handed time.Duration
}

// Wait implements sandbox.Handle.
func (h *warmRun) Wait(ctx context.Context) <-chan *sandbox.Result {
	c := make(chan *sandbox.Result, 1)
	go func() {
		defer close(c)
		select {
		case <-h.w.exited:
			c <- h.result()
		case <-ctx.Done():
		}
	}()
	return c
}

func (h *warmRun) result() *sandbox.Result {
	res := *h.w.res
	if res.Err != nil {
		return &res
	}
	res.StartDelay = h.handed
	if res.Canceled && errors.Is(context.Cause(h.w.ctx), errWarmTimeout) {
		res.Canceled, res.TimedOut, res.Limit = false, true, sandbox.LimitTimeout
	}
	return &res
}

// End implements sandbox.Handle.
func (h *warmRun) End(code int) { h.w.proc.End(code) }

// Kill implements sandbox.Handle.
func (h *warmRun) Kill() { h.w.cancel(errWarmStopped) }

// Destroy implements sandbox.Handle: it closes the jail.
func (h *warmRun) Destroy() { h.w.Close() }

// Close kills the jail if it is still there, waits for it to be gone and releases what it held
// but its directory (its job's release removes that).
func (w *warmJail) Close() error {
	w.closeOnce.Do(func() {
		w.cancel(errWarmStopped)
		w.stdin.Close()
		<-w.started
		if w.proc != nil {
			w.proc.Destroy()
		}
		for _, c := range w.closers {
			c.Close()
		}
	})
	return nil
}

// teardown ends a jail that no job took.
func (w *warmJail) teardown() {
	w.Close()
	w.jd.remove()
}

// earlyOutput is the tail of what the jail printed before a job took it, for the log of a jail
// that died waiting.
func (w *warmJail) earlyOutput() string {
	return w.stderr.tail()
}

// handoffWriter keeps what a waiting jail writes until a job attaches its writer, then passes
// everything on. On stdout it also hears the runtime's ready line (runtimes.ReadyMarker); the
// job's line writer drops that line.
type handoffWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	dst io.Writer
	// ready, when not nil, is closed once the ready line was written or a job attached;
	// carry holds the last bytes written, for a line split across writes.
	ready chan struct{}
	heard bool
	carry []byte
}

func (h *handoffWriter) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dst != nil {
		return h.dst.Write(p)
	}
	if room := warmEarlyOutput - h.buf.Len(); room > 0 {
		h.buf.Write(p[:min(len(p), room)])
	}
	h.hearReady(p)
	return len(p), nil
}

// hearReady closes ready once the ready line has gone by. It looks at what was written, not
// at buf: top-level output past buf's size must not hide the line.
func (h *handoffWriter) hearReady(p []byte) {
	if h.ready == nil || h.heard {
		return
	}
	line := []byte(runtimes.ReadyMarker + "\n")
	seen := append(h.carry, p...)
	if bytes.Contains(seen, line) {
		h.heard = true
		close(h.ready)
		return
	}
	h.carry = append(h.carry[:0], seen[max(0, len(seen)-len(line)+1):]...)
}

func (h *handoffWriter) attach(dst io.Writer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.buf.Len() > 0 {
		_, _ = dst.Write(h.buf.Bytes())
		h.buf = bytes.Buffer{}
	}
	h.dst = dst
	if h.ready != nil && !h.heard {
		// Taken before it was ready: it loads for its job now, not ahead of demand, and the
		// start slot it held (see warmPools.loading) goes to the next jail.
		h.heard = true
		close(h.ready)
	}
}

func (h *handoffWriter) tail() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.buf.Bytes()
	return string(b[max(0, len(b)-2000):])
}

// prepareHandover finishes laying out a job that runs in w: its volumes go into the /job the
// jail has bound since it started, its egress socket is served, and its hand-over is built.
func (r *Runner) prepareHandover(ctx context.Context, job *task, p *prepared, in *layIn) error {
	fn, w, raw := job.Fn, p.lease.jail.(*warmJail), in.raw
	if err := r.mountVolumes(ctx, job, p, w.jd.root, in.volumes); err != nil {
		return err
	}
	cmd, err := runtimes.Build(fn.Runtime, jailPaths(fn), raw, in.args)
	if err != nil {
		return terminal("%s: %w", fn.Name, err)
	}
	env := []string{"JOB_ID=" + job.ID, "FLOW_ID=" + job.FlowID}
	if fn.Runtime == runtimes.Bash {
		// ARG_*, bounded as in a cold run: exported, they are in every command's environment.
		// Python's and Bun's settings are there already.
		env = append(env, cmd.Env...)
		sayOmitted(job, cmd)
	}
	env = append(env, in.extraEnv...)
	handover, err := runtimes.Handover(fn.Runtime, raw, env)
	if err != nil {
		return terminal("%s: %w", fn.Name, err)
	}
	if w.egressGate != nil {
		l, err := w.egressGate.open(ctx, w.exited)
		if err != nil {
			return err
		}
		c, err := r.cfg.Egress.Start(ctx, l, job.egressPolicy())
		if err != nil {
			return fmt.Errorf("serve the job's egress proxy: %w", err)
		}
		p.closers = append(p.closers, c)
	}
	if w.egressDir != "" {
		// Served beside the placeholder, then renamed over it: the jail's init, which may still
		// be starting, must find a socket at its path at every instant.
		served := filepath.Join(w.egressDir, "job.sock")
		if err := r.listenEgress(ctx, job, p, served); err != nil {
			return err
		}
		if err := os.Rename(served, filepath.Join(w.egressDir, "egress.sock")); err != nil {
			return fmt.Errorf("serve the job's egress proxy: %w", err)
		}
	}
	// The rest of the spec has been the jail's since it started.
	p.spec = &sandbox.Spec{Stdin: bytes.NewReader(handover), Timeout: r.timeoutOf(fn), Limits: r.cfg.Limits}
	if fn.Spec.Memory > 0 {
		p.spec.Limits.Memory = fn.Spec.Memory
	}
	p.setup = time.Since(in.t0)
	r.warm.m.handover.Observe(p.setup.Seconds())
	return nil
}

// keptJailEnv is the environment a jail that outlives a job starts with (warm, reused, a fork
// template): the host's part and the runtime's, nothing a job brings (its id, secrets,
// arguments), which comes with the job.
func keptJailEnv(fn *functions.Function, paths runtimes.Paths, runtimeEnv []string) []string {
	return append([]string{"HOME=" + sandbox.JobDir, "LANG=C.UTF-8", "TMPDIR=/tmp", "FUNCTION=" + fn.Name,
		"FUNCTION_DIR=" + filepath.Dir(paths.Script), "PATH=" + sandbox.JailPath}, runtimeEnv...)
}
