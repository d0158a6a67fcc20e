package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Config configures NewBwrap and NewNsjail. The zero value is a hardened
// jail found on the PATH, running as DefaultUID/DefaultGID on a root host,
// in the cgroups DetectCgroups(DefaultCgroupParent) finds.
type Config struct {
	// Path is the jail binary; "" is "bwrap" (NewBwrap) or "nsjail"
	// (NewNsjail) on the PATH.
	Path string

	// UID and GID are the host user the jail runs as when the host runs as
	// root; both zero are DefaultUID and DefaultGID. Either one zero alone
	// (or negative) is refused: a root host must not run jails as root.
	// They have no effect when the host is not root: an unprivileged host
	// runs jails as itself.
	UID, GID int

	// Cgroups are the cgroups the jail puts runs in; nil is
	// DetectCgroups(DefaultCgroupParent), unless NoCgroups.
	Cgroups *Cgroups

	// NoCgroups puts runs in no cgroups (so memory and pids limits are
	// refused); false uses Cgroups. Setting it with Cgroups is an error.
	NoCgroups bool
}

// jailSetup is what both jails resolve from their options.
type jailSetup struct {
	path     string
	uid, gid int  // host ids the jail runs as (also its ids inside)
	dropRoot bool // the host is root: the jail runs as uid/gid

	hardened bool
	cgroups  *Cgroups // hardened only; never nil then
	seccomp  *seccompFilter
	// listensIn: Start takes a Spec.Listen (see ListensIn).
	listensIn bool
}

// setup resolves cfg; tool is the binary's default name. Only the
// benchmark's floor (NewBwrapUnhardened) asks for no hardening.
func (j *jailSetup) setup(tool string, cfg Config, hardened bool) error {
	if cfg.NoCgroups && cfg.Cgroups != nil {
		return errors.New("sandbox: Config sets both Cgroups and NoCgroups: keep one")
	}
	j.uid, j.gid, j.hardened = cfg.UID, cfg.GID, hardened
	if j.uid == 0 && j.gid == 0 {
		j.uid, j.gid = DefaultUID, DefaultGID
	}

	path := cfg.Path
	if path == "" {
		path = tool
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoJail, err)
	}
	if j.path, err = filepath.Abs(p); err != nil {
		return fmt.Errorf("%w: %v", ErrNoJail, err)
	}

	if os.Geteuid() == 0 {
		// A jail started by root maps the jail's uid to host root, so even
		// "nobody" inside could read root's 0600 files through any bind.
		// Running it as an unprivileged host uid maps the jail's uid to
		// that uid instead.
		if j.uid <= 0 || j.gid <= 0 {
			return fmt.Errorf("sandbox: refusing to run jails as uid %d gid %d: pick an unprivileged host user", j.uid, j.gid)
		}
		j.dropRoot = true
	} else {
		j.uid, j.gid = os.Geteuid(), os.Getegid()
	}

	if !j.hardened {
		return nil
	}
	if j.seccomp, err = jailSeccomp(); err != nil {
		return err
	}
	switch {
	case cfg.Cgroups != nil:
		j.cgroups = cfg.Cgroups
	case cfg.NoCgroups:
		j.cgroups = &Cgroups{reason: "disabled by Config.NoCgroups"}
	default:
		j.cgroups = DetectCgroups(DefaultCgroupParent)
	}
	return nil
}

// Owner returns the host uid/gid the jailed command runs as. It must be able
// to write WorkDir and Writable mounts, and to traverse to every mount Source
// and to WorkDir: when the host is root, the caller chowns what it creates
// (and keeps the parents at least 0711).
func (j *jailSetup) Owner() (uid, gid int) { return j.uid, j.gid }

// Path returns the jail binary in use.
func (j *jailSetup) Path() string { return j.path }

// Hardened reports whether runs get seccomp, cgroups and rlimits.
func (j *jailSetup) Hardened() bool { return j.hardened }

// Cgroups returns the cgroups runs are put in; nil when not hardened.
func (j *jailSetup) Cgroups() *Cgroups { return j.cgroups }

// newRunGroup creates the cgroup of one run, or returns nil when the host
// has none and the run does not need one: explicit memory and pids limits
// need cgroups, the default pids limit applies where there is a pids
// controller.
func (j *jailSetup) newRunGroup(l Limits) (*runGroup, error) {
	if j.cgroups.Version() == CgroupNone {
		if l.Memory > 0 || l.Pids > 0 {
			return nil, fmt.Errorf("sandbox: the run asks for a memory or pids limit, which cannot be enforced without cgroups (%s): give the host cgroup v1 or v2 memory and pids controllers, or drop the limit", j.cgroups.reason)
		}
		return nil, nil
	}
	pids := l.Pids
	if pids == 0 && j.cgroups.hasPids {
		pids = DefaultPids
	}
	g, err := j.cgroups.newRun(l.Memory, pids)
	if err != nil {
		return nil, fmt.Errorf("sandbox: cannot apply the run's memory and pids limits: %w (host: %s)", err, j.cgroups.Describe())
	}
	return g, nil
}

// checkLimits rejects limits this jail cannot enforce.
func (j *jailSetup) checkLimits(l Limits) error {
	if err := l.validate(); err != nil {
		return err
	}
	if !j.hardened && l != (Limits{}) {
		return errors.New("sandbox: limits requested from a jail built with NewBwrapUnhardened, which cannot enforce them")
	}
	return nil
}

// checkSpec validates what both jails need from a spec and returns a copy with WorkDir
// resolved.
func (j *jailSetup) checkSpec(ctx context.Context, spec *Spec) (*Spec, error) {
	dir, err := validate(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := validateMounts(spec.Mounts); err != nil {
		return nil, err
	}
	switch spec.Network {
	case NetworkNone, NetworkHost:
	default:
		return nil, fmt.Errorf("sandbox: unsupported network mode %v", spec.Network)
	}
	if spec.Listen != nil {
		switch {
		case !j.listensIn:
			return nil, ErrNoListen
		case spec.Network == NetworkHost:
			return nil, errors.New("sandbox: Spec.Listen needs the jail's own network namespace, not the host's network")
		case spec.Listen.Ready == nil:
			return nil, errors.New("sandbox: Spec.Listen without Ready: nothing would take the listener")
		case !spec.Listen.Addr.Addr().Is4():
			return nil, fmt.Errorf("sandbox: Spec.Listen on %s: only IPv4 addresses", spec.Listen.Addr)
		}
	}
	if err := j.checkLimits(spec.Limits); err != nil {
		return nil, err
	}
	s := *spec
	s.WorkDir = dir
	return &s, nil
}
