package sandbox

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults applied by hardened jails when a Limits field is zero.
const (
	// DefaultPids bounds processes plus threads per run. A job that needs
	// more (a big parallel build) asks for it; a fork bomb meets it early.
	// 512 leaves room for runtimes that start a thread per core (bun, node,
	// the JVM) and a few dozen subprocesses.
	DefaultPids = 512
	// DefaultOpenFiles is RLIMIT_NOFILE: the usual soft limit, made hard.
	DefaultOpenFiles = 1024
	// DefaultTmpSize is the size of the jail's /tmp (and /dev/shm) tmpfs.
	// Its pages count against the run's memory limit as well.
	DefaultTmpSize = 256 << 20
)

// Names of the limits in Result.Limit.
const (
	LimitMemory   = "memory"
	LimitPids     = "pids"
	LimitCPU      = "cpu"
	LimitFileSize = "file size"
	LimitTimeout  = "timeout"
)

// Limits bounds the resources of one run. The zero value means the
// defaults above and no memory, CPU or file size limit.
type Limits struct {
	// Memory is the RAM of the whole job in bytes (cgroup memory limit,
	// swap not allowed); tmpfs files count. 0 means none.
	Memory int64
	// Pids bounds the job's processes and threads together (cgroup pids
	// limit). 0 means DefaultPids. A fork refused for it ends the run.
	Pids int
	// CPUTime is RLIMIT_CPU, rounded up to whole seconds: CPU time per
	// process, not for the job as a whole (Spec.Timeout bounds that).
	// A process over it gets SIGXCPU, then SIGKILL a second later.
	// 0 means none.
	CPUTime time.Duration
	// OpenFiles is RLIMIT_NOFILE. 0 means DefaultOpenFiles.
	OpenFiles uint64
	// FileSize is RLIMIT_FSIZE in bytes: the largest file a process may
	// write. A write past it raises SIGXFSZ. 0 means none.
	FileSize int64
	// TmpSize is the size in bytes of the tmpfs on /tmp and /dev/shm.
	// 0 means DefaultTmpSize. A full /tmp fails writes with ENOSPC.
	TmpSize int64
}

// withDefaults returns l with the zero fields that have defaults filled in.
func (l Limits) withDefaults() Limits {
	if l.Pids == 0 {
		l.Pids = DefaultPids
	}
	if l.OpenFiles == 0 {
		l.OpenFiles = DefaultOpenFiles
	}
	if l.TmpSize == 0 {
		l.TmpSize = DefaultTmpSize
	}
	return l
}

func (l Limits) validate() error {
	var errs []error
	if l.Memory < 0 {
		errs = append(errs, fmt.Errorf("negative memory limit %d", l.Memory))
	}
	if l.Memory > 0 && l.Memory < 1<<20 {
		// Below this the runtime of the job cannot even start; a unit
		// mix-up (MiB given as bytes) is the likely cause.
		errs = append(errs, fmt.Errorf("memory limit of %d bytes is below 1 MiB (bytes, not MiB?)", l.Memory))
	}
	if l.Pids < 0 {
		errs = append(errs, fmt.Errorf("negative pids limit %d", l.Pids))
	}
	if l.CPUTime < 0 {
		errs = append(errs, fmt.Errorf("negative CPU time limit %v", l.CPUTime))
	}
	if l.FileSize < 0 {
		errs = append(errs, fmt.Errorf("negative file size limit %d", l.FileSize))
	}
	if l.TmpSize < 0 {
		errs = append(errs, fmt.Errorf("negative /tmp size %d", l.TmpSize))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sandbox: limits: %w", err)
	}
	return nil
}

// cpuSeconds is CPUTime as RLIMIT_CPU takes it: whole seconds, rounded up.
func (l Limits) cpuSeconds() uint64 {
	return uint64((l.CPUTime + time.Second - 1) / time.Second)
}

// rlimit is one resource limit to set on the jail's first process, which
// every process of the job inherits.
type rlimit struct {
	resource int
	lim      unix.Rlimit
}

// rlimits lists the resource limits of a hardened run (l has its defaults).
func (l Limits) rlimits() []rlimit {
	rl := []rlimit{
		{unix.RLIMIT_NOFILE, unix.Rlimit{Cur: l.OpenFiles, Max: l.OpenFiles}},
		// Core dumps of jailed processes would land on the host (and
		// SIGXCPU and SIGXFSZ dump core by default).
		{unix.RLIMIT_CORE, unix.Rlimit{}},
	}
	if l.CPUTime > 0 {
		s := l.cpuSeconds()
		// The soft limit sends SIGXCPU, which names the cause in the exit
		// status; the hard one, a second later, SIGKILLs a process that
		// caught or ignored it.
		rl = append(rl, rlimit{unix.RLIMIT_CPU, unix.Rlimit{Cur: s, Max: s + 1}})
	}
	if l.FileSize > 0 {
		rl = append(rl, rlimit{unix.RLIMIT_FSIZE, unix.Rlimit{Cur: uint64(l.FileSize), Max: uint64(l.FileSize)}})
	}
	return rl
}

