package sandbox

// Template jails: a fork per job.
//
// A bwrap jail costs a whole bwrap and a runtime start per job. A Template is one jail per
// function version whose runtime has started and then forks a child per job, which is in a jail
// of its own before any byte of the job reaches it (the SOCK / zygote design). Its in-jail half
// is internal/runtimes/forkserver.py.
//
// The forks are made ahead: a template keeps a spare (two once a job found none ready), each
// sealed before its job exists, and a job is handed to one. So what is left on a job's path is handing it over (its
// stdio, its directories, its environment), not building its jail. What a spare gets, in
// order, before it says it is ready:
//
//   - new mount, pid, net, ipc and uts namespaces (unshare; the pid namespace needs the second
//     fork, so the job is pid 1 of its own), every mount made private;
//   - a /proc of its pid namespace (its own processes only), ptys of its own, loopback up in its
//     network namespace;
//   - its own cgroup (memory, pids limits), made by the host for this spare: the host passes its
//     tasks files, the spare moves itself in (a single-threaded process that moves itself takes
//     no global lock, which a host-side move does: milliseconds per job); then a new cgroup
//     namespace;
//   - a fresh size-limited tmpfs on /tmp and /dev/shm;
//   - a session of its own, every descriptor closed but its two sockets to the host and the
//     template's stdout and stderr (for what goes wrong before its job; the job's replace them);
//     the job's rlimits;
//   - every capability dropped (bounding set, ambient, effective, permitted, inheritable), and
//     the jobs' seccomp filter stacked on the template's;
//   - only then a ready to the host, which learns its pid from the kernel (SCM_CREDENTIALS).
//
// A job handed to a spare gets, in order: the egress listener in its network namespace
// (Spec.Listen, as for a bwrap jail, through /proc/<pid>/ns/net); its own /job and io
// directory: the host clones each (open_tree(OPEN_TREE_CLONE), volumes included, nosuid and
// nodev set on the clone) and passes the detached mounts to the spare's first process, which
// moves them onto their mount points in the mount namespace it shares with the job's pid 1
// (sealed, that one could not), so a job directory the host made after the template started (or
// a disk tree mounted on the host) reaches it, and no other job's directory is ever in the
// template's namespace; then its stdin, stdout and stderr, handed on by the first process once
// the directories are in place; and its environment (its secrets), written by the host straight
// to the job's pid 1, which reads it only once its stdio and directories are there. The
// arguments wait in the io directory, as for a cold start. Neither the template nor a spare's
// first process ever holds the environment.
//
// Why that is as isolated as a fresh bwrap. The child's view is a bwrap job's: the same
// read-only system and /etc (the template's mounts, built by bwrap exactly as a job's), its own
// writable places, no capabilities, no new privileges, the same seccomp filter, rlimits and
// cgroup limits, its own namespaces of every kind bwrap gives (the user namespace is the
// template's, a bwrap one with the same single uid mapped; nested ones stay refused:
// --disable-userns and the filter). It cannot reach the template: the template is in a parent
// pid namespace (no pid of it is visible, getppid is 0, kill and ptrace have nothing to name,
// and ptrace is refused anyway), in other mount, net, ipc and uts namespaces (no abstract
// socket, SysV object or /dev/shm file is shared), and holds nothing of the job. Memory is
// copy-on-write: what a job writes is its own, and the template, which never runs a job, holds
// nothing a job wrote; every job is a fresh copy of the same clean state. Its siblings are
// likewise in other namespaces of every kind. Its descriptors are only its stdio.
// The spare's first process, which keeps the template's capabilities to move the job's
// directories in, is as out of reach as the template: in the parent pid namespace, and
// holding only the job's directories (already the job's) and, briefly, its stdio.
// That the jail is built before the job exists changes none of it: a spare runs nothing but the
// fork server's code until its job comes, and nothing of the job reaches it before it is sealed
// but bytes queued in the kernel (its environment on its channel, as its arguments wait in a
// file), read only by the sealed process.
//
// What a template must give up for that. To build namespaces the template keeps
// CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_SETPCAP in its user namespace, and a filter that lets
// mount, unshare and move_mount through: kernel surface a job's jail denies. So nothing of the
// function runs in a template: not its module's top-level code, not its packages (not on
// sys.path; the template starts with none of the function's environment that could change what
// the interpreter loads). Only the interpreter, its standard library and our shim do; the
// function's code is imported by each job's child, after it has dropped every privilege. That
// is the one difference from a warm jail's speed-up: a Python function's imports are paid per
// job (a few hundred microseconds for a small module), its interpreter start is not.
//
// Where it is not the same as a fresh bwrap, and why it is accepted: every child of a template
// shares its address-space layout (ASLR) and its hash seed (PYTHONHASHSEED), as Android's
// zygote children do. A job that learns them learns its siblings', but it has no way to reach
// a sibling to make use of them. Bun is not forked at all (runtimes.CanFork).
//
// A job the template cannot serve (a network it was not built for, a mount it does not have,
// a template or spare that died) is refused by Start with ErrForkUnfit or ErrTemplateGone
// before anything of the job reached it: the caller runs it warm or cold and says why. A job
// whose limits are not the template's gets a spare made for it, on its path. A spare whose
// first process cannot move the job's directories into place kills its pid 1 before the job
// runs and reports exit 125, as a bwrap that cannot build a jail does.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
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

