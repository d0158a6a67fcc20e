package sandbox

// Template jails (see doc.go): the template itself, what it serves (fit) and how a job is
// handed to one of its spares. Its spares are in fork_spares.go, a forked job's Handle in
// fork_handle.go.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

var (
	// ErrForkUnfit: the spec asks for what the template was not built for; run it otherwise.
	ErrForkUnfit = errors.New("sandbox: the job does not fit its function's template")
	// ErrTemplateGone: the template ended, or its fork failed before the job reached it.
	ErrTemplateGone = errors.New("sandbox: the template could not fork the job")
)

// templateCaps are what a template keeps in its user namespace for its forks (see above).
var templateCaps = []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SETPCAP"}

// forkHelloTimeout bounds the wait for a fork to say it is sealed: a template that does not
// answer within it is as good as gone.
const forkHelloTimeout = 10 * time.Second

// TemplateSpec describes a template jail.
type TemplateSpec struct {
	// Spec is the template's own jail: Argv its runtime in template mode, Env what every job of
	// the function gets and no secret, Mounts the read-only ones every job has (code, shims,
	// packages), Network and Limits the jobs'. WorkDir is not used: each job brings its own.
	// Stdout and Stderr get the template's own output (its ready line).
	Spec
	// JobArgv is the command of the jobs it serves (a cold start's), which Start checks.
	JobArgv []string
	// Slots are the writable mount points every job gets a directory of its own at, besides
	// /job (its io directory).
	Slots []string
	// ListenAt, when valid, is where its jobs' Spec.Listen sockets listen: each spare gets
	// its socket as it is sealed, so that a job's need not be made on its path.
	ListenAt netip.AddrPort
}

// Template is a started template jail; it is a Jail whose Start forks a job from it.
type Template struct {
	b      *Bwrap
	spec   TemplateSpec
	limits Limits // its jobs' (with defaults): every spare's cgroup and rlimits are made for them
	proc   Handle
	tree   *bwrapTree
	ctl    *os.File // the host's end of the control socket
	gone   chan struct{}
	res    *Result
	close  sync.Once

	mu     sync.Mutex
	spares []*spare // oldest first
	making int      // spares being made, not yet in spares
	want   int      // spares to keep: 1, forkSpares once a job had to wait for one
	closed bool
}

var _ Jail = (*Template)(nil)

// StartTemplate starts a template jail (see doc.go). It returns once bwrap has
// let its runtime go; the runtime says it is ready on Stdout as it likes.
func (b *Bwrap) StartTemplate(ctx context.Context, ts *TemplateSpec) (*Template, error) {
	t0 := time.Now()
	switch {
	case !b.hardened:
		return nil, errors.New("sandbox: a template needs a hardened bwrap")
	case len(ts.JobArgv) == 0:
		return nil, errors.New("sandbox: a template without the command of its jobs")
	case slices.Contains(ts.Slots, JobDir):
		return nil, errors.New("sandbox: /job is every template's slot; do not list it")
	}
	for _, m := range ts.Mounts {
		if m.Writable {
			return nil, fmt.Errorf("sandbox: template mount %s is writable: a template shares nothing writable with its jobs", m.Target)
		}
	}
	spec := ts.Spec
	if spec.WorkDir == "" {
		spec.WorkDir = "/"
	}
	s, err := b.checkSpec(ctx, &spec)
	if err != nil {
		return nil, err
	}
	// The template's own limits: the jobs', but no CPU time (it lives for many jobs; each job's
	// fork sets its own).
	jobLimits := s.Limits.withDefaults()
	s.Limits.CPUTime = 0
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: template control socket: %w", err)
	}
	ctl, jailEnd := os.NewFile(uintptr(fds[0]), "template control"), os.NewFile(uintptr(fds[1]), "template control (jail)")
	defer jailEnd.Close()
	s.Stdin = jailEnd

	args, copied := b.jailArgs(s.Network, s.Limits.withDefaults())
	i := slices.Index(args, "ALL")
	for _, c := range templateCaps {
		args = slices.Insert(args, i+1, "--cap-add", c)
	}
	for _, slot := range append([]string{JobDir}, ts.Slots...) {
		args = append(args, "--dir", slot)
	}
	for _, m := range s.Mounts {
		args = append(args, "--ro-bind", m.Source, m.Target)
	}
	args = append(args, b.roArgs()...)
	args = append(args, "--chdir", JobDir, "--")
	args = append(args, s.Argv...)

	h := &bwrapTree{hardened: true, dropRoot: b.dropRoot, uid: b.uid, gid: b.gid, limits: s.Limits.withDefaults(),
		seccompProg: b.seccomp.templateProg}
	cmd, err := b.command(s, args, copied, h)
	if err != nil {
		h.release()
		ctl.Close()
		return nil, err
	}
	proc, err := startProcess(ctx, cmd, 0, t0, h, false)
	if err != nil {
		ctl.Close()
		return nil, err
	}
	t := &Template{b: b, spec: *ts, limits: jobLimits, proc: proc, tree: h, ctl: ctl, gone: make(chan struct{})}
	t.spec.Spec = *s
	go func() {
		t.res = <-proc.Wait(context.Background())
		close(t.gone)
		t.dropSpares()
	}()
	// The spares' requests wait in the control socket until the runtime is ready for them.
	t.refill()
	return t, nil
}

