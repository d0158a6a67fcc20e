package sandbox

import (
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
)

// runSeq numbers the run groups of this process. One counter for every Cgroups: two hosts in one
// process (a test's, the benchmark's) share the parent, and a warm jail's group lives long
// enough for another's numbering to reach its name.
var runSeq atomic.Uint64

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
