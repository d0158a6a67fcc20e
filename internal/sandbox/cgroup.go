package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agenthost/host/internal/jailfs"
	"golang.org/x/sys/unix"
)

// DefaultCgroupParent is the group, relative to each hierarchy's root, under
// which the host creates one child group per run.
const DefaultCgroupParent = "agent-host"

// CgroupVersion is the cgroup interface a Cgroups uses.
type CgroupVersion int

const (
	// CgroupNone: no usable memory and pids controllers; memory and pids
	// limits cannot be enforced, and runs asking for them fail.
	CgroupNone CgroupVersion = iota
	// CgroupV1: the legacy per-controller hierarchies.
	CgroupV1
	// CgroupV2: the unified hierarchy.
	CgroupV2
)

func (v CgroupVersion) String() string {
	switch v {
	case CgroupV1:
		return "cgroup v1"
	case CgroupV2:
		return "cgroup v2"
	}
	return "no cgroups"
}

// limitControllers are the controllers a run's group needs.
var limitControllers = []string{"memory", "pids"}

// Cgroups creates one group per run, under a parent group the host owns,
// in whichever cgroup interface has the memory and pids controllers.
// It is safe for concurrent use.
type Cgroups struct {
	version CgroupVersion
	// memParent and pidsParent are the absolute parent directories; on v2
	// both are the same directory.
	memParent, pidsParent string
	// memMount and pidsMount are the hierarchies' mount points (nsjail
	// wants them apart from the parent); on v2 both are the same.
	memMount, pidsMount string
	// memRoot and pidsRoot (v1) are the groups mounted there: "/" unless
	// the host runs in a cgroup namespace.
	memRoot, pidsRoot string
	// hasMemory and hasPids: the controllers are there to set limits with.
	// (Both are, whenever version is not CgroupNone, outside of tests.)
	hasMemory, hasPids bool
	reason             string // why no cgroups are used, or what v2 lacked
}

// DetectCgroups finds the cgroup interface to use for run limits and
// prepares parent (a relative path such as DefaultCgroupParent) in it:
// v2 when the unified hierarchy has the memory and pids controllers and
// they can be enabled for parent's children, else v1 when both controllers
// have writable hierarchies. It never returns nil: when neither works, the
// result has Version CgroupNone and Describe says why. Groups left behind
// by a host that died are removed.
func DetectCgroups(parent string) *Cgroups {
	return detectCgroups(parent, "/proc/self/mountinfo")
}

func detectCgroups(parent, mountinfo string) *Cgroups {
	parent = strings.Trim(filepath.Clean("/"+parent), "/")
	if parent == "" {
		parent = DefaultCgroupParent
	}
	c := &Cgroups{}
	data, err := os.ReadFile(mountinfo)
	if err != nil {
		c.reason = fmt.Sprintf("cannot read %s: %v", mountinfo, err)
		return c
	}
	mounts := parseCgroupMounts(string(data))

	var why []string
	if v2 := mounts.v2; v2 != "" {
		dir := filepath.Join(v2, parent)
		if err := setupV2(v2, parent); err != nil {
			why = append(why, fmt.Sprintf("cgroup v2 at %s: %v", v2, err))
		} else if err := probeGroup(CgroupV2, dir, dir); err != nil {
			why = append(why, fmt.Sprintf("cgroup v2 at %s: %v", v2, err))
		} else {
			c.version, c.memParent, c.pidsParent = CgroupV2, dir, dir
			c.memMount, c.pidsMount = v2, v2
			c.hasMemory, c.hasPids = true, true
		}
	}
	if c.version == CgroupNone {
		mem, pids := mounts.v1["memory"], mounts.v1["pids"]
		switch {
		case mem == "" || pids == "":
			missing := []string{}
			for _, ctl := range limitControllers {
				if mounts.v1[ctl] == "" {
					missing = append(missing, ctl)
				}
			}
			if len(mounts.v1) > 0 {
				why = append(why, "cgroup v1: no "+strings.Join(missing, ", ")+" hierarchy mounted")
			}
		default:
			memDir, pidsDir := filepath.Join(mem, parent), filepath.Join(pids, parent)
			err := errors.Join(os.MkdirAll(memDir, 0o755), os.MkdirAll(pidsDir, 0o755))
			if err == nil {
				err = probeGroup(CgroupV1, memDir, pidsDir)
			}
			if err != nil {
				why = append(why, fmt.Sprintf("cgroup v1 (%s, %s): %v", mem, pids, err))
			} else {
				c.version, c.memParent, c.pidsParent = CgroupV1, memDir, pidsDir
				c.memMount, c.pidsMount = mem, pids
				c.memRoot, c.pidsRoot = mounts.v1Root["memory"], mounts.v1Root["pids"]
				c.hasMemory, c.hasPids = true, true
			}
		}
	}
	if len(why) == 0 && c.version == CgroupNone {
		why = append(why, "no cgroup file system is mounted")
	}
	c.reason = strings.Join(why, "; ")
	if c.version != CgroupNone {
		c.sweepStale()
	}
	return c
}

