package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// JobDir is where Spec.WorkDir appears inside the jail.
	JobDir = "/job"
	// Hostname is the jail's fixed host name: the host's name says where a
	// job runs, which is none of the job's business.
	Hostname = "job"
	// JailPath is the PATH a jailed command gets when Spec.Env has none.
	JailPath = "/usr/local/bin:/usr/bin:/bin"
	// DefaultUID and DefaultGID (nobody/nogroup) are the host ids the jail
	// runs as when the host runs as root.
	DefaultUID = 65534
	DefaultGID = 65534
)

// rootLinks are the top-level system paths that merged-/usr hosts make
// symlinks into /usr and older hosts keep as directories.
var rootLinks = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcFiles is the curated, read-only /etc: what common programs need to
// resolve names, load libraries, verify TLS and tell the time, and nothing
// that can hold secrets (no shadow, gshadow, ssl/private, pip.conf, npmrc,
// gitconfig, machine-id...). Missing entries are skipped.
var etcFiles = []string{
	"passwd", "group", // names for ls/id; the hashes live in shadow
	"hosts", "host.conf", "resolv.conf", "nsswitch.conf", "gai.conf",
	"services", "protocols", "networks", "rpc",
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	"localtime", "timezone",
	"ssl/certs", "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf",
	"pki/tls/certs", "pki/ca-trust/extracted",
	"alternatives",
	"mime.types", "magic", "magic.mime", "fonts",
	"os-release", "debian_version", "lsb-release",
	"locale.alias",
}

// The job's environment reaches the jail through neither bwrap's own
// environment nor its command line: both are readable in /proc/<pid>/environ
// and /proc/<pid>/cmdline by every process of the jail's uid on the host
// (and the command line by everyone), and env: values are secrets. Run
// starts bwrap with an empty environment and hands it "--setenv NAME VALUE"
// for each variable through --args, a pipe bwrap reads NUL-separated
// arguments from and closes; bwrap applies them with setenv(3) on its heap,
// which /proc/<pid>/environ (the initial block) does not show. This also
// keeps loader variables (LD_PRELOAD=<a file in /job>, GCONV_PATH, ...) away
// from bwrap's own dynamic loader and libc, which run on the host.

// envArgs is the --args content that sets env (jail defaults included).
// Spec.validate has refused NUL in env, so no value can smuggle an argument.
func envArgs(env []string) []byte {
	m := jailEnv(env)
	var b []byte
	for _, k := range m.keys {
		b = append(b, "--setenv\x00"...)
		b = append(b, k...)
		b = append(b, 0)
		b = append(b, m.vals[k]...)
		b = append(b, 0)
	}
	return b
}

// argsPipe returns the read end of a pipe that will hold data, for bwrap's
// --args, which reads it to EOF. A goroutine writes it, since an environment
// may exceed a pipe's buffer; it ends at EOF, or with EPIPE once every read
// end is closed (bwrap gone, or never started).
func argsPipe(data []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: args pipe: %w", err)
	}
	go func() {
		_, _ = w.Write(data) // a bwrap that died early is reported by supervise
		w.Close()
	}()
	return r, nil
}

// Bwrap is a Jail backed by bubblewrap. It is safe for concurrent use.
//
// Hardened (the default), each run also gets:
//   - a seccomp filter (see deniedSyscalls), handed to bwrap with --seccomp;
//   - a cgroup of its own for the memory and pids limits, which every
//     process of the job is in from its first instruction;
//   - rlimits: open files, CPU time, file size, no core dumps;
//   - a size-limited tmpfs on /tmp and /dev/shm, and a read-only /dev.
//
// The cgroup and the rlimits are set without a race, and without
// re-executing the host binary as a helper (a Go binary's start-up costs
// milliseconds per run, most of a jailed no-op):
//   - bwrap starts inside the run's cgroup (see runGroup.start), so the
//     jail and everything it forks are in it from the first instruction;
//   - bwrap is started with --block-fd: its jail init, once the jail is
//     built, waits for a byte before it starts the command. Meanwhile Run,
//     which learned the init's pid on --info-fd, sets the init's rlimits
//     (prlimit); the command and all its descendants inherit them.
//
// Run does this as the host user (root): the cgroup is never delegated to
// the jail's uid, which cannot write to it (/sys is not even mounted).
type Bwrap struct {
	jailSetup
}

