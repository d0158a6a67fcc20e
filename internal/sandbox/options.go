package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Option configures NewBwrap and NewNsjail.
type Option func(*options)

type options struct {
	path       string
	uid, gid   int
	hardened   bool
	cgroups    *Cgroups
	cgroupsSet bool
}

// WithPath sets the jail binary; the default is "bwrap" (NewBwrap) or
// "nsjail" (NewNsjail) on the PATH.
func WithPath(path string) Option { return func(o *options) { o.path = path } }

// WithUser sets the host uid/gid the jail runs as when the host runs as root
// (default 65534/65534). It has no effect when the host is not root: an
// unprivileged host runs jails as itself.
func WithUser(uid, gid int) Option { return func(o *options) { o.uid, o.gid = uid, gid } }

// WithHardening turns the hardening (seccomp, cgroups, rlimits, tmpfs
// sizes) on or off; it is on by default. Off is bubblewrap's namespaces
// alone, for measuring what the hardening costs: never for jobs. Nsjail
// is always hardened.
func WithHardening(on bool) Option { return func(o *options) { o.hardened = on } }

// WithCgroups sets the cgroups the jail puts runs in (default:
// DetectCgroups(DefaultCgroupParent)); nil means none.
func WithCgroups(c *Cgroups) Option {
	return func(o *options) { o.cgroups, o.cgroupsSet = c, true }
}

// jailSetup is what both jails resolve from their options.
type jailSetup struct {
	path     string
	uid, gid int  // host ids the jail runs as (also its ids inside)
	dropRoot bool // the host is root: the jail runs as uid/gid

	hardened bool
	cgroups  *Cgroups // hardened only; never nil then
	seccomp  *seccompFilter
}

// setup applies opts; tool is the binary's default name.
func (j *jailSetup) setup(tool string, opts []Option) error {
	o := options{uid: DefaultUID, gid: DefaultGID, hardened: true}
	for _, opt := range opts {
		opt(&o)
	}
	j.uid, j.gid, j.hardened = o.uid, o.gid, o.hardened

	if o.path == "" {
		o.path = tool
	}
	p, err := exec.LookPath(o.path)
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
	case o.cgroups != nil:
		j.cgroups = o.cgroups
	case o.cgroupsSet:
		j.cgroups = &Cgroups{reason: "disabled by WithCgroups(nil)"}
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
		return errors.New("sandbox: limits requested from a jail built WithHardening(false), which cannot enforce them")
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
	if err := j.checkLimits(spec.Limits); err != nil {
		return nil, err
	}
	s := *spec
	s.WorkDir = dir
	return &s, nil
}