// StartTemplate starts a template jail (see the top of this file). It returns once bwrap has
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

// spareRequest is what the fork server reads per spare (forkserver.py), with the spare's
// sockets and its cgroup's tasks files.
type spareRequest struct {
	Slots   []string    `json:"slots"`
	WorkDir string      `json:"workdir"`
	Tmp     int64       `json:"tmp"`
	Rlimits [][3]uint64 `json:"rlimits"`
	Seccomp string      `json:"seccomp"`
	Cgroups int         `json:"cgroups"`
}

// fit checks that spec asks for nothing but what t gives: its command, its read-only mounts,
// a directory per slot, its network. It returns the host directory for each of t's slots, /job
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
	s, err := t.b.checkSpec(ctx, spec)
	if err != nil {
		return nil, err
	}
	dirs, err := t.fit(s)
	if err != nil {
		return nil, err
	}
	select {
	case <-t.gone:
		return nil, fmt.Errorf("%w: it ended", ErrTemplateGone)
	default:
	}
	limits := s.Limits.withDefaults()
	sp, err := t.take(ctx, limits)
	if err != nil {
		return nil, err
	}
	f := &forkRun{t0: t0, limits: limits, listen: s.Listen, done: make(chan struct{}), gone: make(chan struct{}),
		killed: make(chan struct{}), ended: make(chan int, 1), group: sp.group, c1: sp.c1, ch: sp.ch,
		pid: sp.pid, pidfd: sp.pidfd}
	f.marks.Entered, f.marks.Cgroup, f.marks.Built = t0, time.Now(), time.Now()
	ok := false
	defer func() {
		if !ok {
			f.release()
			if sp.listen != nil {
				sp.listen.Close()
			}
		}
	}()
	var child []int // the job's ends, closed once sent
	defer func() {
		for _, fd := range child {
			unix.Close(fd)
		}
	}()
	stdin, err := f.stdin(s.Stdin)
	if err != nil {
		return nil, err
	}
	child = append(child, stdin)
	stdout, err := f.output(s.Stdout)
	if err != nil {
		return nil, err
	}
	child = append(child, stdout)
	stderr, err := f.output(s.Stderr)
	if err != nil {
		return nil, err
	}
	child = append(child, stderr)
	for _, d := range dirs {
		fd, err := cloneTree(d)
		if err != nil {
			return nil, err
		}
		child = append(child, fd)
	}
	if s.Listen != nil {
		// Before the job can run: its first connection finds the socket there.
		l := sp.listen
		if l == nil || s.Listen.Addr != t.spec.ListenAt {
			if l, err = listenIn(f.pid, s.Listen.Addr); err != nil {
				return nil, err
			}
		}
		sp.listen = nil // the job's now: Ready owns it
		s.Listen.Ready(l)
		f.marks.Listened = time.Now()
	}
	if sp.listen != nil {
		// A job without a Listen (or at another address) has nothing at the template's.
		sp.listen.Close()
		sp.listen = nil
	}
	if _, _, err := f.c1.WriteMsgUnix([]byte("job"), unix.UnixRights(child...), nil); err != nil {
		return nil, fmt.Errorf("%w: hand the job to its spare: %v", ErrTemplateGone, err)
	}
	f.marks.Forked = time.Now()
	for _, fd := range child {
		unix.Close(fd)
	}
	child = nil
	// Straight to the job's pid 1, sealed since before the job existed; it reads it once its
	// directories and stdio are in place. Neither the template nor the spare's first process
	// ever holds it.
	env, err := json.Marshal(envObject(jailEnv(s.Env)))
	if err != nil {
		return nil, fmt.Errorf("sandbox: the fork's environment: %w", err)
	}
	if _, err := f.ch.Write(append(env, '\n')); err != nil {
		// Its pid 1 is gone: it read nothing of the job (its arguments wait unread).
		return nil, fmt.Errorf("%w: hand the job its environment: %v", ErrTemplateGone, err)
	}
	f.ch.Close()
	f.ch = nil
	f.marks.Released = time.Now()
	if f.group != nil {
		f.pids = watchPids(f.group)
	}
	ok = true
	go f.monitor(ctx, s.Timeout)
	return f, nil
}