// Name implements Jail.
func (t *Template) Name() string { return "fork" }

// Pids are the host pids of the template's processes: bwrap's init in its jail, and the
// runtime under it; for tests and for measuring its memory.
func (t *Template) Pids() []int {
	t.tree.init.mu.Lock()
	init := t.tree.init.pid
	t.tree.init.mu.Unlock()
	if init == 0 {
		return nil
	}
	pids := []int{init}
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", init, init))
	for _, f := range strings.Fields(string(data)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// Gone is closed once the template has ended.
func (t *Template) Gone() <-chan struct{} { return t.gone }

// Result is how the template ended, once Gone is closed.
func (t *Template) Result() *Result { return t.res }

// Close ends the template and returns once it is gone. Forks already serving a job go on
// until their jobs end: none depends on the template (each dies with its parent, though: the
// template is closed only when none of its jobs can still need it, or with the host).
func (t *Template) Close() {
	t.close.Do(func() {
		t.dropSpares()
		t.ctl.Close() // the fork server exits on EOF
		select {
		case <-t.gone:
		case <-time.After(2 * time.Second):
		}
		t.proc.Destroy()
	})
}

// first.
func (t *Template) fit(spec *Spec) ([]string, error) {
	if !slices.Equal(spec.Argv, t.spec.JobArgv) {
		return nil, fmt.Errorf("%w: command %q, the template serves %q", ErrForkUnfit, spec.Argv, t.spec.JobArgv)
	}
	if spec.Network != t.spec.Network {
		return nil, fmt.Errorf("%w: network %v, the template has %v", ErrForkUnfit, spec.Network, t.spec.Network)
	}
	dirs := []string{spec.WorkDir}
	var ro []Mount
	for _, m := range spec.Mounts {
		if !m.Writable {
			ro = append(ro, m)
			continue
		}
		i := slices.Index(t.spec.Slots, m.Target)
		if i < 0 {
			return nil, fmt.Errorf("%w: writable mount at %s, which is no slot of it", ErrForkUnfit, m.Target)
		}
		dirs = append(dirs, m.Source)
	}
	if len(dirs) != 1+len(t.spec.Slots) {
		return nil, fmt.Errorf("%w: %d of its %d slots filled", ErrForkUnfit, len(dirs)-1, len(t.spec.Slots))
	}
	// In the template's order, so that the slots line up with the directories.
	ordered := []string{dirs[0]}
	for _, slot := range t.spec.Slots {
		for _, m := range spec.Mounts {
			if m.Writable && m.Target == slot {
				ordered = append(ordered, m.Source)
			}
		}
	}
	if !slices.Equal(ro, t.spec.Mounts) {
		return nil, fmt.Errorf("%w: read-only mounts %v, the template has %v", ErrForkUnfit, ro, t.spec.Mounts)
	}
	return ordered, nil
}

// Start implements Jail: it hands spec's job to one of the template's spares. An error
// wrapping ErrForkUnfit or ErrTemplateGone means nothing of the job reached a process of it.
func (t *Template) Start(ctx context.Context, spec *Spec) (Handle, error) {
	t0 := time.Now()
	s, dirs, sp, err := t.spareFor(ctx, spec)
	if err != nil {
		return nil, err
	}
	f := &forkRun{t0: t0, limits: sp.limits, listen: s.Listen, done: make(chan struct{}), gone: make(chan struct{}),
		killed: make(chan struct{}), ended: make(chan int, 1), group: sp.group, c1: sp.c1, ch: sp.ch,
		pid: sp.pid, pidfd: sp.pidfd}
	f.marks.Entered, f.marks.Cgroup, f.marks.Built = t0, time.Now(), time.Now()
	if err := t.handOver(f, sp, s, dirs); err != nil {
		f.release()
		if sp.listen != nil {
			sp.listen.Close()
		}
		return nil, err
	}
	if f.group != nil {
		f.pids = watchPids(f.group)
	}
	go f.monitor(ctx, s.Timeout)
	return f, nil
}

// spareFor checks spec, that the template can serve it (fit) and is still there, and takes a
// spare for it; it returns the checked spec and the host directory of each slot, /job first.
func (t *Template) spareFor(ctx context.Context, spec *Spec) (*Spec, []string, *spare, error) {
	s, err := t.b.checkSpec(ctx, spec)
	if err != nil {
		return nil, nil, nil, err
	}
	dirs, err := t.fit(s)
	if err != nil {
		return nil, nil, nil, err
	}
	select {
	case <-t.gone:
		return nil, nil, nil, fmt.Errorf("%w: it ended", ErrTemplateGone)
	default:
	}
	sp, err := t.take(ctx, s.Limits.withDefaults())
	if err != nil {
		return nil, nil, nil, err
	}
	return s, dirs, sp, nil
}

// handOver gives the job to f's spare: its egress listener, its directories and stdio to the
// spare's first process, then its environment straight to its pid 1. An error wrapping
// ErrTemplateGone means nothing of the job reached the spare.
func (t *Template) handOver(f *forkRun, sp *spare, s *Spec, dirs []string) error {
	child, err := f.jobFds(s, dirs) // the job's ends, closed once sent
	if err == nil {
		err = t.listenFor(f, sp, s.Listen)
	}
	if err == nil {
		if _, _, err = f.c1.WriteMsgUnix([]byte("job"), unix.UnixRights(child...), nil); err != nil {
			err = fmt.Errorf("%w: hand the job to its spare: %v", ErrTemplateGone, err)
		}
	}
	for _, fd := range child {
		unix.Close(fd)
	}
	if err != nil {
		return err
	}
	f.marks.Forked = time.Now()
	return f.sendEnv(s.Env)
}

// listenFor makes the job's Spec.Listen socket in the spare's network namespace, before the
// job can run (its first connection finds the socket there): the one the spare was sealed
// with when it is at the same address. A spare's socket the job does not take is closed.
func (t *Template) listenFor(f *forkRun, sp *spare, listen *Listen) error {
	if listen != nil {
		l := sp.listen
		if l == nil || listen.Addr != t.spec.ListenAt {
			var err error
			if l, err = listenIn(f.pid, listen.Addr); err != nil {
				return err
			}
		}
		sp.listen = nil // the job's now: Ready owns it
		listen.Ready(l)
		f.marks.Listened = time.Now()
	}
	if sp.listen != nil {
		// A job without a Listen (or at another address) has nothing at the template's.
		sp.listen.Close()
		sp.listen = nil
	}
	return nil
}