var _ Jail = (*Bwrap)(nil)

// NewBwrap finds bubblewrap and checks that it can build a jail on this host
// (user namespaces may be disabled). A missing bwrap is ErrNoJail. Hardened,
// it also detects the cgroups and builds the seccomp filter; see Describe.
func NewBwrap(cfg Config) (*Bwrap, error) { return newBwrap(cfg, true) }

// NewBwrapUnhardened is bubblewrap's namespaces without the hardening (no
// seccomp, cgroups, rlimits or tmpfs sizes): the floor `host bench`
// measures the hardening's cost against. It never runs jobs; a run that
// asks for a limit fails.
func NewBwrapUnhardened(cfg Config) (*Bwrap, error) { return newBwrap(cfg, false) }

func newBwrap(cfg Config, hardened bool) (*Bwrap, error) {
	b := &Bwrap{}
	if err := b.setup("bwrap", cfg, hardened); err != nil {
		return nil, err
	}
	if err := b.probe(); err != nil {
		return nil, err
	}
	// Only hardened: the command then waits for the host's go-ahead, given once the socket
	// is there.
	b.listensIn = b.hardened && canEnterNetns()
	return b, nil
}

// probe runs `true` in a jail built like a job's, hardening included, so
// that a host where bwrap cannot work (no user namespaces, seccomp or
// AppArmor policy, cgroups that refuse a process) is reported once,
// clearly, instead of as every job's stderr.
func (b *Bwrap) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := &Spec{Argv: []string{"true"}}
	args, copied := b.jailArgs(NetworkNone, spec.Limits.withDefaults())
	args = append(args, b.roArgs()...)
	args = append(args, "--chdir", "/", "--", "true")
	var out strings.Builder
	spec.Stdout, spec.Stderr = &out, &out
	res, err := b.run(ctx, spec, args, copied, time.Now())
	if err == nil && (res.ExitCode != 0 || res.TimedOut) {
		err = fmt.Errorf("exit code %d", res.ExitCode)
	}
	if err != nil {
		return fmt.Errorf("sandbox: %s cannot build a jail on this host (a sandbox function never runs unjailed): %w: %s",
			b.path, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Describe is a line for the host's start log: the jail tool, and how
// limits and syscalls are enforced, e.g. "bwrap /usr/bin/bwrap, hardened:
// cgroup v1 (memory, pids) under ...; seccomp on (...); rlimits ...".
func (b *Bwrap) Describe() string {
	if !b.hardened {
		return fmt.Sprintf("bwrap %s, NOT hardened: no seccomp, cgroups, rlimits or tmpfs sizes", b.path)
	}
	return fmt.Sprintf("bwrap %s, hardened: %s; %s; rlimits (open files %d, CPU time, file size, no core dumps); /tmp %s, pids %d by default",
		b.path, b.cgroups.Describe(), b.seccomp.describe(), DefaultOpenFiles, FormatBytes(DefaultTmpSize), DefaultPids)
}

// Name implements Jail.
func (b *Bwrap) Name() string { return "bwrap" }

// args returns the bwrap arguments (without the binary) that jail spec,
// and the host files that Run must open, in order, from etcFirstFD on;
// spec.WorkDir must be absolute (Run makes it so). Run adds only
// "--info-fd 3" in front, to track the jail's init, when hardened
// "--block-fd 4 --seccomp 5" (see Bwrap), and "--args N" for the
// environment, which is never among the arguments (see envArgs). The
// curated /etc files are copied in from descriptors that Run opens and
// passes from etcFirstFD on (see jailArgs).
func (b *Bwrap) args(spec *Spec) (a, copied []string) {
	a, copied = b.jailArgs(spec.Network, spec.Limits.withDefaults())
	// bwrap creates missing mount points, so /job needs no --dir.
	a = append(a, "--bind", spec.WorkDir, JobDir)
	for _, m := range spec.Mounts {
		op := "--ro-bind"
		if m.Writable {
			op = "--bind"
		}
		a = append(a, op, m.Source, m.Target)
	}
	a = append(a, b.roArgs()...)
	a = append(a, "--chdir", JobDir)
	a = append(a, "--")
	return append(a, spec.Argv...), copied
}

// roArgs come last, once every mount point has been created: the root
// tmpfs bwrap builds on is otherwise writable, and "system directories
// read-only" includes /etc and the top level. Hardened, /dev goes
// read-only too: its tmpfs has no size limit (device nodes stay usable).
func (b *Bwrap) roArgs() []string {
	if b.hardened {
		return []string{"--remount-ro", "/dev", "--remount-ro", "/"}
	}
	return []string{"--remount-ro", "/"}
}

// etcFirstFD is the descriptor of the first /etc file Run passes to
// bwrap: after --info-fd 3, when hardened --block-fd 4 and --seccomp 5, and
// the --args pipe.
func (b *Bwrap) etcFirstFD() int {
	if b.hardened {
		return 7
	}
	return 5
}

// jailArgs is everything but the job-specific part: namespaces, identity,
// and the read-only system. lim has its defaults filled in. copied are the
// /etc files that bwrap copies from descriptors (see etcFirstFD).
func (b *Bwrap) jailArgs(network Network, lim Limits) (a, copied []string) {
	a = []string{
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
	}
	if network != NetworkHost {
		a = append(a, "--unshare-net")
	}
	a = append(a,
		// Nested user namespaces are kernel attack surface a job has no use for.
		"--disable-userns",
		"--uid", strconv.Itoa(b.uid), "--gid", strconv.Itoa(b.gid),
		"--hostname", Hostname,
		// The jail goes when bwrap goes, and bwrap when the host does.
		// (The kernel ties this to the thread that forked bwrap. Go only
		// ends a thread when a goroutine exits while locked to it, which
		// is why the threads this package locks are unlocked again; and
		// Run must not be called from a goroutine that exits locked.)
		"--die-with-parent",
		// A new session keeps the job from pushing input into a terminal
		// it inherited (TIOCSTI).
		"--new-session",
		"--cap-drop", "ALL",
		"--ro-bind", "/usr", "/usr",
	)
	for _, p := range rootLinks {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(p); err == nil {
				a = append(a, "--symlink", target, p)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", p, p)
		}
	}
	a = append(a, "--perms", "0755", "--dir", "/etc")
	for _, name := range etcFiles {
		p := "/etc/" + name
		// Keep a symlink into /usr a symlink (programs read the zone name
		// from /etc/localtime's target); bind the content of any other
		// (resolv.conf -> /run/...), whose target is not in the jail.
		if target, ok := usrSymlink(p); ok {
			a = append(a, "--symlink", target, p)
			continue
		}
		// A file anyone may read is copied into the jail's root (read-only
		// once / is remounted) rather than bound: each bind costs bwrap a
		// mount and a reread of the growing mount table, ~0.1 ms apiece,
		// 2-3 ms a job for the two dozen files here. Directories, and files
		// the jail's user may not read, are still bound: a copy made by a
		// root host would hand their content over.
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o004 != 0 {
			a = append(a, "--file", strconv.Itoa(b.etcFirstFD()+len(copied)), p)
			copied = append(copied, p)
			continue
		}
		a = append(a, "--ro-bind-try", p, p)
	}
	// A new procfs for the jail's pid namespace: only the job's processes.
	a = append(a, "--proc", "/proc", "--dev", "/dev")
	if !b.hardened {
		return append(a, "--tmpfs", "/tmp"), copied
	}
	size := strconv.FormatInt(lim.TmpSize, 10)
	return append(a,
		"--size", size, "--tmpfs", "/tmp",
		// Over --dev's own /dev/shm directory, which is on /dev's tmpfs.
		"--size", size, "--tmpfs", "/dev/shm",
	), copied
}

// usrSymlink reports whether p is a symlink that resolves into /usr, and
// its link text.
func usrSymlink(p string) (string, bool) {
	target, err := os.Readlink(p)
	if err != nil {
		return "", false
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil || !strings.HasPrefix(resolved, "/usr/") {
		return "", false
	}
	return target, true
}

// jailEnv is spec's environment with the jail's defaults.
func jailEnv(env []string) *envMap {
	m := newEnvMap(env)
	m.setDefault("HOME", JobDir)
	m.setDefault("PATH", JailPath)
	return m
}

func (b *Bwrap) sysProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{}
	if b.dropRoot {
		// An empty Groups clears root's supplementary groups too.
		attr.Credential = &syscall.Credential{Uid: uint32(b.uid), Gid: uint32(b.gid), Groups: []uint32{}}
	}
	return attr
}

// Run implements Jail. A command that bwrap cannot find or exec inside the
// jail is reported by bwrap on Stderr with exit code 1, not as an error:
// the jail's PATH is only known inside it. A limit that cannot be enforced
// (a memory or pids limit without usable cgroups, any limit when not
// hardened) is an error.
func (b *Bwrap) Run(ctx context.Context, spec *Spec) (*Result, error) {
	t0 := time.Now()
	s, err := b.checkSpec(ctx, spec)
	if err != nil {
		return nil, err
	}
	args, copied := b.args(s)
	return b.run(ctx, s, args, copied, t0)
}

// run runs bwrap with args (args without the fds) for spec; copied are the
// files args expects on descriptors from etcFirstFD on.
func (b *Bwrap) run(ctx context.Context, spec *Spec, args, copied []string, t0 time.Time) (*Result, error) {
	lim := spec.Limits.withDefaults()
	h := &bwrapTree{hardened: b.hardened, dropRoot: b.dropRoot, uid: b.uid, gid: b.gid, listen: spec.Listen}
	released := false
	defer func() {
		if !released {
			h.release()
		}
	}()

	var cgroupDone, seccompDone time.Time
	if b.hardened {
		g, err := b.newRunGroup(spec.Limits)
		if err != nil {
			return nil, err
		}
		h.group = g
		h.rlimits = lim.rlimits()
		cgroupDone = time.Now()
	}

	// bwrap reports the host pid of the jail's init on an info fd. The init
	// runs in its own session, outside our process group; knowing it lets
	// Run kill it directly and wait until the pid namespace is torn down.
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: info pipe: %w", err)
	}
	h.init = newJailInit(infoR)
	h.parentFiles = append(h.parentFiles, infoW)
	extra := []*os.File{infoW}
	fdArgs := []string{"--info-fd", "3"}
	if b.hardened {
		blockR, blockW, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("sandbox: block pipe: %w", err)
		}
		// Run keeps blockW open until it gives the go-ahead, or else until
		// bwrap is gone: the init takes EOF for a go-ahead too.
		h.blockW = blockW
		h.parentFiles = append(h.parentFiles, blockR)
		scR, err := seccompPipe(b.seccomp.prog)
		if err != nil {
			return nil, err
		}
		h.parentFiles = append(h.parentFiles, scR)
		seccompDone = time.Now()
		extra = append(extra, blockR, scR)
		fdArgs = append(fdArgs, "--block-fd", "4", "--seccomp", "5")
	}

	envR, err := argsPipe(envArgs(spec.Env))
	if err != nil {
		return nil, err
	}
	h.parentFiles = append(h.parentFiles, envR)
	extra = append(extra, envR)
	fdArgs = append(fdArgs, "--args", strconv.Itoa(2+len(extra)))
	if 3+len(extra) != b.etcFirstFD() {
		return nil, fmt.Errorf("sandbox: internal error: /etc files would be on fd %d, args put them on %d", 3+len(extra), b.etcFirstFD())
	}
	for _, p := range copied {
		f, err := openEtcFile(p)
		if err != nil {
			return nil, err
		}
		h.parentFiles = append(h.parentFiles, f)
		extra = append(extra, f)
	}
	cmd := &exec.Cmd{
		Path:        b.path,
		Args:        append(append([]string{b.path}, fdArgs...), args...),
		Env:         []string{}, // the job's environment goes through --args, see envArgs
		Dir:         "/",        // the host's cwd may be closed to the jail's uid
		Stdin:       spec.Stdin,
		Stdout:      spec.Stdout,
		Stderr:      spec.Stderr,
		ExtraFiles:  extra,
		SysProcAttr: b.sysProcAttr(),
	}
	res, err := supervise(ctx, cmd, spec.Timeout, t0, h, spec.Finished)
	if err != nil {
		return nil, err
	}
	res.Marks.Cgroup, res.Marks.Seccomp, res.Marks.Built, res.Marks.Listened = cgroupDone, seccompDone, h.built, h.listened
	var oom, pids uint64
	if h.group != nil {
		// Read before release removes the group: the tree is gone by now, or,
		// for a run that ended through Finished, this counts what was breached
		// while the command ran.
		oom, pids = h.group.oomKills(), h.group.pidsRefused()
	}
	attributeLimit(res, lim, oom, pids)
	if gone := res.Teardown; gone != closed {
		// The cgroup goes only once its processes have: the run's limits hold
		// until the last of them is gone.
		released = true
		teardown := make(chan struct{})
		res.Teardown = teardown
		go func() {
			defer close(teardown)
			<-gone
			h.release()
		}()
	}
	return res, nil
}