// forkSpares is how many spares a template keeps sealed ahead of its jobs once one of its
// jobs found none ready: two, so that two jobs arriving together (or a job arriving while the
// last one's replacement is still being built) both find one. Until then it keeps one: a spare
// costs memory (about 8 MiB PSS for Python), and a function called now and then needs no more.
const forkSpares = 2

// spare is a fork of the template made ahead of its job (forkserver.py): in namespaces and a
// cgroup of its own, its pid 1 sealed (no capabilities, the jobs' filter and rlimits),
// waiting for a job's directories, stdio and environment.
type spare struct {
	group *runGroup
	// The host's ends of the spare's sockets, on Go's poller (a goroutine blocked in a raw read
	// holds a P, and two of them left no P for the job's output: a millisecond per job).
	c1     *net.UnixConn // to its first process: the job's fds, then the job's exit status
	ch     *net.UnixConn // to its pid 1: its ready, then the job's environment
	ready  chan struct{}
	pid    int // pid 1 of the spare's pid namespace, in the host's, once ready
	pidfd  int
	listen net.Listener // at the template's ListenAt, in its network namespace; nil without
	err    error
}

// refill asks the template for spares until it has t.want, made or on their way.
func (t *Template) refill() {
	for {
		t.mu.Lock()
		if t.closed || len(t.spares)+t.making >= max(t.want, 1) {
			t.mu.Unlock()
			return
		}
		t.making++
		t.mu.Unlock()
		sp, err := t.newSpare(t.limits)
		t.mu.Lock()
		t.making--
		if err == nil && !t.closed {
			t.spares = append(t.spares, sp)
			sp = nil
		}
		t.mu.Unlock()
		if sp != nil {
			sp.release()
		}
		if err != nil {
			return // the next Start tries again, and says why
		}
	}
}

// take returns the oldest spare, once it is ready, and has a new one made in its place. A job
// whose limits are not those the template was started with (its spares' cgroups, rlimits and
// tmpfs are made for those) gets a spare made for it.
func (t *Template) take(ctx context.Context, limits Limits) (*spare, error) {
	if limits != t.limits {
		sp, err := t.newSpare(limits)
		if err != nil {
			return nil, err
		}
		return t.readySpare(ctx, sp)
	}
	t.mu.Lock()
	var sp *spare
	if len(t.spares) > 0 {
		sp = t.spares[0]
		t.spares = t.spares[1:]
	}
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: it was closed", ErrTemplateGone)
	}
	if sp == nil {
		var err error
		if sp, err = t.newSpare(t.limits); err != nil {
			return nil, err
		}
	}
	select {
	case <-sp.ready:
	default:
		// This job waits for its spare: from now on the template keeps more of them.
		t.mu.Lock()
		t.want = forkSpares
		t.mu.Unlock()
	}
	go t.refill()
	return t.readySpare(ctx, sp)
}

