package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

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
//     built, waits for a byte before it starts the command. Meanwhile Start,
//     which learned the init's pid on --info-fd, sets the init's rlimits
//     (prlimit); the command and all its descendants inherit them.
//
// Start does this as the host user (root): the cgroup is never delegated to
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
	res, err := waitAndDestroy(b.start(ctx, spec, args, copied, time.Now()))
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

func (b *Bwrap) sysProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{}
	if b.dropRoot {
		// An empty Groups clears root's supplementary groups too.
		attr.Credential = &syscall.Credential{Uid: uint32(b.uid), Gid: uint32(b.gid), Groups: []uint32{}}
	}
	return attr
}

// Start implements Jail. A command that bwrap cannot find or exec inside
// the jail is reported by bwrap on Stderr with exit code 1, not as an
// error: the jail's PATH is only known inside it. A limit that cannot be
// enforced (a memory or pids limit without usable cgroups, any limit when
// not hardened) is an error.
func (b *Bwrap) Start(ctx context.Context, spec *Spec) (Handle, error) {
	t0 := time.Now()
	s, err := b.checkSpec(ctx, spec)
	if err != nil {
		return nil, err
	}
	args, copied := b.args(s)
	return b.start(ctx, s, args, copied, t0)
}

// start starts bwrap with args (args without the fds) for spec; copied are
// the files args expects on descriptors from etcFirstFD on.
func (b *Bwrap) start(ctx context.Context, spec *Spec, args, copied []string, t0 time.Time) (Handle, error) {
	h := &bwrapTree{hardened: b.hardened, dropRoot: b.dropRoot, uid: b.uid, gid: b.gid, listen: spec.Listen,
		limits: spec.Limits.withDefaults()}
	cmd, err := b.command(spec, args, copied, h)
	if err != nil {
		h.release()
		return nil, err
	}
	return startProcess(ctx, cmd, spec.Timeout, t0, h, true)
}

// command lays out what bwrap gets for spec besides args: the run's cgroup
// (hardened), and the descriptors it reads (see bwrap_fds.go), which h
// holds.
func (b *Bwrap) command(spec *Spec, args, copied []string, h *bwrapTree) (*exec.Cmd, error) {
	if b.hardened {
		g, err := b.newRunGroup(spec.Limits)
		if err != nil {
			return nil, err
		}
		h.group = g
		h.rlimits = h.limits.rlimits()
		h.cgroupDone = time.Now()
	}

	// bwrap reports the host pid of the jail's init on an info fd. The init
	// runs in its own session, outside our process group; knowing it lets
	// the run kill it directly and wait until the pid namespace is torn down.
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
		// The run keeps blockW open until it gives the go-ahead, or else
		// until bwrap is gone: the init takes EOF for a go-ahead too.
		h.blockW = blockW
		h.parentFiles = append(h.parentFiles, blockR)
		prog := b.seccomp.prog
		if h.seccompProg != nil {
			prog = h.seccompProg
		}
		scR, err := seccompPipe(prog)
		if err != nil {
			return nil, err
		}
		h.parentFiles = append(h.parentFiles, scR)
		h.seccompDone = time.Now()
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
	return &exec.Cmd{
		Path:        b.path,
		Args:        append(append([]string{b.path}, fdArgs...), args...),
		Env:         []string{}, // the job's environment goes through --args, see envArgs
		Dir:         "/",        // the host's cwd may be closed to the jail's uid
		Stdin:       spec.Stdin,
		Stdout:      spec.Stdout,
		Stderr:      spec.Stderr,
		ExtraFiles:  extra,
		SysProcAttr: b.sysProcAttr(),
	}, nil
}

// account gives res the jail's marks and the limit that ended the run. It
// reads the cgroup's counters before release removes the group: the tree
// is gone by now, or, for a run that ended through Handle.End, they count
// what was breached while the command ran.
func (h *bwrapTree) account(res *Result) {
	res.Marks.Cgroup, res.Marks.Seccomp, res.Marks.Built, res.Marks.Listened = h.cgroupDone, h.seccompDone, h.built, h.listened
	var oom, pids uint64
	if h.group != nil {
		oom, pids = h.group.oomKills(), h.group.pidsRefused()
	}
	attributeLimit(res, h.limits, oom, pids)
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
	parentFiles []*os.File // the child's ends, which the run closes once bwrap started
	blockW      *os.File   // hardened: the jail init waits for a byte on it
	group       *runGroup  // hardened with cgroups
	rlimits     []rlimit
	dropRoot    bool // rlimits are set as uid/gid (see applyRlimitsAs)
	uid, gid    int
	built       time.Time // when bwrap reported the jail's init (hardened)
	listen      *Listen   // Spec.Listen
	listened    time.Time // when its socket was made
	limits      Limits    // the run's, defaults filled in
	cgroupDone  time.Time // when the run's cgroup was made (hardened)
	seccompDone time.Time // when the seccomp filter was in its pipe (hardened)
	seccompProg []byte    // the filter, when not the jobs' (a template's, see Template)

	closeOnce sync.Once
	pids      *pidsWatch // from the go-ahead until release (see watchPids)
}

// closeParentFiles drops the run's copies of the child's fds, so that the info
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
