package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/sandbox"
)

// Reused jails (`reuse: <n>`).
//
// A function with reuse: keeps jails that serve many of its messages, one after another: the
// runtime stays loaded (runtimes.BuildReuse), and a message is a frame on its stdin
// (runtimes.ReuseFrame). A jail is kept per function version (its snapshot directory), and a
// message takes an idle one or starts one: as many jails as messages run at once, which the
// function's concurrency bounds.
//
// What is the message's is made for it and gone after it. Its environment (JOB_ID, its
// secrets, fresh placeholders for its sealed secrets, bash's ARG_*) comes in its frame and
// replaces the previous message's; its volumes are checked out into /job before the frame and
// committed after its end, as a fresh jail's; its egress proxy is its own and closed at its
// end. After main the runtime kills every process the message left and empties /tmp and
// /dev/shm, then prints its end line; the host then empties /job and the io directory, and
// the jail is idle again once the runtime said it is ready. The module state of Python and
// Bun (globals, caches, threads) carries over, as in AWS Lambda.
//
// A message that fails (a non-zero end), times out, is canceled, exits the runtime, or leaves
// what cannot be cleaned ends its jail; so does the n-th message, a new version of the
// function (Warm), Cool and Close.

// ServedReuse: the job ran in a reused jail (`reuse:`).
const ServedReuse = "reuse"

const (
	// reuseReadyWait bounds the wait for a jail's ready line after a message's end: the runtime
	// prints it right after its end line, once clean.
	reuseReadyWait = 10 * time.Second
	// reuseReturnWait bounds how long a message waits for a jail on its way back to its pool
	// before it starts a new one.
	reuseReturnWait = time.Second
	// reuseIdle is how long a kept jail may wait idle for its next message before it is torn
	// down (AWS Lambda keeps an idle environment for minutes too).
	reuseIdle = 5 * time.Minute
)

var (
	// errKeptGone: the kept jail ended, or never started, before anything of the message
	// reached it; the message runs as the next kind has it.
	errKeptGone = errors.New("the reused jail ended before the message reached it")
	// errKeptTimeout is the cause a kept jail is killed with at its message's timeout.
	errKeptTimeout = errors.New("timeout")
)

// reuseKind is a jail kept for many messages of the function version (reuse:).
type reuseKind struct{ r *Runner }

func (reuseKind) served() string { return ServedReuse }
func (k reuseKind) fits(fn *functions.Function) string {
	switch {
	case fn.Spec.Reuse <= 0:
		return "no reuse: annotation"
	case !fn.Spec.Sandbox || k.r.cfg.Jail == nil:
		return "not jailed"
	case !runtimes.CanWarm(fn.Runtime):
		return "a runtime that cannot serve messages in a loop (an executable)"
	}
	return ""
}

func (k reuseKind) acquire(job *task) *lease {
	kj := k.r.reuse.take(job.Fn, job.CodeDir)
	return &lease{kind: k, jail: kj, held: &keptMsg{kj: kj}}
}

// layOut starts the jail when it is new, checks the message's volumes out into its /job, serves
// its egress proxy and builds its frame.
func (k reuseKind) layOut(ctx context.Context, job *task, p *prepared, in *layIn) error {
	r, fn := k.r, job.Fn
	m := p.lease.held.(*keptMsg)
	kj := m.kj
	if kj.jd == nil {
		if err := r.startKept(kj, job); err != nil {
			return fmt.Errorf("%w: %w", errKeptGone, err)
		}
	}
	if !kj.alive() {
		return errKeptGone
	}
	p.jd = kj.view()
	if err := r.mountVolumes(ctx, job, p, kj.jd.root, in.volumes); err != nil {
		return err
	}
	env := []string{"JOB_ID=" + job.ID, "FLOW_ID=" + job.FlowID}
	if fn.Runtime == runtimes.Bash {
		cmd, err := runtimes.Build(fn.Runtime, jailPaths(fn), in.raw, in.args)
		if err != nil {
			return terminal("%s: %w", fn.Name, err)
		}
		env = append(env, cmd.Env...)
		sayOmitted(job, cmd)
	}
	env = append(env, in.extraEnv...)
	frame, err := runtimes.ReuseFrame(fn.Runtime, in.raw, env)
	if err != nil {
		return terminal("%s: %w", fn.Name, err)
	}
	if err := r.keptEgress(ctx, job, kj, m); err != nil {
		return err
	}
	p.spec = &sandbox.Spec{Stdin: bytes.NewReader(frame), Timeout: r.timeoutOf(fn), Limits: r.cfg.Limits}
	if fn.Spec.Memory > 0 {
		p.spec.Limits.Memory = fn.Spec.Memory
	}
	p.setup = time.Since(in.t0)
	return nil
}