// openEtcFile opens an /etc file for bwrap to copy into the jail. One that
// went away since Args looked is copied as empty: its absence then, like
// its content, is the host's business, and the job must not fail for it.
func openEtcFile(p string) (*os.File, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = os.Open(os.DevNull)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: open %s for the jail's /etc: %w", p, err)
	}
	return f, nil
}

// seccompPipe returns the read end of a pipe holding prog, for bwrap's
// --seccomp, which reads it to EOF. A pipe per run, because the file
// offset of a shared memfd would be shared by concurrent runs too.
func seccompPipe(prog []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: seccomp pipe: %w", err)
	}
	// The filter (a few hundred bytes) fits in the pipe's buffer, so
	// this does not block.
	_, err = w.Write(prog)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("sandbox: seccomp pipe: %w", err)
	}
	return r, nil
}

// infoTimeout bounds the wait for bwrap to report its jail's init, which
// it does right after creating it.
const infoTimeout = 30 * time.Second

// bwrapTree is the tree of a bwrap job outside bwrap's process group: the
// jail's init and everything in its pid namespace, and for a hardened run
// its cgroup.
type bwrapTree struct {
	hardened    bool
	init        *jailInit
	parentFiles []*os.File // the child's ends, which Run closes once bwrap started
	blockW      *os.File   // hardened: the jail init waits for a byte on it
	group       *runGroup  // hardened with cgroups
	rlimits     []rlimit
	dropRoot    bool // rlimits are set as uid/gid (see applyRlimitsAs)
	uid, gid    int
	built       time.Time // when bwrap reported the jail's init (hardened)
	listen      *Listen   // Spec.Listen
	listened    time.Time // when its socket was made

	closeOnce sync.Once
	pids      *pidsWatch // from the go-ahead until release (see watchPids)
}

