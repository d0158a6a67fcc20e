package sandbox

// Template jails: a fork per job.
//
// A bwrap jail costs a whole bwrap and a runtime start per job. A Template is one jail per
// function version whose runtime has started and then forks a child per job; each child builds
// the job's jail around itself before any byte of the job reaches it (the SOCK / zygote design).
// Its in-jail half is internal/runtimes/forkserver.py. What a child gets, in order:
//
//   - new mount, pid, net, ipc and uts namespaces (unshare; the pid namespace needs the second
//     fork, so the job is pid 1 of its own), every mount made private;
//   - a fresh size-limited tmpfs on /tmp and /dev/shm;
//   - its own /job and io directory: the host clones each (open_tree(OPEN_TREE_CLONE), volumes
//     included, nosuid and nodev set on the clone) and passes the detached mount over the
//     control socket; the child moves it onto its mount point in its own mount namespace, so a
//     job directory the host made after the template started (or a disk tree mounted on the
//     host) reaches it, and no other job's directory is ever in the template's namespace;
//   - a /proc of its pid namespace: its own processes only; loopback up in its network
//     namespace;
//   - its own cgroup (memory, pids limits): the host makes it and passes its tasks files, the
//     child moves itself in (a single-threaded process that moves itself takes no global lock,
//     which a host-side move does: milliseconds per job); then a new cgroup namespace;
//   - a session of its own, the job's stdin, stdout and stderr, every other descriptor closed;
//     the job's rlimits;
//   - every capability dropped (bounding set, ambient, effective, permitted, inheritable), and
//     the jobs' seccomp filter stacked on the template's;
//   - only then a hello to the host, which learns the child's pid from the kernel
//     (SCM_CREDENTIALS), makes the egress listener in its network namespace (Spec.Listen, as
//     for a bwrap jail, through /proc/<pid>/ns/net), and sends the go with the job's environment
//     (its secrets); the arguments wait in the io directory, as for a cold start.
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
// a template that died) is refused by Start with ErrForkUnfit or ErrTemplateGone before
// anything of the job reached it: the caller runs it warm or cold and says why.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
}

// Template is a started template jail; it is a Jail whose Start forks a job from it.
type Template struct {
	b     *Bwrap
	spec  TemplateSpec
	proc  Handle
	tree  *bwrapTree
	ctl   *os.File // the host's end of the control socket
	mu    sync.Mutex
	gone  chan struct{}
	res   *Result
	close sync.Once
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
	t := &Template{b: b, spec: *ts, proc: proc, tree: h, ctl: ctl, gone: make(chan struct{})}
	t.spec.Spec = *s
	go func() {
		t.res = <-proc.Wait(context.Background())
		close(t.gone)
	}()
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
		t.ctl.Close() // the fork server exits on EOF
		select {
		case <-t.gone:
		case <-time.After(2 * time.Second):
		}
		t.proc.Destroy()
	})
}