// unserved: the jail could not start, or died idle, before the message reached it.
func (k reuseKind) unserved(job *task, err error) bool {
	if !errors.Is(err, errKeptGone) {
		return false
	}
	k.r.cfg.Log.Info("the function's reused jail was gone before the message reached it; it runs in a fresh jail", zap.String("function", job.Fn.Name),
		zap.String("job", job.ID), zap.Error(err))
	return true
}

// keepReused keeps the jails of fn's version codeDir, and tears down the idle ones of its other
// versions. It reports whether fn's messages run in reused jails: it then needs no warm jails
// and no template, which would only hold memory.
func (r *Runner) keepReused(fn *functions.Function, codeDir string) bool {
	if reuseKind.fits(reuseKind{r}, fn) != "" {
		r.reuse.keep(fn.Name, "", "")
		return false
	}
	r.reuse.keep(fn.Name, codeDir, fn.Hash)
	r.forks.set(fn, codeDir, false)
	r.warm.set(fn, codeDir, 0)
	return true
}

// keptEgress serves the message's own egress proxy in kj: on the listener the host holds in the
// jail, or at the socket the jail's init forwards to. It is closed at the message's release,
// before the jail serves another.
func (r *Runner) keptEgress(ctx context.Context, job *task, kj *keptJail, m *keptMsg) error {
	switch {
	case kj.mux != nil:
		l, err := kj.mux.attach(ctx, kj.exited)
		if err != nil {
			return err
		}
		c, err := r.cfg.Egress.Start(ctx, l, job.egressPolicy())
		if err != nil {
			return fmt.Errorf("serve the job's egress proxy: %w", err)
		}
		m.closers = append(m.closers, c)
	case kj.egressDir != "":
		// Served beside the socket of the message before, then renamed over it: the jail's init
		// must find a socket at its path at every instant.
		served := filepath.Join(kj.egressDir, "job.sock")
		held := &prepared{}
		err := r.listenEgress(ctx, job, held, served)
		m.closers = append(m.closers, held.closers...)
		if err != nil {
			return err
		}
		if err := os.Rename(served, filepath.Join(kj.egressDir, "egress.sock")); err != nil {
			return fmt.Errorf("serve the job's egress proxy: %w", err)
		}
	}
	return nil
}

// keptMsg is what one message holds of its kept jail until its release: its egress proxy, and
// the say on whether the jail serves another.
type keptMsg struct {
	kj      *keptJail
	closers []io.Closer
	once    sync.Once
}

// Close is the message's release: its egress proxy ends, and its jail goes back to its pool
// once clean and ready, or is torn down.
func (m *keptMsg) Close() error {
	m.once.Do(func() {
		for i := len(m.closers) - 1; i >= 0; i-- {
			m.closers[i].Close()
		}
		m.kj.pools.release(m.kj)
	})
	return nil
}

// reusePools are the kept jails of every function version.
type reusePools struct {
	r      *Runner
	mu     sync.Mutex
	pools  map[reuseKey]*reusePool
	closed bool
	wg     sync.WaitGroup // releases and teardowns in flight
}

type reuseKey struct{ name, codeDir, hash string }

// reusePool is one function version's kept jails that are idle, and how many it has at all.
type reusePool struct {
	key     reuseKey
	reuse   int // the version's reuse: n
	idle    []*keptJail
	jails   int // idle or serving
	stopped bool
	// returning counts the jails between their message's release and being idle (or gone);
	// back is closed, and replaced, as each arrives.
	returning int
	back      chan struct{}
}

func newReusePools(r *Runner) *reusePools {
	return &reusePools{r: r, pools: map[reuseKey]*reusePool{}}
}

