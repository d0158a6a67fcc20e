package sandbox

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestBreachWatcher: a watch fires once the count it watches goes above 0, whether the kernel
// notifies the change (inotify) or the shared ticker reads it, and a stopped watch leaves
// nothing behind in the watcher. Each case makes the count move for real: a fork refused
// for a run group's pids limit, or a process joining a v2 group (cgroup.events, which every
// v2 hierarchy notifies, with controllers or without).
func TestBreachWatcher(t *testing.T) {
	cases := []struct {
		name     string
		group    func(t *testing.T) *runGroup
		file     string
		key      string
		notified bool
		// gate is the file whose change has the poll read file: the parent's count, as
		// watchPids sets it, or none.
		gate func(g *runGroup) string
		argv []string
	}{
		{
			name: "pids refused, as watchPids watches (notified on v2)", group: limitedGroup,
			file: "pids.events", key: "max", notified: true, gate: parentCount,
			// The background forks past the limit of 2 are refused; the shell then waits.
			argv: bash(`/bin/true & /bin/true & /bin/true & sleep 1000`),
		},
		{
			name: "pids refused, polled", group: limitedGroup,
			file: "pids.events", key: "max", notified: false, gate: parentCount,
			argv: bash(`/bin/true & /bin/true & /bin/true & sleep 1000`),
		},
		{
			// A gate that never moves: the refusal, after the first read, is left to the sweep.
			name: "pids refused, polled, the parent's count standing still", group: limitedGroup,
			file: "pids.events", key: "max", notified: false, gate: stillGate,
			// Python waits without forking (bash would fork its sleep).
			argv: []string{"/usr/bin/python3", "-c", "import os, time\ntime.sleep(0.5)\nfor _ in range(3):\n    try: os.fork()\n    except OSError: pass\ntime.sleep(1000)"},
		},
		{
			name: "v2 group populated, notified", group: unifiedGroup,
			file: "cgroup.events", key: "populated", notified: true, gate: noGate,
			argv: []string{"sleep", "1000"},
		},
		{
			name: "v2 group populated, polled", group: unifiedGroup,
			file: "cgroup.events", key: "populated", notified: false, gate: noGate,
			argv: []string{"sleep", "1000"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.group(t)
			b := newBreachWatcher()
			path := filepath.Join(g.pidsDir, tc.file)
			// pids.events is notified on v2 only: as watchPids decides.
			notified := tc.notified && (tc.file != "pids.events" || g.version == CgroupV2)
			w := b.watch(path, tc.key, tc.gate(g), notified)
			b.mu.Lock()
			wd := w.wd
			b.mu.Unlock()
			if notified && wd < 0 {
				t.Fatal("no inotify watch: the notified path is not being tested")
			}
			select {
			case <-w.breached():
				t.Fatal("fired before anything happened")
			default:
			}
			cmd := exec.Command(tc.argv[0], tc.argv[1:]...)
			if err := g.start(cmd); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.kill(); _ = cmd.Wait() })
			select {
			case <-w.breached():
			case <-time.After(guard):
				t.Fatalf("no breach seen; %s reads %d", tc.file, readKeyed(path, tc.key))
			}
			w.stop()
			w.stop() // a run's release may come after the breach ended it: harmless
			b.mu.Lock()
			defer b.mu.Unlock()
			if len(b.byWd) != 0 || b.npolled != 0 || len(b.polled) != 0 {
				t.Errorf("the watcher still holds %d notified and %d polled watches", len(b.byWd), b.npolled)
			}
		})
	}
}

// TestBreachWatcherStop: a watch stopped before any breach never fires and is forgotten, and
// the shared ticker ends with the last polled watch.
func TestBreachWatcherStop(t *testing.T) {
	g := limitedGroup(t)
	b := newBreachWatcher()
	var ws []*pidsWatch
	for range 3 {
		ws = append(ws, b.watch(filepath.Join(g.pidsDir, "pids.events"), "max", "", false))
	}
	for _, w := range ws {
		w.stop()
	}
	for {
		b.mu.Lock()
		ticking, left := b.ticking, b.npolled
		b.mu.Unlock()
		if left != 0 {
			t.Fatalf("%d polled watches left after stop", left)
		}
		if !ticking {
			break
		}
		time.Sleep(pidsPoll)
	}
	for _, w := range ws {
		select {
		case <-w.breached():
			t.Error("a stopped watch fired")
		default:
		}
	}
}

func parentCount(g *runGroup) string { return filepath.Join(filepath.Dir(g.pidsDir), "pids.current") }
func noGate(*runGroup) string        { return "" }

// stillGate is a file that does not change.
func stillGate(*runGroup) string { return "/proc/sys/kernel/pid_max" }

// limitedGroup is a run group of this host's cgroups with a pids limit of 2.
func limitedGroup(t *testing.T) *runGroup {
	t.Helper()
	c := newTestBwrap(t).Cgroups()
	if c.Version() == CgroupNone {
		t.Skip("SKIPPING: no usable cgroups; the pids watch is NOT being tested")
	}
	g, err := c.newRun(0, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.remove() })
	return g
}

// unifiedGroup is a group on this host's v2 hierarchy, controllers or none.
func unifiedGroup(t *testing.T) *runGroup {
	t.Helper()
	g, err := unifiedForTest(t).newRun(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.remove() })
	return g
}