// closeParentFiles drops Run's copies of the child's fds, so that the info
// reader sees EOF if bwrap dies before writing.
func (h *bwrapTree) closeParentFiles() {
	h.closeOnce.Do(func() {
		for _, f := range h.parentFiles {
			f.Close()
		}
	})
}

// start starts bwrap, in the run's cgroup if it has one.
func (h *bwrapTree) start(cmd *exec.Cmd) error {
	if h.group != nil {
		return h.group.start(cmd)
	}
	return cmd.Start()
}

func (h *bwrapTree) started(ctx context.Context) error {
	h.closeParentFiles()
	if !h.hardened {
		go h.init.watch()
		return nil
	}
	// The jail init is blocked on blockW until it gets the go-ahead: set
	// its rlimits now, before the command exists. (It is in the run's
	// cgroup already: bwrap was started there.)
	got := make(chan int, 1)
	go func() { got <- h.init.readPid() }()
	timer := time.NewTimer(infoTimeout)
	defer timer.Stop()
	var pid int
	select {
	case pid = <-got:
	case <-ctx.Done():
		return fmt.Errorf("sandbox: not started: %w", ctx.Err())
	case <-timer.C:
		return fmt.Errorf("sandbox: bwrap did not report its jail within %v", infoTimeout)
	}
	if pid <= 0 {
		// bwrap exited before building the jail: nothing to limit, and its
		// error is on the job's stderr and in its exit code.
		return nil
	}
	h.built = time.Now()
	var rlErr error
	if h.dropRoot {
		rlErr = applyRlimitsAs(pid, h.uid, h.gid, h.rlimits)
	} else {
		rlErr = applyRlimits(pid, h.rlimits)
	}
	if rlErr != nil {
		return fmt.Errorf("sandbox: %w", rlErr)
	}
	if h.listen != nil {
		l, err := listenIn(pid, h.listen.Addr)
		if err != nil {
			return err
		}
		h.listen.Ready(l)
		h.listened = time.Now()
	}
	// The go-ahead: a byte, then EOF (bwrap versions differ in how much
	// they read). Only now may blockW close: on the error paths above it
	// stays open until bwrap is gone (see release).
	_, err := h.blockW.Write([]byte{'g'})
	if cerr := h.blockW.Close(); err == nil {
		err = cerr
	}
	h.blockW = nil
	if err != nil {
		return fmt.Errorf("sandbox: start the jailed command: %w", err)
	}
	if h.group != nil {
		h.pids = watchPids(h.group)
	}
	return nil
}