// applyRlimitsAs sets rl on pid, a process running as uid/gid, while the
// host runs as root.
//
// prlimit(2) on another user's process needs CAP_SYS_RESOURCE, which a root
// host in a container usually lacks (Docker drops it). Without it the
// kernel still allows the call when the caller's real ids match the
// target's. Credentials are per thread in Linux, so a goroutine locked to
// its thread takes the jail's real uid and gid on that thread only
// (keeping root as its effective and saved ids, and so its capabilities),
// sets the limits and takes its ids back before the thread runs anything
// else.
//
// The thread is not simply thrown away (by ending the goroutine while
// locked): it may be the one that forked a running bwrap, whose
// --die-with-parent (PR_SET_PDEATHSIG) fires when that thread ends.
//
// (The alternative, a re-exec of the host binary that lowers its own
// limits before exec'ing bwrap, costs a Go binary's start-up per run:
// several milliseconds for the host, most of a jailed no-op.)
func applyRlimitsAs(pid, uid, gid int, rl []rlimit) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ruid, rgid := unix.Getuid(), unix.Getgid()
		err := setThreadIDs(uid, gid)
		if err == nil {
			err = applyRlimits(pid, rl)
		}
		if rerr := setThreadIDs(ruid, rgid); rerr != nil {
			// Cannot happen with root's effective uid kept. Should it, the
			// thread must never run another goroutine: ending this one while
			// locked ends the thread. (The price: a bwrap forked from that
			// thread earlier would lose its parent.)
			errc <- fmt.Errorf("a setup thread cannot take back its ids: %w", rerr)
			return
		}
		runtime.UnlockOSThread()
		if err != nil {
			err = fmt.Errorf("as uid %d gid %d: %w", uid, gid, err)
		}
		errc <- err
	}()
	return <-errc
}

// setThreadIDs sets the calling thread's real uid and gid, leaving its
// effective and saved ids (and so its capabilities) alone. The raw
// syscalls act on this thread only; the libc and Go wrappers would change
// every thread of the process.
func setThreadIDs(uid, gid int) error {
	keep := ^uintptr(0) // -1: leave that id as it is
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), keep, keep); e != 0 {
		return fmt.Errorf("set this thread's real gid to %d: %w", gid, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), keep, keep); e != 0 {
		return fmt.Errorf("set this thread's real uid to %d: %w", uid, e)
	}
	return nil
}

// applyRlimits sets rl on pid. Raising a hard limit needs CAP_SYS_RESOURCE,
// lowering does not.
func applyRlimits(pid int, rl []rlimit) error {
	for _, r := range rl {
		lim := r.lim
		if err := unix.Prlimit(pid, r.resource, &lim, nil); err != nil {
			return fmt.Errorf("set %s to %d/%d on the jail: %w", rlimitName(r.resource), lim.Cur, lim.Max, err)
		}
	}
	return nil
}

func rlimitName(r int) string {
	switch r {
	case unix.RLIMIT_NOFILE:
		return "RLIMIT_NOFILE"
	case unix.RLIMIT_CORE:
		return "RLIMIT_CORE"
	case unix.RLIMIT_CPU:
		return "RLIMIT_CPU"
	case unix.RLIMIT_FSIZE:
		return "RLIMIT_FSIZE"
	}
	return fmt.Sprintf("rlimit %d", r)
}

// signalExit is how a jail reports a command killed by sig: like a shell,
// 128+sig (bwrap, and nsjail in its default mode, both do).
func signalExit(sig unix.Signal) int { return 128 + int(sig) }

// attributeLimit fills res.Limit with the limit that ended the run, if
// one did. oomKills and pidsRefused come from the run's cgroup (0 without
// one). A cgroup breach counts even when the command then exited 0: one of
// its processes was killed or refused a fork, and the job cannot know
// what it lost.
func attributeLimit(res *Result, l Limits, oomKills, pidsRefused uint64) {
	switch {
	case res.TimedOut:
		res.Limit = LimitTimeout
	case oomKills > 0:
		res.Limit = LimitMemory
	case pidsRefused > 0:
		res.Limit = LimitPids
	case l.CPUTime > 0 && (res.ExitCode == signalExit(unix.SIGXCPU) || res.Signal == "SIGXCPU"):
		res.Limit = LimitCPU
	case l.FileSize > 0 && (res.ExitCode == signalExit(unix.SIGXFSZ) || res.Signal == "SIGXFSZ"):
		res.Limit = LimitFileSize
	}
}

// LimitMessage explains res.Limit for the job's log, e.g. "memory: the run
// exceeded its memory limit of 64Mi and was killed"; "" when no limit
// ended the run. l and timeout are what the run was given (zero Limits
// fields read as their defaults). The caller adds how to raise it.
func (res *Result) LimitMessage(l Limits, timeout time.Duration) string {
	l = l.withDefaults()
	switch res.Limit {
	case LimitMemory:
		return fmt.Sprintf("memory: the run exceeded its memory limit of %s and was killed", FormatBytes(l.Memory))
	case LimitPids:
		return fmt.Sprintf("pids: the run reached its limit of %d processes and threads (a fork was refused) and was killed", l.Pids)
	case LimitCPU:
		return fmt.Sprintf("cpu: a process of the run used its %ds of CPU time and was killed", l.cpuSeconds())
	case LimitFileSize:
		return fmt.Sprintf("file size: a process of the run wrote past the file size limit of %s and was killed", FormatBytes(l.FileSize))
	case LimitTimeout:
		return fmt.Sprintf("timeout: the run did not finish within %v and was killed", timeout)
	case "":
		return ""
	}
	return res.Limit + ": the run exceeded a limit"
}

// FormatBytes writes n in the largest binary unit that divides it, as
// Kubernetes-style quantities do ("64Mi", "1536Ki", "100").
func FormatBytes(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{60, "Ei"}, {50, "Pi"}, {40, "Ti"}, {30, "Gi"}, {20, "Mi"}, {10, "Ki"}} {
		if n != 0 && n%(1<<u.shift) == 0 && n != math.MinInt64 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d", n)
}