// Version reports the interface in use.
func (c *Cgroups) Version() CgroupVersion { return c.version }

// Describe is a line for the host's start log, e.g.
// "cgroup v1 (memory, pids) under /sys/fs/cgroup/{memory,pids}/agent-host".
func (c *Cgroups) Describe() string {
	switch c.version {
	case CgroupV2:
		s := fmt.Sprintf("cgroup v2 (memory, pids) under %s", c.memParent)
		return s
	case CgroupV1:
		s := fmt.Sprintf("cgroup v1 (memory, pids) under %s and %s", c.memParent, c.pidsParent)
		if c.reason != "" {
			s += " [" + c.reason + "]"
		}
		return s
	}
	return "no cgroups: memory and pids limits cannot be enforced (" + c.reason + ")"
}

// cgroupMounts are the cgroup file systems of this mount namespace.
type cgroupMounts struct {
	v2     string            // the first cgroup2 mount point
	v1     map[string]string // controller -> its hierarchy's mount point
	v1Root map[string]string // controller -> the group mounted there ("/" unless namespaced)
}

// parseCgroupMounts reads /proc/self/mountinfo lines:
// "id parent maj:min root mountpoint opts [optional...] - fstype source superopts".
func parseCgroupMounts(mountinfo string) cgroupMounts {
	m := cgroupMounts{v1: map[string]string{}, v1Root: map[string]string{}}
	for line := range strings.Lines(mountinfo) {
		pre, post, ok := strings.Cut(strings.TrimSpace(line), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		mnt := jailfs.UnescapeMountinfo(f[4])
		switch g[0] {
		case "cgroup2":
			if m.v2 == "" {
				m.v2 = mnt
			}
		case "cgroup":
			for _, opt := range strings.Split(g[2], ",") {
				if slices.Contains(limitControllers, opt) && m.v1[opt] == "" {
					m.v1[opt], m.v1Root[opt] = mnt, jailfs.UnescapeMountinfo(f[3])
				}
			}
		}
	}
	return m
}

// setupV2 creates parent under root and enables the memory and pids
// controllers on the way down, so that parent's children get them.
func setupV2(root, parent string) error {
	avail, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return err
	}
	var missing []string
	for _, ctl := range limitControllers {
		if !slices.Contains(strings.Fields(string(avail)), ctl) {
			missing = append(missing, ctl)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("controllers %s not available (in use by a v1 hierarchy?)", strings.Join(missing, ", "))
	}
	if err := os.MkdirAll(filepath.Join(root, parent), 0o755); err != nil {
		return err
	}
	dir := root
	for _, part := range append([]string{""}, strings.Split(parent, "/")...) {
		dir = filepath.Join(dir, part)
		// A group with processes of its own cannot pass controllers down
		// (EBUSY): the host's parent must be a subtree no process sits in.
		if err := writeCgroupFile(dir, "cgroup.subtree_control", "+memory +pids"); err != nil {
			if errors.Is(err, unix.EBUSY) {
				return fmt.Errorf("enable memory and pids for the children of %s: %w (the group has processes of its own: move them to a leaf group, e.g. the host into a child of its service's group)", dir, err)
			}
			return fmt.Errorf("enable memory and pids for the children of %s: %w", dir, err)
		}
	}
	return nil
}

// probeGroup creates, limits and removes a throwaway group, so that a host
// that cannot use its cgroups learns it at start, not at its first job.
func probeGroup(v CgroupVersion, memParent, pidsParent string) error {
	name := fmt.Sprintf("probe-%d", os.Getpid())
	g := &runGroup{version: v, memDir: filepath.Join(memParent, name), pidsDir: filepath.Join(pidsParent, name)}
	g.dirs = []string{g.memDir}
	if g.pidsDir != g.memDir {
		g.dirs = append(g.dirs, g.pidsDir)
	}
	for _, d := range g.dirs {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			g.remove()
			return err
		}
	}
	err := g.setLimits(1<<40, 1<<20)
	if rerr := g.remove(); err == nil {
		err = rerr
	}
	return err
}
