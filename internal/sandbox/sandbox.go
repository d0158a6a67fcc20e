// Package sandbox runs one job command in isolation.
//
// Three Jails are provided:
//
//   - Bwrap runs the command inside a bubblewrap jail: a non-root uid, its own
//     user, pid, ipc, uts (and, unless NetworkHost, net) namespaces, a
//     read-only system, a private size-limited /tmp, the job directory at
//     /job, no capabilities and no new privileges. Hardened (the default), it
//     adds a seccomp filter, resource limits (Spec.Limits) through cgroups
//     and rlimits, and a jail that never sees a host file descriptor.
//     Killing the jail kills everything in it, including processes that
//     called setsid or nohup.
//   - Nsjail gives the same guarantees with nsjail, for hosts that ship it.
//   - Direct runs the command unjailed, for functions that did not ask for a
//     sandbox: it only gets its own working directory, a cleared environment
//     and its own process group. It enforces no Limits but the timeout.
//
// A sandbox function must never fall back to Direct: when bubblewrap is
// missing NewBwrap fails with ErrNoJail and the caller fails the job.
//
// A host that uses a jail logs its Describe line at start: it says which
// cgroup version and controllers enforce the limits and whether seccomp is on.
//
// The jail keeps the job in; what keeps the host out of the job is one rule, enforced in
// package jailfs: the host opens nothing under a jail-writable tree by path. A job's directory
// (bound at /job, its volumes in it) and its io directory are written by the jail, which can
// leave a link, a fifo or a device node anywhere in them, so every host-side operation there
// (mkdir, open, read, rename, walk, chmod, chown, remove) resolves beneath the tree's root with
// no link followed, and every file read from there must be a regular file of bounded size.
// Mounts, Spec.WorkDir and the other paths given to a Jail are the host's own, laid out before
// the jail starts.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"
)

// Network selects how much network a jailed command gets.
type Network int

const (
	// NetworkNone gives the jail its own network namespace holding only a
	// loopback interface.
	NetworkNone Network = iota
	// NetworkHost shares the host's network namespace. It is an explicit opt-in.
	NetworkHost
	// `network: proxy` (the filtering egress proxy) is no mode of its own: such a job runs
	// with NetworkNone and reaches the host's proxy through a Unix socket bound into the jail
	// (see internal/egress and runner's wireEgress), so the zero value keeps meaning "no
	// network" whatever the function asks for.
)

// String returns the name used for the mode in function definitions.
func (n Network) String() string {
	switch n {
	case NetworkNone:
		return "none"
	case NetworkHost:
		return "host"
	}
	return fmt.Sprintf("Network(%d)", int(n))
}

// Mount binds a host path into the jail, read-only unless Writable.
type Mount struct {
	Source   string // absolute host path
	Target   string // absolute path inside the jail; may sit under /job
	Writable bool
}

// Spec describes one command to run.
type Spec struct {
	// Argv is the command. Argv[0] is looked up on the PATH of Env (the
	// jail's PATH for Bwrap), not on the host process's PATH.
	Argv []string
	// WorkDir is the host directory that becomes /job (the cwd and HOME) in
	// the jail. For Direct it is the cwd itself (and HOME).
	WorkDir string
	// Mounts are extra binds, applied in order after /job, so a Target may
	// sit under /job. Direct ignores them: callers pass host paths to Direct.
	Mounts []Mount
	// Env is the complete environment as KEY=VALUE. Nothing is inherited
	// from the host; HOME and PATH get defaults when absent.
	Env     []string
	Network Network
	// Listen, when not nil, has the host make a socket listening in the jail's network
	// namespace before the command starts (see Listen); only a jail that ListensIn takes it.
	Listen *Listen

	Stdin          io.Reader // nil reads from the null device
	Stdout, Stderr io.Writer // nil discards

	Timeout time.Duration // 0 means none

	// Limits bounds the run's resources: hardened jails enforce them, the
	// others refuse any. A limit that cannot be enforced on this host fails
	// the run instead of being dropped.
	Limits Limits
}

// Result is the outcome of a command that was started.
type Result struct {
	// ExitCode is the command's exit status, or -1 when it was killed by a
	// signal or by the timeout. Inside a Bwrap jail, a command killed by a
	// signal shows up as 128+signal (bwrap reports it like a shell does);
	// -1 there means the jail itself was killed.
	ExitCode int
	// Signal names the signal that killed the process (e.g. "SIGKILL") when
	// ExitCode is -1.
	Signal string
	// TimedOut: the Timeout expired and the whole process tree was killed.
	TimedOut bool
	// Canceled: ctx was canceled and the whole process tree was killed.
	Canceled bool
	// Limit names the limit that ended the run (LimitMemory, LimitPids,
	// LimitCPU, LimitFileSize, LimitTimeout), "" if none did. A breached
	// memory or pids limit is reported even when the command then exited 0:
	// a process of the job was killed or refused a fork. LimitMessage
	// words it for the job's log.
	Limit string
	// StartDelay runs from Start's entry until the process had been started:
	// the part of the jail set-up cost visible from outside. For a
	// hardened Bwrap that is until the jail was built and its command let
	// go (see Bwrap).
	StartDelay time.Duration
	// Duration is the whole run, including the wait for the tree to go.
	Duration time.Duration
	// Marks are when the run passed each step, for telling where a cold job's time goes
	// (`host bench`). A step a jail does not have stays zero.
	Marks Marks
	// Err is set when the host lost track of the command once it had started: how it ended is
	// unknown (Run returns it as its error).
	Err error
}

