package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agenthost/host/internal/jailfs"
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

// runSeq numbers the run groups of this process. One counter for every Cgroups: two hosts in one
// process (a test's, the benchmark's) share the parent, and a warm jail's group lives long
// enough for another's numbering to reach its name.
var runSeq atomic.Uint64

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

// runGroup is one run's cgroup: a directory per hierarchy (one on v2).
type runGroup struct {
	version         CgroupVersion
	dirs            []string
	memDir, pidsDir string
	// v1 is, for each of dirs on v1, the controller, mount point and
	// mount root of its hierarchy: what start needs to find the forking
	// thread's own groups.
	v1 []v1Hierarchy
}

type v1Hierarchy struct{ controller, mount, root string }

// newRun creates the group for one run, with the given limits (0 = none).
func (c *Cgroups) newRun(memory int64, pids int) (*runGroup, error) {
	switch {
	case c.version == CgroupNone:
		return nil, errors.New("no usable cgroups: " + c.reason)
	case memory > 0 && !c.hasMemory:
		return nil, errors.New("no memory controller")
	case pids > 0 && !c.hasPids:
		return nil, errors.New("no pids controller")
	}
	name := fmt.Sprintf("run-%d-%d", os.Getpid(), runSeq.Add(1))
	g := &runGroup{version: c.version, memDir: filepath.Join(c.memParent, name), pidsDir: filepath.Join(c.pidsParent, name)}
	g.dirs = []string{g.memDir}
	if g.pidsDir != g.memDir {
		g.dirs = append(g.dirs, g.pidsDir)
	}
	if c.version == CgroupV1 {
		g.v1 = []v1Hierarchy{{"memory", c.memMount, c.memRoot}, {"pids", c.pidsMount, c.pidsRoot}}
	}
	for _, d := range g.dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			g.remove()
			return nil, fmt.Errorf("create cgroup %s: %w", d, err)
		}
	}
	if err := g.setLimits(memory, pids); err != nil {
		g.remove()
		return nil, err
	}
	return g, nil
}

func (g *runGroup) setLimits(memory int64, pids int) error {
	if memory > 0 {
		m := strconv.FormatInt(memory, 10)
		if g.version == CgroupV2 {
			if err := writeCgroupFile(g.memDir, "memory.max", m); err != nil {
				return err
			}
			// Swap would let the job go past its limit, slowly, and spill
			// its pressure onto the host: none.
			if err := writeCgroupFileIfExists(g.memDir, "memory.swap.max", "0"); err != nil {
				return err
			}
			// An OOM kill takes the whole job, not one process the job
			// might shrug off and carry on without.
			if err := writeCgroupFileIfExists(g.memDir, "memory.oom.group", "1"); err != nil {
				return err
			}
		} else {
			if err := writeCgroupFile(g.memDir, "memory.limit_in_bytes", m); err != nil {
				return err
			}
			// memsw (memory+swap) exists with swap accounting; it must not
			// be set below limit_in_bytes, which is why it comes second.
			if err := writeCgroupFileIfExists(g.memDir, "memory.memsw.limit_in_bytes", m); err != nil {
				return err
			}
		}
	}
	if pids > 0 {
		if err := writeCgroupFile(g.pidsDir, "pids.max", strconv.Itoa(pids)); err != nil {
			return err
		}
	}
	return nil
}