// readySpare waits for sp to be sealed.
func (t *Template) readySpare(ctx context.Context, sp *spare) (*spare, error) {
	timer := time.NewTimer(forkHelloTimeout)
	defer timer.Stop()
	select {
	case <-sp.ready:
	case <-ctx.Done():
		sp.release()
		return nil, fmt.Errorf("sandbox: not started: %w", ctx.Err())
	case <-timer.C:
		sp.release()
		return nil, fmt.Errorf("%w: its spare did not seal itself within %v", ErrTemplateGone, forkHelloTimeout)
	}
	if sp.err != nil {
		sp.release()
		return nil, fmt.Errorf("%w: its spare did not seal itself: %v", ErrTemplateGone, sp.err)
	}
	// A spare killed while it waited (its pidfd turns readable) takes no job: the job would
	// only fail with it.
	if n, _ := unix.Poll([]unix.PollFd{{Fd: int32(sp.pidfd), Events: unix.POLLIN}}, 0); n > 0 {
		sp.release()
		return nil, fmt.Errorf("%w: its spare %d died waiting for a job", ErrTemplateGone, sp.pid)
	}
	return sp, nil
}

// dropSpares releases every spare: the template is closed or gone.
func (t *Template) dropSpares() {
	t.mu.Lock()
	t.closed = true
	spares := t.spares
	t.spares = nil
	t.mu.Unlock()
	for _, sp := range spares {
		sp.release()
	}
}

// newSpare makes a spare's cgroup and sockets, for jobs of limits, and asks the template to
// fork it.
func (t *Template) newSpare(limits Limits) (*spare, error) {
	sp := &spare{pidfd: -1, ready: make(chan struct{})}
	var child []int // the spare's ends, closed once sent
	defer func() {
		for _, fd := range child {
			unix.Close(fd)
		}
	}()
	fail := func(err error) (*spare, error) {
		close(sp.ready)
		sp.release()
		return nil, err
	}
	var err error
	if sp.group, err = t.b.newRunGroup(limits); err != nil {
		return fail(err)
	}
	var tasks []int
	if sp.group != nil {
		name := "tasks"
		if sp.group.version == CgroupV2 {
			name = "cgroup.procs"
		}
		for _, d := range sp.group.dirs {
			fd, err := unix.Open(filepath.Join(d, name), unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return fail(fmt.Errorf("sandbox: open the fork's cgroup %s: %w", d, err))
			}
			child = append(child, fd)
			tasks = append(tasks, fd)
		}
	}
	c1, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("sandbox: spare socket: %w", err))
	}
	child = append(child, c1[1])
	if sp.c1, err = hostConn(c1[0]); err != nil {
		return fail(err)
	}
	ch, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("sandbox: spare channel: %w", err))
	}
	child = append(child, ch[1])
	if err := unix.SetsockoptInt(ch[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		unix.Close(ch[0])
		return fail(fmt.Errorf("sandbox: spare channel: %w", err))
	}
	if sp.ch, err = hostConn(ch[0]); err != nil {
		return fail(err)
	}
	req := spareRequest{Slots: append([]string{JobDir}, t.spec.Slots...), WorkDir: JobDir, Tmp: limits.TmpSize,
		Seccomp: base64.StdEncoding.EncodeToString(t.b.seccomp.prog), Cgroups: len(tasks)}
	for _, r := range limits.rlimits() {
		req.Rlimits = append(req.Rlimits, [3]uint64{uint64(r.resource), r.lim.Cur, r.lim.Max})
	}
	msg, err := json.Marshal(req)
	if err != nil {
		return fail(fmt.Errorf("sandbox: spare request: %w", err))
	}
	fds := append([]int{c1[1], ch[1]}, tasks...)
	if err := unix.Sendmsg(int(t.ctl.Fd()), msg, unix.UnixRights(fds...), nil, 0); err != nil {
		return fail(fmt.Errorf("%w: send the spare request: %v", ErrTemplateGone, err))
	}
	go sp.await(t.spec.ListenAt)
	return sp, nil
}

// hostConn puts the host's end fd of a spare's socket on Go's poller; it takes fd.
func hostConn(fd int) (*net.UnixConn, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sandbox: spare socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "spare socket")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("sandbox: spare socket: %w", err)
	}
	return c.(*net.UnixConn), nil
}