func (h *bwrapTree) breached() <-chan struct{} { return h.pids.breached() }

func (h *bwrapTree) kill() {
	h.init.kill()
	if h.group != nil {
		h.group.kill()
	}
}

func (h *bwrapTree) wait(bound time.Duration) { h.init.wait(bound) }

// release frees what the run held, once bwrap has been waited for: the fds,
// the pidfd, the pids watch and the cgroup.
func (h *bwrapTree) release() {
	h.closeParentFiles()
	h.pids.stop()
	if h.init != nil {
		h.init.release()
	}
	if h.blockW != nil {
		// Only now: an init that sees EOF starts the command, limits or not,
		// and only a dead bwrap guarantees there is no init left to see it.
		h.blockW.Close()
	}
	if h.group != nil {
		h.group.kill()
		// A group that cannot be removed is left for the next host's sweep;
		// the run itself is over and has its result.
		_ = h.group.remove()
	}
}

// jailInit tracks the jail's init process through a pidfd, which, unlike a
// pid, cannot come to name another process.
type jailInit struct {
	info  io.ReadCloser
	known chan struct{} // closed once fd is set or known to be unavailable

	mu     sync.Mutex
	fd     int // pidfd, -1 if none
	closed bool
}

func newJailInit(info io.ReadCloser) *jailInit {
	return &jailInit{info: info, known: make(chan struct{}), fd: -1}
}