// forkRequest is what the fork server reads per job (forkserver.py).
type forkRequest struct {
	Slots   []string    `json:"slots"`
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

// Start implements Jail: it forks spec's job from the template. An error wrapping
// ErrForkUnfit or ErrTemplateGone means nothing of the job reached a process of it.
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
	f := &forkRun{t0: t0, limits: s.Limits.withDefaults(), listen: s.Listen, done: make(chan struct{}), gone: make(chan struct{}),
		killed: make(chan struct{}), ended: make(chan int, 1), pidfd: -1}
	ok := false
	defer func() {
		if !ok {
			f.release()
		}
	}()
	var child []int // the fork's ends, closed once sent
	defer func() {
		for _, fd := range child {
			unix.Close(fd)
		}
	}()
	if f.group, err = t.b.newRunGroup(f.limits); err != nil {
		return nil, err
	}
	f.marks.Cgroup = time.Now()
	var tasks []int
	if f.group != nil {
		name := "tasks"
		if f.group.version == CgroupV2 {
			name = "cgroup.procs"
		}
		for _, d := range f.group.dirs {
			fd, err := unix.Open(filepath.Join(d, name), unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, fmt.Errorf("sandbox: open the fork's cgroup %s: %w", d, err)
			}
			child = append(child, fd)
			tasks = append(tasks, fd)
		}
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: fork channel: %w", err)
	}
	f.chanFd = pair[0]
	child = append(child, pair[1])
	if err := unix.SetsockoptInt(f.chanFd, unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		return nil, fmt.Errorf("sandbox: fork channel: %w", err)
	}
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
	var trees []int
	for _, d := range dirs {
		fd, err := cloneTree(d)
		if err != nil {
			return nil, err
		}
		child = append(child, fd)
		trees = append(trees, fd)
	}
	req := forkRequest{Slots: append([]string{JobDir}, t.spec.Slots...), Tmp: f.limits.TmpSize,
		Seccomp: base64.StdEncoding.EncodeToString(t.b.seccomp.prog), Cgroups: len(tasks)}
	for _, r := range f.limits.rlimits() {
		req.Rlimits = append(req.Rlimits, [3]uint64{uint64(r.resource), r.lim.Cur, r.lim.Max})
	}
	msg, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("sandbox: fork request: %w", err)
	}
	fds := append([]int{pair[1], stdin, stdout, stderr}, trees...)
	fds = append(fds, tasks...)
	t.mu.Lock()
	err = unix.Sendmsg(int(t.ctl.Fd()), msg, unix.UnixRights(fds...), nil, 0)
	t.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%w: send the fork request: %v", ErrTemplateGone, err)
	}
	f.marks.Forked = time.Now()
	for _, fd := range child {
		unix.Close(fd)
	}
	child = nil

	if f.pid, err = f.hello(ctx); err != nil {
		return nil, err
	}
	f.marks.Built = time.Now()
	if f.pidfd, err = unix.PidfdOpen(f.pid, 0); err != nil {
		return nil, fmt.Errorf("%w: the fork %d: %v", ErrTemplateGone, f.pid, err)
	}
	if s.Listen != nil {
		l, err := listenIn(f.pid, s.Listen.Addr)
		if err != nil {
			return nil, err
		}
		s.Listen.Ready(l)
		f.marks.Listened = time.Now()
	}
	env, err := json.Marshal(envObject(jailEnv(s.Env)))
	if err != nil {
		return nil, fmt.Errorf("sandbox: the fork's environment: %w", err)
	}
	if _, err := unix.Write(f.chanFd, append(env, '\n')); err != nil {
		return nil, fmt.Errorf("%w: hand the job over: %v", ErrTemplateGone, err)
	}
	f.marks.Entered, f.marks.Released = t0, time.Now()
	if f.group != nil {
		f.pids = watchPids(f.group)
	}
	ok = true
	go f.monitor(ctx, s.Timeout)
	return f, nil
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
	chanFd int
	pid    int // the job's pid 1, in the host's pid namespace
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

// hello waits for the sealed child's hello and returns its pid as the kernel gives it.
func (f *forkRun) hello(ctx context.Context) (int, error) {
	type said struct {
		pid int
		err error
	}
	got := make(chan said, 1)
	go func() {
		buf := make([]byte, 5)
		oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
		n, oobn, _, _, err := unix.Recvmsg(f.chanFd, buf, oob, 0)
		switch {
		case err != nil:
			got <- said{0, err}
			return
		case n == 0 || string(buf[:n]) != "hello":
			got <- said{0, fmt.Errorf("it said %q", buf[:n])}
			return
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) == 0 {
			got <- said{0, fmt.Errorf("no credentials with its hello: %v", err)}
			return
		}
		cred, err := unix.ParseUnixCredentials(&msgs[0])
		if err != nil {
			got <- said{0, err}
			return
		}
		got <- said{int(cred.Pid), nil}
	}()
	timer := time.NewTimer(forkHelloTimeout)
	defer timer.Stop()
	select {
	case s := <-got:
		if s.err != nil {
			return 0, fmt.Errorf("%w: its fork did not seal the job's jail: %v", ErrTemplateGone, s.err)
		}
		return s.pid, nil
	case <-ctx.Done():
		unix.Shutdown(f.chanFd, unix.SHUT_RDWR)
		return 0, fmt.Errorf("sandbox: not started: %w", ctx.Err())
	case <-timer.C:
		unix.Shutdown(f.chanFd, unix.SHUT_RDWR)
		return 0, fmt.Errorf("%w: its fork did not answer within %v", ErrTemplateGone, forkHelloTimeout)
	}
}

// exitStatus reads the wait status the fork's first process (C1) reports once the job's pid 1
// is gone; ok is false when it never did (it was killed).
func (f *forkRun) exitStatus() (unix.WaitStatus, bool) {
	var all []byte
	buf := make([]byte, 64)
	for {
		n, err := unix.Read(f.chanFd, buf)
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
	if f.chanFd > 0 {
		unix.Close(f.chanFd)
		f.chanFd = -1
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