// start starts cmd with its first process in the group already: whatever
// it forks, from its first instruction on, is in the group too. Moving a
// process in after it started would race with its forks (bwrap forks
// right away), and takes cgroup_threadgroup_rwsem for writing, which waits
// for an RCU grace period: milliseconds per write, most of what a jailed
// no-op costs.
//
// On v2 the kernel clones the process straight into the group
// (CLONE_INTO_CGROUP). On v1 a thread can move itself alone into a group
// without that lock, and a child is forked into its forking thread's
// groups; so start forks from a locked thread that it moves into the group
// and back. (Memory is charged to a process's groups, not a thread's: the
// host's allocations meanwhile stay the host's.)
func (g *runGroup) start(cmd *exec.Cmd) error {
	if g.version == CgroupV2 {
		fd, err := unix.Open(g.memDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open cgroup %s: %w", g.memDir, err)
		}
		defer unix.Close(fd)
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		return cmd.Start()
	}

	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		homes, err := g.threadHomes()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		moved := 0
		for _, d := range g.dirs {
			if err = writeCgroupFile(d, "tasks", "0"); err != nil {
				break
			}
			moved++
		}
		if err == nil {
			err = cmd.Start()
		}
		for i := range moved {
			if herr := writeCgroupFile(homes[i], "tasks", "0"); herr != nil {
				// The thread cannot go home: it must never run anything
				// else. Ending the goroutine locked ends the thread; the
				// process it forked, if any, goes first.
				if err == nil {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				}
				errc <- fmt.Errorf("move the forking thread back to %s: %w", homes[i], herr)
				return
			}
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// threadHomes returns the calling thread's own group directories, in the
// order of g.dirs.
func (g *runGroup) threadHomes() ([]string, error) {
	data, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return nil, err
	}
	homes := make([]string, len(g.v1))
	for line := range strings.Lines(string(data)) {
		// "4:memory:/some/group"
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		for i, h := range g.v1 {
			if slices.Contains(strings.Split(f[1], ","), h.controller) {
				rel := f[2]
				if h.root != "/" && h.root != "" {
					rel = strings.TrimPrefix(rel, h.root)
				}
				homes[i] = filepath.Join(h.mount, rel)
			}
		}
	}
	for i, h := range homes {
		if h == "" {
			return nil, fmt.Errorf("this thread is in no %s cgroup", g.v1[i].controller)
		}
	}
	return homes, nil
}

// kill SIGKILLs every process in the group.
func (g *runGroup) kill() {
	if g.version == CgroupV2 {
		// cgroup.kill (Linux 5.14) kills the whole subtree atomically,
		// including processes forking while it runs.
		if writeCgroupFile(g.memDir, "cgroup.kill", "1") == nil {
			return
		}
	}
	for _, d := range g.subtree() {
		for _, pid := range readPids(filepath.Join(d, "cgroup.procs")) {
			killInGroup(pid, d)
		}
	}
}

// subtree lists the group's directories and those below them (nsjail
// creates its own groups inside a run's), parents before children.
func (g *runGroup) subtree() []string {
	var dirs []string
	for _, top := range g.dirs {
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return nil // gone meanwhile
			}
			if d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	return dirs
}

// populated reports whether any process is left in the group's subtree.
func (g *runGroup) populated() bool {
	for _, d := range g.subtree() {
		if len(readPids(filepath.Join(d, "cgroup.procs"))) > 0 {
			return true
		}
	}
	return false
}

// killInGroup SIGKILLs pid if it is (still) in the group at dir. The pidfd
// pins the process, so a pid reused between reading cgroup.procs and the
// kill is not mistaken for the job's: the membership is checked on the
// process the pidfd refers to.
func killInGroup(pid int, dir string) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if slices.Contains(readPids(filepath.Join(dir, "cgroup.procs")), pid) {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}

func readPids(path string) []int {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// oomKills is how many processes the kernel killed for the memory limit.
func (g *runGroup) oomKills() uint64 {
	if g.version == CgroupV2 {
		return readKeyed(filepath.Join(g.memDir, "memory.events"), "oom_kill")
	}
	return readKeyed(filepath.Join(g.memDir, "memory.oom_control"), "oom_kill")
}

// peaked reports whether the group's peak usage reached its memory limit
// (within the slack of a page allocation that failed) or pids limit; 0
// limits are never reached. The peaks count the group's descendants too.
func (g *runGroup) peaked(memory int64, pids int) (mem, pidsHit bool) {
	if memory > 0 {
		name := "memory.peak"
		if g.version == CgroupV1 {
			name = "memory.max_usage_in_bytes"
		}
		if n, err := readUint(filepath.Join(g.memDir, name)); err == nil {
			mem = int64(n) >= memory-(2<<20)
		}
	}
	if pids > 0 {
		if n, err := readUint(filepath.Join(g.pidsDir, "pids.peak")); err == nil {
			pidsHit = int(n) >= pids
		}
	}
	return mem, pidsHit
}

func readUint(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
}

// pidsRefused is how many forks failed on the pids limit.
func (g *runGroup) pidsRefused() uint64 {
	return readKeyed(filepath.Join(g.pidsDir, "pids.events"), "max")
}

// remove removes the group's directories, children first, killing what is
// left. A group emptied a moment ago can still be busy while its last tasks
// finish exiting, so removal is retried for a bounded time.
func (g *runGroup) remove() error {
	deadline := time.Now().Add(treeWait)
	var errs []error
	dirs := g.subtree()
	slices.Reverse(dirs)
	for _, d := range dirs {
		for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
			err := unix.Rmdir(d)
			if err == nil || err == unix.ENOENT {
				break
			}
			if err != unix.EBUSY || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
				break
			}
			g.kill()
			time.Sleep(delay)
		}
	}
	return errors.Join(errs...)
}

// sweepStale removes run groups whose host process is gone: a host that
// crashed or was killed leaves its groups behind. Groups of a live host
// (another host sharing the parent) are left alone.
func (c *Cgroups) sweepStale() {
	for _, parent := range slices.Compact([]string{c.memParent, c.pidsParent}) {
		entries, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range entries {
			var hostPid, n int
			if !e.IsDir() {
				continue
			}
			if _, err := fmt.Sscanf(e.Name(), "run-%d-%d", &hostPid, &n); err != nil {
				if _, err := fmt.Sscanf(e.Name(), "probe-%d", &hostPid); err != nil {
					continue
				}
			}
			if hostPid == os.Getpid() || unix.Kill(hostPid, 0) != unix.ESRCH {
				continue
			}
			d := filepath.Join(parent, e.Name())
			g := &runGroup{version: c.version, dirs: []string{d}, memDir: d, pidsDir: d}
			_ = g.remove()
		}
	}
}

// writeCgroupFile writes one value to a control file. Control files exist
// already; O_CREATE is not used, so a typo cannot create a plain file.
func writeCgroupFile(dir, name, value string) error {
	p := filepath.Join(dir, name)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, p, err)
	}
	return nil
}

func writeCgroupFileIfExists(dir, name, value string) error {
	if _, err := os.Stat(filepath.Join(dir, name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return writeCgroupFile(dir, name, value)
}

// readKeyed returns the value of key in a flat-keyed file ("key value"
// lines), 0 when either is missing.
func readKeyed(path, key string) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
