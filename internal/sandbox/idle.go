package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// idleNice is the priority a run started through Spec.Idle has until it is woken: the lowest,
// so that it only gets the CPU that running jobs leave.
const idleNice = 19

// Idle lowers a run's CPU priority until Wake: a warm jail starting ahead of its job must not
// take the CPU from the jobs that run meanwhile, but its job must run at full priority. Only a
// hardened Bwrap of a host running as root lowers it (raising it back takes CAP_SYS_NICE), and
// only before the command starts, so that every process of the jail inherits it.
type Idle struct {
	mu    sync.Mutex
	woken bool
	wake  func()
}

// Wake gives the run back its normal priority: every thread of it, and what they start after.
// Waking a run that was never lowered, or twice, does nothing.
func (i *Idle) Wake() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.woken {
		return
	}
	i.woken = true
	if i.wake != nil {
		i.wake()
	}
}

// lower sets pid (the jail's init, not yet let go) to the idle priority, with wake to undo it
// for the whole group; it does nothing once the run was woken.
func (i *Idle) lower(pid int, g *runGroup) {
	if i == nil || g == nil || os.Geteuid() != 0 {
		return
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.woken {
		return
	}
	if unix.Setpriority(unix.PRIO_PROCESS, pid, idleNice) != nil {
		return // the run goes on at normal priority: only its neighbours pay
	}
	i.wake = g.normalPriority
}

// normalPriority sets every thread of the group to nice 0. Nice is per thread and inherited at
// creation: a second pass catches threads created by one the first pass had not reached.
func (g *runGroup) normalPriority() {
	name := "tasks"
	if g.version == CgroupV2 {
		name = "cgroup.threads"
	}
	for range 2 {
		for _, d := range g.subtree() {
			data, err := os.ReadFile(filepath.Join(d, name))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(data)) {
				if tid, err := strconv.Atoi(f); err == nil {
					_ = unix.Setpriority(unix.PRIO_PROCESS, tid, 0)
				}
			}
		}
	}
}
