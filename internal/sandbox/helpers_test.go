package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/testwait"
)

// newTestBwrap returns a jail, skipping loudly when bwrap is not installed.
func newTestBwrap(tb testing.TB) *Bwrap {
	tb.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		tb.Skip("SKIPPING JAIL TEST: bwrap is not installed (apt-get install bubblewrap); the sandbox is NOT being tested")
	}
	b, err := NewBwrap(Config{})
	if err != nil {
		tb.Fatalf("NewBwrap: %v", err)
	}
	return b
}

// newPlainBwrap returns a jail without hardening, as the benchmark's
// baseline and to show what the hardening changes.
func newPlainBwrap(tb testing.TB) *Bwrap {
	tb.Helper()
	newTestBwrap(tb) // skip when bwrap is missing
	b, err := NewBwrapUnhardened(Config{})
	if err != nil {
		tb.Fatalf("NewBwrapUnhardened(Config{}): %v", err)
	}
	return b
}

// requireCgroups skips, loudly, a test of limits that need cgroups.
func requireCgroups(tb testing.TB, b *Bwrap) {
	tb.Helper()
	if b.Cgroups().Version() == CgroupNone {
		tb.Skipf("SKIPPING LIMIT TEST: no usable cgroups (%s); memory and pids limits are NOT being tested (run as root on a host with cgroup v1 or v2 memory and pids controllers)", b.Cgroups().Describe())
	}
}

// runGroups lists the run groups left under the jail's cgroup parents.
func runGroups(tb testing.TB, c *Cgroups) []string {
	tb.Helper()
	var left []string
	for _, parent := range []string{c.memParent, c.pidsParent} {
		entries, err := os.ReadDir(parent)
		if err != nil {
			tb.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), fmt.Sprintf("run-%d-", os.Getpid())) {
				left = append(left, filepath.Join(parent, e.Name()))
			}
		}
	}
	return left
}

// testDir makes a directory the jail's uid can use. t.TempDir is not used:
// its parent is 0700, which an unprivileged jail uid cannot traverse.
func testDir(tb testing.TB, b interface{ Owner() (int, int) }, writable bool) string {
	tb.Helper()
	d, err := os.MkdirTemp("", "sandbox-test-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		tb.Fatal(err)
	}
	if writable && b != nil && os.Geteuid() == 0 {
		uid, gid := b.Owner()
		if err := os.Chown(d, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	return d
}

func writeFile(tb testing.TB, path, content string, perm os.FileMode) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // umask
		tb.Fatal(err)
	}
}

// run runs spec with captured output and fails the test if it cannot start.
func run(tb testing.TB, j Jail, spec *Spec) (res *Result, stdout, stderr string) {
	tb.Helper()
	var out, errb bytes.Buffer
	spec.Stdout, spec.Stderr = &out, &errb
	res, err := Run(context.Background(), j, spec)
	if err != nil {
		tb.Fatalf("%s.Run(%q): %v", j.Name(), spec.Argv, err)
	}
	return res, out.String(), errb.String()
}

func bash(script string) []string { return []string{"bash", "-c", script} }

// sleepToken returns an argument for `sleep` that no other process on the
// machine is likely to use, so /proc can be searched for the test's sleeps.
func sleepToken() string { return strconv.Itoa(1_000_000 + rand.IntN(8_000_000)) }

// liveProcs returns the host pids whose argv is exactly argv, ignoring
// zombies (a dead process that the host's init has not reaped yet).
func liveProcs(tb testing.TB, argv ...string) []int {
	tb.Helper()
	want := strings.Join(argv, "\x00")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		tb.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || strings.TrimSuffix(string(cmdline), "\x00") != want {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// waitGone polls until no process runs argv, failing after a generous bound.
// Killed processes outside a pid namespace vanish asynchronously.
func waitGone(tb testing.TB, argv ...string) {
	tb.Helper()
	testwait.For(tb, fmt.Sprintf("processes %q to end", argv), 60*time.Second, func() error {
		if pids := liveProcs(tb, argv...); len(pids) > 0 {
			return fmt.Errorf("still running: pids %v", pids)
		}
		return nil
	})
}

// markerWriter collects output and calls fn once when marker shows up, so
// tests can act exactly when the jailed script reached a point.
type markerWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	once   sync.Once
	fn     func()
}

func (w *markerWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	n, _ := w.buf.Write(p)
	hit := strings.Contains(w.buf.String(), w.marker)
	w.mu.Unlock()
	if hit {
		w.once.Do(w.fn)
	}
	return n, nil
}

func (w *markerWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func hostInterfaces(tb testing.TB) []string {
	tb.Helper()
	data, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		tb.Fatal(err)
	}
	return parseInterfaces(string(data))
}

func parseInterfaces(procNetDev string) []string {
	var names []string
	for i, line := range strings.Split(procNetDev, "\n") {
		if i < 2 {
			continue // headers
		}
		if name, _, ok := strings.Cut(line, ":"); ok {
			names = append(names, strings.TrimSpace(name))
		}
	}
	return names
}

func mustContain(tb testing.TB, haystack, needle, what string) {
	tb.Helper()
	if !strings.Contains(haystack, needle) {
		tb.Errorf("%s: %q not found in:\n%s", what, needle, haystack)
	}
}

func expectOK(tb testing.TB, res *Result, stdout, stderr string) {
	tb.Helper()
	if res.ExitCode != 0 || res.TimedOut || res.Canceled {
		tb.Fatalf("result %+v\nstdout:\n%s\nstderr:\n%s", *res, stdout, stderr)
	}
}