// await waits for the spare's pid 1 to say it is sealed, and learns its pid from the kernel.
func (sp *spare) await(listenAt netip.AddrPort) {
	defer close(sp.ready)
	buf := make([]byte, 5)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	n, oobn, _, _, err := sp.ch.ReadMsgUnix(buf, oob)
	switch {
	case err != nil:
		sp.err = err
		return
	case n == 0 || string(buf[:n]) != "ready":
		sp.err = fmt.Errorf("it said %q", buf[:n])
		return
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) == 0 {
		sp.err = fmt.Errorf("no credentials with its ready: %v", err)
		return
	}
	cred, err := unix.ParseUnixCredentials(&msgs[0])
	if err != nil {
		sp.err = err
		return
	}
	sp.pid = int(cred.Pid)
	if sp.pidfd, err = unix.PidfdOpen(sp.pid, 0); err != nil {
		sp.err = fmt.Errorf("the spare %d: %w", sp.pid, err)
		return
	}
	if listenAt.IsValid() {
		sp.listen, sp.err = listenIn(sp.pid, listenAt)
	}
}

// release ends a spare that serves no job: its first process ends on the closed socket, and
// its pid 1 with it.
func (sp *spare) release() {
	if sp.ch != nil {
		sp.ch.Close() // ends a wait in await
	}
	<-sp.ready
	if sp.pidfd >= 0 {
		_ = unix.PidfdSendSignal(sp.pidfd, unix.SIGKILL, nil, 0)
		unix.Close(sp.pidfd)
	}
	if sp.c1 != nil {
		sp.c1.Close()
	}
	if sp.listen != nil {
		sp.listen.Close()
	}
	if sp.group != nil {
		sp.group.kill()
		_ = sp.group.remove()
	}
}

func envObject(m *envMap) map[string]string { return m.vals }

// cloneTree returns a detached copy of the mount tree at dir (its submounts, the job's
// volumes, included), nosuid and nodev as bwrap binds are, for a fork to move into place.
func cloneTree(dir string) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return -1, fmt.Errorf("sandbox: clone %s for the fork: %w", dir, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sandbox: make %s nosuid and nodev for the fork: %w", dir, err)
	}
	return fd, nil
}

// forkRun is the Handle of a job forked from a template.
type forkRun struct {
	t0     time.Time
	limits Limits
	listen *Listen
	group  *runGroup
	pids   *pidsWatch
	c1     *net.UnixConn // the spare's first process: the job's fds went there, its exit status comes back
	ch     *net.UnixConn // its pid 1's channel, until the environment is sent
	pid    int           // the job's pid 1, in the host's pid namespace
	pidfd  int
	marks  Marks

	copies  sync.WaitGroup // stdin, stdout and stderr copies
	readers []*os.File     // the host's ends of stdout and stderr

	ended    chan int
	killed   chan struct{}
	killOnce sync.Once
	mu       sync.Mutex
	res      *Result
	done     chan struct{} // res is set
	gone     chan struct{} // every process is gone, all released
}

// stdin returns the child's stdin: a pipe fed from r, or the null device.
func (f *forkRun) stdin(r io.Reader) (int, error) {
	if r == nil {
		fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("sandbox: fork stdin: %w", err)
		}
		return fd, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return -1, fmt.Errorf("sandbox: fork stdin: %w", err)
	}
	go func() {
		_, _ = io.Copy(pw, r)
		pw.Close()
	}()
	fd, err := unix.Dup(int(pr.Fd()))
	pr.Close()
	if err != nil {
		return -1, fmt.Errorf("sandbox: fork stdin: %w", err)
	}
	unix.CloseOnExec(fd)
	return fd, nil
}

// output returns the write end of a pipe whose reads go to w.
func (f *forkRun) output(w io.Writer) (int, error) {
	if w == nil {
		w = io.Discard
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return -1, fmt.Errorf("sandbox: fork output: %w", err)
	}
	f.readers = append(f.readers, pr)
	f.copies.Add(1)
	go func() {
		defer f.copies.Done()
		_, _ = io.Copy(w, pr)
	}()
	fd, err := unix.Dup(int(pw.Fd()))
	pw.Close()
	if err != nil {
		return -1, fmt.Errorf("sandbox: fork output: %w", err)
	}
	unix.CloseOnExec(fd)
	return fd, nil
}

// exitStatus reads the wait status the fork's first process (C1) reports once the job's pid 1
// is gone; ok is false when it never did (it was killed).
func (f *forkRun) exitStatus() (unix.WaitStatus, bool) {
	var all []byte
	buf := make([]byte, 64)
	for {
		n, err := f.c1.Read(buf)
		if n > 0 {
			all = append(all, buf[:n]...)
		}
		if err == unix.EINTR {
			continue
		}
		if n <= 0 || err != nil {
			break
		}
	}
	rest, found := bytes.CutPrefix(all, []byte("exit "))
	if !found {
		return 0, false
	}
	st, err := strconv.Atoi(string(rest))
	if err != nil {
		return 0, false
	}
	return unix.WaitStatus(st), true
}

