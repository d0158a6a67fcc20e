package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/testwait"
)

func TestParseCgroupMounts(t *testing.T) {
	cases := []struct {
		name      string
		mountinfo string
		v2        string
		v1        map[string]string
	}{
		{
			name: "hybrid: v1 controllers, v2 without them",
			mountinfo: `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`,
			v2: "/sys/fs/cgroup/unified",
			v1: map[string]string{"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids"},
		},
		{
			name:      "pure v2, optional fields",
			mountinfo: "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
			v2:        "/sys/fs/cgroup",
			v1:        map[string]string{},
		},
		{
			name:      "escaped mount point, joint controllers",
			mountinfo: `40 31 0:37 / /cg\040v1 rw - cgroup cgroup rw,memory,pids` + "\n",
			v1:        map[string]string{"memory": "/cg v1", "pids": "/cg v1"},
		},
		{name: "none", mountinfo: "22 1 8:1 / / rw - ext4 /dev/vda rw\n", v1: map[string]string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := parseCgroupMounts(tc.mountinfo)
			if m.v2 != tc.v2 {
				t.Errorf("v2 = %q, want %q", m.v2, tc.v2)
			}
			if fmt.Sprint(m.v1) != fmt.Sprint(tc.v1) {
				t.Errorf("v1 = %v, want %v", m.v1, tc.v1)
			}
		})
	}
}

// TestDetectCgroupsHost checks the detector on this host: when the memory
// and pids controllers are mounted (and the test runs as root), it must
// find them, on v2 if the unified hierarchy has both, else on v1.
func TestDetectCgroupsHost(t *testing.T) {
	c := DetectCgroups(DefaultCgroupParent)
	t.Log(c.Describe())
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	m := parseCgroupMounts(string(data))
	var want CgroupVersion
	if m.v2 != "" {
		ctl, _ := os.ReadFile(filepath.Join(m.v2, "cgroup.controllers"))
		if f := strings.Fields(string(ctl)); slices.Contains(f, "memory") && slices.Contains(f, "pids") {
			want = CgroupV2
		}
	}
	if want == CgroupNone && m.v1["memory"] != "" && m.v1["pids"] != "" {
		want = CgroupV1
	}
	if os.Geteuid() != 0 {
		t.Skipf("not root: detected %v; a root host would use %v", c.Version(), want)
	}
	if c.Version() != want {
		t.Errorf("detected %v (%s), want %v", c.Version(), c.Describe(), want)
	}
	if want != CgroupNone && !strings.HasPrefix(c.Describe(), want.String()+" (memory, pids)") {
		t.Errorf("Describe() = %q", c.Describe())
	}
}

func TestDetectCgroupsNone(t *testing.T) {
	mi := filepath.Join(t.TempDir(), "mountinfo")
	writeFile(t, mi, "22 1 8:1 / / rw - ext4 /dev/vda rw\n", 0o644)
	c := detectCgroups(DefaultCgroupParent, mi)
	if c.Version() != CgroupNone {
		t.Fatalf("Version() = %v", c.Version())
	}
	mustContain(t, c.Describe(), "no cgroup file system is mounted", "Describe")
	if _, err := c.newRun(0, 0); err == nil {
		t.Error("newRun succeeded without cgroups")
	}
}

// unifiedForTest returns a Cgroups on this host's v2 hierarchy, with no
// controllers unless it has them: the v2 mechanics (joining, cgroup.kill,
// removal) work without any.
func unifiedForTest(t *testing.T) *Cgroups {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	v2 := parseCgroupMounts(string(data)).v2
	if v2 == "" {
		t.Skip("SKIPPING: no cgroup v2 hierarchy on this host; the v2 code is NOT being tested")
	}
	parent := filepath.Join(v2, fmt.Sprintf("agent-host-test-%d", os.Getpid()))
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Skipf("SKIPPING: cannot create a v2 cgroup (%v); the v2 code is NOT being tested", err)
	}
	t.Cleanup(func() { os.Remove(parent) })
	if _, err := os.Stat(filepath.Join(parent, "cgroup.kill")); err != nil {
		t.Skip("SKIPPING: no cgroup.kill (Linux < 5.14)")
	}
	return &Cgroups{version: CgroupV2, memParent: parent, pidsParent: parent, memMount: v2, pidsMount: v2}
}