// Marks are the moments of one run, read from the clock as it passes them: a few
// clock reads per run, cheap enough to take on every run.
type Marks struct {
	Entered  time.Time // Start was called
	Cgroup   time.Time // the run's cgroup exists, its limits written (hardened Bwrap)
	Seccomp  time.Time // the seccomp filter is in its pipe (hardened Bwrap)
	Forked   time.Time // the jail tool (or the command) was started: fork and exec done
	Built    time.Time // bwrap reported the jail's init: namespaces and mounts are up (Bwrap)
	Listened time.Time // Spec.Listen's socket was made in the jail's network namespace
	Released time.Time // the command was let go: rlimits set, go-ahead given
	Exited   time.Time // the jail tool (or the command) exited
	Gone     time.Time // every process of the run is gone
}

// Jail starts one command in isolation, and hands back its Handle.
//
// Start returns an error only when the command could not be started (jail
// tool missing, bad spec, ctx already done); a command that ran and failed is
// a Result with ExitCode != 0. ctx bounds the run: once it is done the whole
// process tree is killed, as by Handle.Kill.
type Jail interface {
	Name() string
	Start(ctx context.Context, spec *Spec) (Handle, error)
}

// Handle is a started command, the way a Nomad task driver hands one back: its caller waits
// for it, may end or kill it, and destroys it once done with it. The run's teardown (every
// process of it gone, what it held released) belongs to the handle: the Result can come
// before it (End), and Destroy is what waits for it.
type Handle interface {
	// Wait returns a channel that delivers the run's Result once, then is closed; when ctx
	// ends first it is closed without one. The Result comes once the command exited and every
	// process of the run is gone (within a bounded wait; see the implementations for the
	// limits), or at once after End. Waiting does not affect the run.
	Wait(ctx context.Context) <-chan *Result
	// End says the command is done, with the exit code it reported (its runtime printed its
	// end, see runner): Wait then delivers that code and the limits breached so far at once,
	// and what is left of the run is killed. A run whose writes must outlive every process of
	// it (volumes) is not ended so. Nsjail ignores it.
	End(code int)
	// Kill kills the whole process tree now; the Result says Canceled.
	Kill()
	// Destroy kills what is left of the run and returns once every process of it is gone and
	// what it held (its cgroup, descriptors) is released. It may be called more than once.
	Destroy()
}

// Run starts spec in j, waits for it to end and destroys it: it returns once every process of
// the run is gone.
func Run(ctx context.Context, j Jail, spec *Spec) (*Result, error) {
	return waitAndDestroy(j.Start(ctx, spec))
}

// waitAndDestroy is Run once the start is done.
func waitAndDestroy(h Handle, err error) (*Result, error) {
	if err != nil {
		return nil, err
	}
	res := <-h.Wait(context.Background()) // the run's context bounds it
	h.Destroy()
	if res.Err != nil {
		return nil, res.Err
	}
	return res, nil
}

// ErrNoJail is returned (wrapped) by NewBwrap when bubblewrap is missing,
// and by NewNsjail when nsjail is.
var ErrNoJail = errors.New("sandbox: no jail tool: install bubblewrap (apt-get install bubblewrap); a sandbox function never runs unjailed")

// validate checks what both jails need and returns WorkDir made absolute.
func validate(ctx context.Context, spec *Spec) (string, error) {
	if spec == nil {
		return "", errors.New("sandbox: nil spec")
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("sandbox: not started: %w", err)
	}
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return "", errors.New("sandbox: empty command")
	}
	if spec.Timeout < 0 {
		return "", fmt.Errorf("sandbox: negative timeout %v", spec.Timeout)
	}
	if spec.WorkDir == "" {
		return "", errors.New("sandbox: no work directory")
	}
	dir, err := filepath.Abs(spec.WorkDir)
	if err != nil {
		return "", fmt.Errorf("sandbox: work directory: %w", err)
	}
	if err := checkDir(dir); err != nil {
		return "", fmt.Errorf("sandbox: work directory: %w", err)
	}
	for _, kv := range spec.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			return "", fmt.Errorf("sandbox: bad environment entry %q (want KEY=VALUE)", kv)
		}
	}
	return dir, nil
}

// envMap is an environment with unique keys, keeping first-seen order so
// the resulting list (and Bwrap.args) is deterministic. Later entries win,
// as with exec.Cmd.
type envMap struct {
	keys []string
	vals map[string]string
}

func newEnvMap(env []string) *envMap {
	m := &envMap{vals: make(map[string]string, len(env)+2)}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue // validate rejects these; Args must not panic on them
		}
		m.set(k, v)
	}
	return m
}

func (m *envMap) set(k, v string) {
	if _, ok := m.vals[k]; !ok {
		m.keys = append(m.keys, k)
	}
	m.vals[k] = v
}

func (m *envMap) setDefault(k, v string) {
	if _, ok := m.vals[k]; !ok {
		m.set(k, v)
	}
}

func (m *envMap) has(k string) bool { _, ok := m.vals[k]; return ok }

func (m *envMap) list() []string {
	out := make([]string, 0, len(m.keys))
	for _, k := range m.keys {
		out = append(out, k+"="+m.vals[k])
	}
	return out
}