// take returns an idle live jail of fn's version, or a new one that layOut starts. A jail
// that is on its way back from its last message (its ready line, the wipe: microseconds) is
// waited for rather than a new one started.
func (ps *reusePools) take(fn *functions.Function, codeDir string) *keptJail {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	key := reuseKey{fn.Name, codeDir, fn.Hash}
	p := ps.pools[key]
	if p == nil || p.stopped {
		p = &reusePool{key: key, reuse: fn.Spec.Reuse, back: make(chan struct{})}
		if !ps.closed {
			ps.pools[key] = p
		} else {
			p.stopped = true // runs all the same, and is torn down at its release
		}
	}
	deadline := time.Now().Add(reuseReturnWait)
	for {
		for len(p.idle) > 0 {
			kj := p.idle[len(p.idle)-1]
			p.idle = p.idle[:len(p.idle)-1]
			if kj.alive() {
				kj.last = nil
				return kj
			}
			p.jails--
			ps.teardownLater(kj)
		}
		wait := time.Until(deadline)
		if p.returning == 0 || wait <= 0 {
			break
		}
		back := p.back
		ps.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-back:
		case <-t.C:
		}
		t.Stop()
		ps.mu.Lock()
	}
	p.jails++
	return &keptJail{pools: ps, pool: p, fn: fn, codeDir: codeDir}
}

// returned says that a jail of p is back (idle) or gone. ps.mu is held.
func (p *reusePool) returned() {
	p.returning--
	close(p.back)
	p.back = make(chan struct{})
}

// release ends a message of kj: kj goes back to its pool once its runtime said it is clean and
// ready, and its /job and io directory are emptied; or it is torn down. It does not block, but
// on a host that is stopping.
func (ps *reusePools) release(kj *keptJail) {
	kj.served++
	run := kj.last
	keep := run != nil && run.clean() && kj.served < kj.pool.reuse && kj.alive()
	ps.mu.Lock()
	if ps.closed {
		// The host is stopping (close waits for what it counted already): gone now.
		kj.pool.jails--
		ps.mu.Unlock()
		kj.teardown()
		return
	}
	p := kj.pool
	p.returning++
	ps.wg.Add(1)
	ps.mu.Unlock()
	go func() {
		defer ps.wg.Done()
		if keep {
			keep = kj.awaitReady(run, reuseReadyWait) && kj.wipe() == nil
		}

		ps.mu.Lock()
		if keep && !p.stopped && !ps.closed {
			p.idle = append(p.idle, kj)
			p.returned()
			kj.idleSince++
			since := kj.idleSince
			ps.mu.Unlock()
			time.AfterFunc(reuseIdle, func() { ps.expire(kj, since) })
			return
		}
		p.jails--
		p.returned()
		ps.mu.Unlock()
		kj.teardown()
	}()
}

// expire tears kj down when it is still idle since the release that counted since: a function
// that had a burst of messages does not keep its jails forever.
func (ps *reusePools) expire(kj *keptJail, since int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := kj.pool
	i := slices.Index(p.idle, kj)
	if i < 0 || kj.idleSince != since {
		return
	}
	p.idle = slices.Delete(p.idle, i, i+1)
	p.jails--
	ps.teardownLater(kj)
}

// teardownLater tears kj down in the background. ps.mu is held.
func (ps *reusePools) teardownLater(kj *keptJail) {
	ps.wg.Add(1)
	go func() {
		defer ps.wg.Done()
		kj.teardown()
	}()
}

// keep makes fn's version codeDir the one whose jails are kept: the idle jails of its other
// versions are torn down (those serving a message are at its release); with none (Cool, or no
// reuse: anymore), every one of fn's.
func (ps *reusePools) keep(name, codeDir, hash string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for key, p := range ps.pools {
		if key.name != name || (key.codeDir == codeDir && key.hash == hash) {
			continue
		}
		ps.stopLocked(key, p)
	}
}

func (ps *reusePools) stopLocked(key reuseKey, p *reusePool) {
	p.stopped = true
	for _, kj := range p.idle {
		p.jails--
		ps.teardownLater(kj)
	}
	p.idle = nil
	delete(ps.pools, key)
}

// close tears every kept jail down and waits for it; jails serving a message end with it.
func (ps *reusePools) close() {
	ps.mu.Lock()
	ps.closed = true
	for key, p := range ps.pools {
		ps.stopLocked(key, p)
	}
	ps.mu.Unlock()
	ps.wg.Wait()
}

// idleJails returns how many jails fn's version codeDir keeps idle, for tests.
func (ps *reusePools) idleJails(name string) []*keptJail {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []*keptJail
	for key, p := range ps.pools {
		if key.name == name {
			out = slices.Concat(out, p.idle)
		}
	}
	return out
}