func (f *forkRun) killAll() {
	if f.pidfd >= 0 {
		_ = unix.PidfdSendSignal(f.pidfd, unix.SIGKILL, nil, 0)
	}
	if f.group != nil {
		f.group.kill()
	}
}

// monitor waits for the run's end and tears it down, as process.monitor does for a bwrap.
func (f *forkRun) monitor(ctx context.Context, timeout time.Duration) {
	defer close(f.gone)
	res := &Result{StartDelay: f.marks.Released.Sub(f.t0), Marks: f.marks}
	type status struct {
		ws unix.WaitStatus
		ok bool
	}
	exited := make(chan status, 1)
	go func() {
		ws, ok := f.exitStatus()
		exited <- status{ws, ok}
	}()
	var expired <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		expired = timer.C
	}
	var st status
	select {
	case st = <-exited:
	case <-expired:
		res.TimedOut = true
		f.killAll()
		st = <-exited
	case <-ctx.Done():
		res.Canceled = true
		f.killAll()
		st = <-exited
	case <-f.killed:
		res.Canceled = true
		f.killAll()
		st = <-exited
	case <-f.pids.breached():
		f.killAll()
		st = <-exited
	case code := <-f.ended:
		res.Marks.Exited = time.Now()
		res.ExitCode = code
		f.account(res)
		f.deliver(res)
		f.killAll()
		<-exited
		f.release()
		return
	}
	res.Marks.Exited = time.Now()
	f.killAll() // what the job's pid 1 left: its namespace went with it, its cgroup may not have
	f.waitOutput()
	res.Marks.Gone = time.Now()
	res.Duration = time.Since(f.t0)
	switch {
	case !st.ok:
		res.ExitCode, res.Signal = -1, "SIGKILL"
	case st.ws.Signaled() && (res.TimedOut || res.Canceled):
		res.ExitCode, res.Signal = -1, unix.SignalName(st.ws.Signal())
	case st.ws.Signaled():
		// As bwrap reports a command killed by a signal.
		res.ExitCode = signalExit(st.ws.Signal())
	default:
		res.ExitCode = st.ws.ExitStatus()
		res.TimedOut, res.Canceled = false, false
	}
	if res.TimedOut {
		res.Limit = LimitTimeout
	}
	f.account(res)
	f.release()
	f.deliver(res)
}

// waitOutput waits, bounded, for the copies of the job's output: its pipes close once every
// process of the job is gone.
func (f *forkRun) waitOutput() {
	done := make(chan struct{})
	go func() {
		f.copies.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(waitDelay):
		for _, r := range f.readers {
			r.Close()
		}
	}
}

func (f *forkRun) account(res *Result) {
	var oom, pids uint64
	if f.group != nil {
		oom, pids = f.group.oomKills(), f.group.pidsRefused()
	}
	attributeLimit(res, f.limits, oom, pids)
}

func (f *forkRun) release() {
	f.pids.stop()
	if f.group != nil {
		f.group.kill()
		_ = f.group.remove()
		f.group = nil
	}
	if f.pidfd >= 0 {
		unix.Close(f.pidfd)
		f.pidfd = -1
	}
	for _, c := range []*net.UnixConn{f.ch, f.c1} {
		if c != nil {
			c.Close()
		}
	}
	for _, r := range f.readers {
		r.Close()
	}
}

func (f *forkRun) deliver(res *Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.res = res
	close(f.done)
}

// Wait implements Handle.
func (f *forkRun) Wait(ctx context.Context) <-chan *Result {
	c := make(chan *Result, 1)
	go func() {
		defer close(c)
		select {
		case <-f.done:
			c <- f.res
		case <-ctx.Done():
		}
	}()
	return c
}

// End implements Handle.
func (f *forkRun) End(code int) {
	select {
	case f.ended <- code:
	default:
	}
}

// Kill implements Handle.
func (f *forkRun) Kill() { f.killOnce.Do(func() { close(f.killed) }) }

// Destroy implements Handle.
func (f *forkRun) Destroy() {
	f.Kill()
	<-f.gone
}
