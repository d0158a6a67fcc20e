package runner

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/egress"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/sandbox"
)

// keptJail is a jail kept for many messages of one function version (reuse.go). It is a
// sandbox.Jail whose Start hands it one message.
type keptJail struct {
	pools   *reusePools
	pool    *reusePool
	fn      *functions.Function
	codeDir string

	jd        *jobDir     // its job/ is /job, its io/ the io directory; nil until started
	egressDir string      // where the message's egress socket goes (the jail init's way out)
	mux       *egressMux  // the proxy address the host holds in the jail (egressFromHost)
	closers   []io.Closer // what else the jail holds

	stdin          *os.File
	stdout, stderr *keptStream

	ctx     context.Context
	cancel  context.CancelCauseFunc
	started chan struct{} // closed once Jail.Start returned
	proc    sandbox.Handle
	err     error
	exited  chan struct{} // closed once the jail ended (res is set) or never started
	res     *sandbox.Result

	// served counts its messages; last is the run of the message it serves or served last.
	// Both are the serving message's: one message at a time.
	served int
	last   *keptRun
	// idleSince counts its returns to its pool (under reusePools.mu), for its idle expiry.
	idleSince int

	closeOnce sync.Once
}

// startKept lays kj out and starts its jail; its runtime loads while the first message's
// volumes and frame are made.
func (r *Runner) startKept(kj *keptJail, job *task) (err error) {
	fn := kj.fn
	lay := &prepared{}
	defer func() {
		if err != nil {
			lay.undo()
		}
	}()
	if lay.jd, err = r.makeJobDir(fn, "reuse-"+fn.Name+"-"); err != nil {
		return err
	}
	paths := jailPaths(fn)
	// Imported with the first message, never ahead: its top-level code then runs with that
	// message's environment, which has the function's secrets.
	cmd, err := runtimes.BuildReuse(fn.Runtime, paths, false)
	if err != nil {
		return err
	}
	pkgs, err := r.ensurePackages(context.Background(), &task{Job: job.Job, Fn: fn, CodeDir: kj.codeDir})
	if err != nil {
		return err
	}
	// What every message of the function gets; what only a message brings (its id, secrets,
	// sealed placeholders, arguments) comes in its frame.
	env := keptJailEnv(fn, paths, cmd.Env)
	for _, e := range fn.Spec.Env {
		if e.Sealed == nil && e.Secret == "" {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	if pkgs != nil {
		env = append(env, pkgs.Env...)
	}
	spec := &sandbox.Spec{Argv: cmd.Argv, WorkDir: lay.jd.workDir, Env: env, Network: networkOf(fn.Spec.Network.Mode)}
	r.jailLimitsAndMounts(spec, fn, kj.codeDir, lay.jd.ioDir, pkgs)
	switch {
	case fn.Spec.Network.Mode != annot.NetworkProxy || r.cfg.Egress == nil:
	case r.egressFromHost():
		kj.mux = newEgressMux()
		lay.closers = append(lay.closers, kj.mux)
		spec.Listen = &sandbox.Listen{Addr: egressAddr, Ready: kj.mux.hold}
		spec.Env = append(spec.Env, egress.Env("")...)
		r.trustHostCA(spec)
	default:
		if err := r.jailInitReady(); err != nil {
			return err
		}
		if kj.egressDir, err = r.egressDir(lay); err != nil {
			return err
		}
		// Nothing accepts there but during a message (keptEgress).
		if err := placeholderSocket(filepath.Join(kj.egressDir, "egress.sock")); err != nil {
			return err
		}
		r.bindEgress(spec, kj.egressDir)
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("create the reused jail's message pipe: %w", err)
	}
	kj.jd, kj.closers, kj.stdin = lay.jd, lay.closers, stdinW
	kj.stdout, kj.stderr = &keptStream{}, &keptStream{}
	kj.started, kj.exited = make(chan struct{}), make(chan struct{})
	spec.Stdin, spec.Stdout, spec.Stderr = stdinR, kj.stdout, kj.stderr
	kj.ctx, kj.cancel = context.WithCancelCause(context.Background())
	go kj.run(r.cfg.Jail, spec, stdinR)
	return nil
}

// run starts the jail and waits for its end.
func (kj *keptJail) run(jail sandbox.Jail, spec *sandbox.Spec, stdinR *os.File) {
	defer close(kj.exited)
	kj.proc, kj.err = jail.Start(kj.ctx, spec)
	stdinR.Close()
	close(kj.started)
	if kj.err == nil {
		kj.res = <-kj.proc.Wait(context.Background()) // kj.ctx bounds the jail
	}
}

func (kj *keptJail) alive() bool {
	if kj.exited == nil {
		return true // not started yet
	}
	select {
	case <-kj.exited:
		return false
	default:
		return true
	}
}

// view is the jail's directory as one message sees it: its release must not remove it.
func (kj *keptJail) view() *jobDir {
	d := &jobDir{dir: kj.jd.dir, workDir: kj.jd.workDir, ioDir: kj.jd.ioDir, root: kj.jd.root, io: kj.jd.io, tree: kj.jd.tree}
	d.removeOnce.Do(func() {})
	return d
}

// wipe empties /job and the io directory between messages, from the host: nothing the jail
// did (links, modes) can keep an entry there.
func (kj *keptJail) wipe() error {
	for _, d := range []struct {
		path string
		dir  interface{ RemoveAll(string) error }
	}{{kj.jd.workDir, kj.jd.root}, {kj.jd.ioDir, kj.jd.io}} {
		entries, err := os.ReadDir(d.path)
		if err != nil {
			return fmt.Errorf("empty the reused jail's %s: %w", d.path, err)
		}
		for _, e := range entries {
			if err := d.dir.RemoveAll(e.Name()); err != nil {
				return fmt.Errorf("empty the reused jail's %s: %w", d.path, err)
			}
		}
	}
	return nil
}

// awaitReady waits for the runtime's ready line after run's end: the jail is clean and waits
// for its next message. False when the jail ended first, or took longer than wait.
func (kj *keptJail) awaitReady(run *keptRun, wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-run.readyNext:
		return kj.alive()
	case <-kj.exited:
	case <-t.C:
	}
	return false
}

// teardown ends the jail and removes its directory.
func (kj *keptJail) teardown() {
	kj.closeOnce.Do(func() {
		if kj.jd == nil {
			return // never started
		}
		kj.cancel(errWarmStopped)
		kj.stdin.Close()
		<-kj.started
		if kj.proc != nil {
			kj.proc.Destroy()
		}
		<-kj.exited
		for _, c := range kj.closers {
			c.Close()
		}
		kj.jd.remove()
	})
}

// Name implements sandbox.Jail.
func (kj *keptJail) Name() string { return "reuse" }

// Start implements sandbox.Jail: it hands one message (spec.Stdin, its frame) to the jail and
// returns its run. spec.Stdout and spec.Stderr get what the runtime prints up to its end
// lines; spec.Timeout counts from now, and ends the jail.
func (kj *keptJail) Start(ctx context.Context, spec *sandbox.Spec) (sandbox.Handle, error) {
	t0 := time.Now()
	if !kj.alive() {
		return nil, errKeptGone
	}
	frame, err := io.ReadAll(spec.Stdin)
	if err != nil {
		return nil, fmt.Errorf("read the message's frame: %w", err)
	}
	run := &keptRun{kj: kj, t0: t0, ended: make(chan int, 1), readyNext: make(chan struct{}), done: make(chan struct{})}
	kj.last = run
	kj.stdout.attach(spec.Stdout, run, true)
	kj.stderr.attach(spec.Stderr, run, false)
	stop := context.AfterFunc(ctx, func() { kj.cancel(context.Cause(ctx)) })
	var timer *time.Timer
	if spec.Timeout > 0 {
		timer = time.AfterFunc(spec.Timeout, func() { run.timedOut.Store(true); kj.cancel(errKeptTimeout) })
	}
	go func() {
		// A goroutine: a runtime busy elsewhere leaves a large frame unread; the write ends
		// with the jail at the latest.
		if _, err := kj.stdin.Write(frame); err != nil {
			kj.cancel(fmt.Errorf("write the message's frame: %w", err))
		}
	}()
	go run.wait(stop, timer)
	return run, nil
}

// egressMux is the listener the host holds in a kept jail for its egress proxy: it refuses
// connections between messages (as the warm jail's gate), and hands them to the proxy of the
// message being served.
type egressMux struct {
	*egressGate
	mu  sync.Mutex
	cur *muxListener
}

func newEgressMux() *egressMux { return &egressMux{egressGate: newEgressGate()} }

// attach stops refusing, once for the jail, and returns the listener of one message's proxy.
func (m *egressMux) attach(ctx context.Context, gone <-chan struct{}) (*muxListener, error) {
	select {
	case <-m.made:
	case <-gone:
		return nil, errKeptGone
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refused != nil {
		if _, err := m.egressGate.open(ctx, gone); err != nil {
			return nil, err
		}
		m.refused = nil
		go m.dispatch()
	}
	l := &muxListener{m: m, conns: make(chan netConn, 16), closed: make(chan struct{})}
	m.cur = l
	return l, nil
}

func (m *egressMux) dispatch() {
	for {
		c, err := m.l.Accept()
		if err != nil {
			return // the jail's end
		}
		m.mu.Lock()
		l := m.cur
		m.mu.Unlock()
		if l == nil || !l.deliver(c) {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			c.Write(refuseBetween)
			c.Close()
		}
	}
}

// refuseBetween is what a connection made between two messages of a kept jail reads.
var refuseBetween = func() []byte {
	const body = "egress: no network between messages: a reused jail's proxy is its message's\n"
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}()
