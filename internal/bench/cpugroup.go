package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuGroup is a cgroup of this process's own, for the CPU time of everything the benchmark
// runs: the hosts in this process, their NATS servers, and every process of every jail.
// getrusage cannot give that: bwrap exits as soon as its init reports the job's status, without
// reaping the init, so a jail's runtime is never counted among this process's children. A
// cgroup counts its processes whoever reaps them, and leaves the machine's other work out.
type cpuGroup struct {
	dir    string // the group
	parent string // the group this process was in, to return to
	usage  func(dir string) (time.Duration, error)
}

// cgroupRoot is where the hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// joinCPUGroup moves this process (every thread; children to come follow) into a new group
// under its own: cpuacct's on cgroup v1, the unified hierarchy's on v2. The jails' own
// groups (sandbox.Cgroups) are under the memory and pids controllers on v1, so the jails stay
// in this one; on v2 they would move out, so there it is not used.
func joinCPUGroup() (*cpuGroup, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read this process's cgroups: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || !strings.Contains(","+f[1]+",", ",cpuacct,") {
			continue
		}
		mount := filepath.Join(cgroupRoot, f[1])
		if _, err := os.Stat(filepath.Join(mount, "cpuacct.usage")); err != nil {
			mount = filepath.Join(cgroupRoot, "cpuacct")
		}
		return join(filepath.Join(mount, f[2]), v1Usage)
	}
	return nil, errors.New("no cgroup v1 cpuacct hierarchy (on cgroup v2 the jails' own groups would take their CPU time out of this process's)")
}

func join(parent string, usage func(string) (time.Duration, error)) (*cpuGroup, error) {
	g := &cpuGroup{dir: filepath.Join(parent, fmt.Sprintf("host-bench-%d", os.Getpid())), parent: parent, usage: usage}
	if err := os.Mkdir(g.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create a cgroup for the benchmark's CPU time: %w", err)
	}
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.Remove(g.dir)
		return nil, fmt.Errorf("move the benchmark into %s: %w", g.dir, err)
	}
	return g, nil
}

// used is the CPU time of every process that has been in the group.
func (g *cpuGroup) used() (time.Duration, error) { return g.usage(g.dir) }

// leave moves this process back and removes the group, once the jails it started are gone.
func (g *cpuGroup) leave() {
	_ = os.WriteFile(filepath.Join(g.parent, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	for range 50 {
		if os.Remove(g.dir) == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func v1Usage(dir string) (time.Duration, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
	if err != nil {
		return 0, fmt.Errorf("read the benchmark's CPU time: %w", err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read the benchmark's CPU time: %s: %w", dir, err)
	}
	return time.Duration(ns), nil
}