// watch reads the init's pid in the background.
func (j *jailInit) watch() { j.readPid() }

// readPid reads the init's pid from bwrap's info fd and opens a pidfd for
// it. It returns 0 when bwrap died before building the jail.
func (j *jailInit) readPid() int {
	defer close(j.known)
	var info struct {
		ChildPid int `json:"child-pid"`
	}
	if err := json.NewDecoder(j.info).Decode(&info); err != nil || info.ChildPid <= 0 {
		return 0 // bwrap died before building the jail: nothing inside to wait for
	}
	// The init cannot have been reaped and its pid reused yet in any
	// realistic schedule: bwrap writes the info right after creating it.
	fd, err := unix.PidfdOpen(info.ChildPid, 0)
	if err != nil {
		return 0 // already gone
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		unix.Close(fd)
		return 0
	}
	j.fd = fd
	return info.ChildPid
}

func (j *jailInit) kill() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fd >= 0 {
		_ = unix.PidfdSendSignal(j.fd, unix.SIGKILL, nil, 0)
	}
}

// wait blocks until the init has exited. The kernel reaps every other
// process of a pid namespace before its init finishes exiting, so then the
// whole jail is gone.
func (j *jailInit) wait(bound time.Duration) {
	deadline := time.Now().Add(bound)
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-j.known:
	case <-timer.C:
		return
	}
	j.mu.Lock()
	fd := j.fd
	j.mu.Unlock()
	if fd < 0 {
		return
	}
	for {
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms <= 0 {
			return
		}
		// A pidfd polls readable once its process has exited.
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n > 0 {
			return
		}
	}
}

// release closes the pidfd and unblocks a watch still reading the info fd.
func (j *jailInit) release() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	if j.fd >= 0 {
		unix.Close(j.fd)
		j.fd = -1
	}
	j.info.Close()
}

// validateMounts rejects mounts bwrap would misread or that would cover the
// whole jail. Sources must exist: bwrap's own error would be less clear.
func validateMounts(mounts []Mount) error {
	for _, m := range mounts {
		if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target) {
			return fmt.Errorf("sandbox: mount %s -> %s: paths must be absolute", m.Source, m.Target)
		}
		if filepath.Clean(m.Target) != m.Target || m.Target == "/" {
			return fmt.Errorf("sandbox: mount %s -> %s: target must be a clean path below /", m.Source, m.Target)
		}
		if _, err := os.Stat(m.Source); err != nil {
			return fmt.Errorf("sandbox: mount %s -> %s: %w", m.Source, m.Target, err)
		}
	}
	return nil
}