// TestCgroupV2Kill: cgroup.kill takes every process of a group, however it
// detached, and the group is removed afterwards.
func TestCgroupV2Kill(t *testing.T) {
	c := unifiedForTest(t)
	g, err := c.newRun(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	tok := sleepToken()
	// A shell in the group starts a detached sleep, then exits.
	cmd := exec.Command("bash", "-c", `echo $$ > "$1/cgroup.procs" && setsid -f sleep `+tok+` >/dev/null 2>&1`, "sh", g.memDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// setsid -f forks and returns: the child may not have become `sleep` yet.
	var pids []int
	testwait.For(t, "the detached sleep to start", 60*time.Second, func() error {
		if pids = liveProcs(t, "sleep", tok); len(pids) != 1 {
			return fmt.Errorf("sleeps %v", pids)
		}
		return nil
	})
	if !slices.Contains(readPids(filepath.Join(g.memDir, "cgroup.procs")), pids[0]) {
		t.Fatalf("the sleep is not in the group: sleeps %v, group %v", pids, readPids(filepath.Join(g.memDir, "cgroup.procs")))
	}
	g.kill()
	if err := g.remove(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "sleep", tok) // the host's init reaps it: asynchronous
	if _, err := os.Stat(g.memDir); !os.IsNotExist(err) {
		t.Errorf("group %s still there: %v", g.memDir, err)
	}
}

// TestBwrapCgroupV2: a bwrap run in a v2 group, end to end.
func TestBwrapCgroupV2(t *testing.T) {
	c := unifiedForTest(t)
	newTestBwrap(t)
	b, err := NewBwrap(Config{Cgroups: c})
	if err != nil {
		t.Fatal(err)
	}
	checkInRunGroup(t, b)
	// A v2 group without the controllers must refuse limits, not drop them.
	if _, err := Run(t.Context(), b, &Spec{Argv: []string{"true"}, WorkDir: testDir(t, b, true), Limits: Limits{Memory: 64 << 20}}); err == nil {
		t.Error("a memory limit was accepted without a memory controller")
	}
}

// TestCgroupsSweepStale: groups of a host that died are removed at start;
// those of a live host are not.
func TestCgroupsSweepStale(t *testing.T) {
	b := newTestBwrap(t)
	requireCgroups(t, b)
	c := b.Cgroups()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(c.pidsParent, "run-"+strconv.Itoa(dead.Process.Pid)+"-1")
	live := filepath.Join(c.pidsParent, "run-1-1") // pid 1 is always alive
	for _, d := range []string{stale, live} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	defer os.Remove(live)
	c2 := DetectCgroups(DefaultCgroupParent)
	if c2.Version() == CgroupNone {
		t.Fatal(c2.Describe())
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale group %s not removed: %v", stale, err)
		os.Remove(stale)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live host's group was removed: %v", err)
	}
}

// TestCgroupFilesFake drives the control-file code against plain files laid
// out like cgroupfs: the v2 limit files cannot be tested for real on a host
// whose memory and pids controllers are bound to v1.
func TestCgroupFilesFake(t *testing.T) {
	mk := func(t *testing.T, dir string, files map[string]string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			writeFile(t, filepath.Join(dir, name), content, 0o644)
		}
	}
	read := func(t *testing.T, path string) string {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}

	t.Run("v2 setup enables the controllers down to the parent", func(t *testing.T) {
		root := t.TempDir()
		mk(t, root, map[string]string{"cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n", "cgroup.subtree_control": ""})
		mk(t, filepath.Join(root, "a"), map[string]string{"cgroup.subtree_control": ""})
		mk(t, filepath.Join(root, "a", "b"), map[string]string{"cgroup.subtree_control": ""})
		if err := setupV2(root, "a/b"); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{root, filepath.Join(root, "a"), filepath.Join(root, "a", "b")} {
			if got := read(t, filepath.Join(d, "cgroup.subtree_control")); got != "+memory +pids" {
				t.Errorf("%s/cgroup.subtree_control = %q", d, got)
			}
		}
	})
	t.Run("v2 setup without the controllers", func(t *testing.T) {
		root := t.TempDir()
		mk(t, root, map[string]string{"cgroup.controllers": "hugetlb\n"})
		err := setupV2(root, "agent-host")
		if err == nil || !strings.Contains(err.Error(), "memory, pids not available") {
			t.Errorf("setupV2 = %v", err)
		}
		if _, err := os.Stat(filepath.Join(root, "agent-host")); err == nil {
			t.Error("the parent was created in a hierarchy it cannot use")
		}
	})
	t.Run("v2 limits and counters", func(t *testing.T) {
		dir := t.TempDir()
		mk(t, dir, map[string]string{"memory.max": "max", "memory.swap.max": "max", "memory.oom.group": "0", "pids.max": "max",
			"memory.events": "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 1\n", "pids.events": "max 3\n"})
		g := &runGroup{version: CgroupV2, dirs: []string{dir}, memDir: dir, pidsDir: dir}
		if err := g.setLimits(64<<20, 100); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]string{"memory.max": "67108864", "memory.swap.max": "0", "memory.oom.group": "1", "pids.max": "100"} {
			if got := read(t, filepath.Join(dir, name)); got != want {
				t.Errorf("%s = %q, want %q", name, got, want)
			}
		}
		if g.oomKills() != 1 || g.pidsRefused() != 3 {
			t.Errorf("oomKills %d, pidsRefused %d; want 1, 3", g.oomKills(), g.pidsRefused())
		}
	})
	t.Run("v1 limits and counters", func(t *testing.T) {
		mem, pids := t.TempDir(), t.TempDir()
		mk(t, mem, map[string]string{"memory.limit_in_bytes": "", "memory.memsw.limit_in_bytes": "",
			"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", "memory.max_usage_in_bytes": "67100000\n"})
		mk(t, pids, map[string]string{"pids.max": "", "pids.events": "max 0\n", "pids.peak": "100\n"})
		g := &runGroup{version: CgroupV1, dirs: []string{mem, pids}, memDir: mem, pidsDir: pids}
		if err := g.setLimits(64<<20, 100); err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]string{filepath.Join(mem, "memory.limit_in_bytes"): "67108864", filepath.Join(mem, "memory.memsw.limit_in_bytes"): "67108864", filepath.Join(pids, "pids.max"): "100"} {
			if got := read(t, path); got != want {
				t.Errorf("%s = %q, want %q", path, got, want)
			}
		}
		if g.oomKills() != 2 || g.pidsRefused() != 0 {
			t.Errorf("oomKills %d, pidsRefused %d; want 2, 0", g.oomKills(), g.pidsRefused())
		}
		if m, p := g.peaked(64<<20, 100); !m || !p {
			t.Errorf("peaked = %v, %v; want both", m, p)
		}
		if m, p := g.peaked(128<<20, 101); m || p {
			t.Errorf("peaked = %v, %v; want neither", m, p)
		}
	})
}
