package sandbox

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNewNsjailMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	n, err := NewNsjail(Config{})
	if !errors.Is(err, ErrNoJail) {
		t.Fatalf("NewNsjail = %v, %v; want ErrNoJail", n, err)
	}
	mustContain(t, err.Error(), "nsjail", "error")
	if _, err := NewNsjail(Config{Path: "/nonexistent/nsjail"}); !errors.Is(err, ErrNoJail) {
		t.Errorf("Config.Path to nothing: %v", err)
	}
}

// testNsjail builds an Nsjail without looking for the binary, for the
// configuration tests: nsjail need not be installed to check what it
// would be told.
func testNsjail(t *testing.T, c *Cgroups) *Nsjail {
	t.Helper()
	f, err := jailSeccomp()
	if err != nil {
		t.Skip(err)
	}
	return &Nsjail{jailSetup{path: "/usr/bin/nsjail", uid: 65534, gid: 65534, dropRoot: true, hardened: true, cgroups: c, seccomp: f}}
}

func TestNsjailConfig(t *testing.T) {
	v1 := &Cgroups{version: CgroupV1, memMount: "/sys/fs/cgroup/memory", pidsMount: "/sys/fs/cgroup/pids",
		memParent: "/sys/fs/cgroup/memory/agent-host", pidsParent: "/sys/fs/cgroup/pids/agent-host", hasMemory: true, hasPids: true}
	v2 := &Cgroups{version: CgroupV2, memMount: "/sys/fs/cgroup", pidsMount: "/sys/fs/cgroup",
		memParent: "/sys/fs/cgroup/agent-host", pidsParent: "/sys/fs/cgroup/agent-host", hasMemory: true, hasPids: true}
	spec := &Spec{
		Argv:    []string{"python3", "main.py", `say "hi"`},
		WorkDir: "/srv/jobs/42",
		Mounts: []Mount{
			{Source: "/srv/pkgs", Target: "/job/.pkgs"},
			{Source: "/srv/vol", Target: "/data", Writable: true},
		},
		Env:     []string{"API_TOKEN=s3cr3t", "MULTI=a\nb"},
		Timeout: 90 * time.Second,
		Limits:  Limits{Memory: 64 << 20, Pids: 100, CPUTime: 10 * time.Second, FileSize: 3<<20 + 1, OpenFiles: 256, TmpSize: 32 << 20},
	}

	cfg := testNsjail(t, v1).config(spec, nil)
	t.Log("\n" + cfg)
	lines := strings.Split(cfg, "\n")
	has := func(want string) {
		t.Helper()
		mustContain(t, "\n"+cfg, "\n"+want+"\n", "config")
	}
	for _, want := range []string{
		`mode: ONCE`, `hostname: "job"`, `cwd: "/job"`,
		`time_limit: 91`, // a backstop a second after Run's own timeout
		`keep_caps: false`, `disable_no_new_privs: false`, `skip_setsid: false`, `keep_env: false`,
		`envar: "API_TOKEN=s3cr3t"`, `envar: "MULTI=a\nb"`, `envar: "HOME=/job"`, `envar: "PATH=` + JailPath + `"`,
		`clone_newnet: true`, `clone_newuser: true`, `clone_newns: true`, `clone_newpid: true`, `clone_newipc: true`, `clone_newuts: true`, `clone_newcgroup: true`,
		`uidmap {`, `  inside_id: "65534"`, `  outside_id: "65534"`, `gidmap {`,
		`rlimit_as_type: INF`, `rlimit_core: 0`, `rlimit_cpu: 10`, `rlimit_fsize: 4`, `rlimit_nofile: 256`,
		`cgroup_mem_max: 67108864`, `cgroup_pids_max: 100`,
		`cgroup_mem_mount: "/sys/fs/cgroup/memory"`, `cgroup_mem_parent: "agent-host"`,
		`cgroup_pids_mount: "/sys/fs/cgroup/pids"`, `cgroup_pids_parent: "agent-host"`,
		`  dst: "/proc"`, `  fstype: "proc"`,
		`  options: "size=33554432,mode=1777"`,
		`seccomp_string: "DEFAULT ALLOW"`,
		`  path: "/usr/bin/env"`, `  arg: "--"`, `  arg: "python3"`, `  arg: "say \"hi\""`,
	} {
		has(want)
	}
	for _, notWant := range []string{"use_cgroupv2", "shadow", "/etc/ssl/private", "/root", "/home", "keep_caps: true"} {
		if strings.Contains(cfg, notWant) {
			t.Errorf("config mentions %q", notWant)
		}
	}

	// Mounts: the system read-only, /job and Writable mounts read-write, in
	// bwrap's order (/job before the mounts that may sit under it).
	mounts := nsjailMounts(lines)
	want := map[string]string{
		"/usr": `src: "/usr" is_bind: true rw: false`, "/etc/passwd": `src: "/etc/passwd" is_bind: true rw: false`,
		"/tmp": `fstype: "tmpfs"`, "/dev/shm": `fstype: "tmpfs"`, "/dev/null": `src: "/dev/null" is_bind: true rw: true nodev: false`,
		"/job": `src: "/srv/jobs/42" is_bind: true rw: true`, "/job/.pkgs": `src: "/srv/pkgs" is_bind: true rw: false`,
		"/data": `src: "/srv/vol" is_bind: true rw: true`,
	}
	for dst, fields := range want {
		got, ok := mounts[dst]
		if !ok {
			t.Errorf("no mount on %s", dst)
			continue
		}
		for _, kv := range splitFields(fields) {
			if !strings.Contains(got, kv) {
				t.Errorf("mount %s: %q missing from %q", dst, kv, got)
			}
		}
	}
	if order := mountOrder(lines); indexOf(order, "/job") > indexOf(order, "/job/.pkgs") || indexOf(order, "/proc") < 0 {
		t.Errorf("mount order %v", order)
	}

	// v2, host network, no timeout, defaults.
	spec.Network = NetworkHost
	spec.Timeout = 0
	spec.Limits = Limits{}
	cfg = testNsjail(t, v2).config(spec, nil)
	for _, want := range []string{
		`clone_newnet: false`, `time_limit: 0`, `use_cgroupv2: true`, `cgroupv2_mount: "/sys/fs/cgroup/agent-host"`,
		`cgroup_pids_max: ` + strconv.Itoa(DefaultPids), `rlimit_nofile: ` + strconv.Itoa(DefaultOpenFiles),
		`rlimit_cpu_type: INF`, `rlimit_fsize_type: INF`, `  options: "size=` + strconv.Itoa(DefaultTmpSize) + `,mode=1777"`,
	} {
		mustContain(t, "\n"+cfg, "\n"+want+"\n", "v2 config")
	}
	for _, notWant := range []string{"cgroup_mem_max", "cgroup_mem_mount"} {
		if strings.Contains(cfg, notWant) {
			t.Errorf("v2 config without a memory limit mentions %q", notWant)
		}
	}

	// No cgroups: no cgroup lines; an absolute command is exec'd as is.
	spec.Argv = []string{"/usr/bin/true"}
	cfg = testNsjail(t, &Cgroups{}).config(spec, nil)
	if strings.Contains(cfg, "\ncgroup") || strings.Contains(cfg, "use_cgroupv2") {
		t.Errorf("config without cgroups mentions cgroups:\n%s", cfg)
	}
	mustContain(t, cfg, "exec_bin {\n  path: \"/usr/bin/true\"\n}", "exec_bin")
}

// nsjailMounts maps each mount's dst to its other fields on one line.
func nsjailMounts(lines []string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(lines); i++ {
		if lines[i] != "mount {" {
			continue
		}
		var dst string
		var fields []string
		for i++; i < len(lines) && lines[i] != "}"; i++ {
			f := strings.TrimSpace(lines[i])
			if v, ok := strings.CutPrefix(f, "dst: "); ok {
				dst, _ = strconv.Unquote(v)
			} else {
				fields = append(fields, f)
			}
		}
		out[dst] = strings.Join(fields, " ")
	}
	return out
}

func mountOrder(lines []string) []string {
	var order []string
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, "  dst: "); ok {
			d, _ := strconv.Unquote(v)
			order = append(order, d)
		}
	}
	return order
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// splitFields splits `src: "/usr" is_bind: true` into "src: \"/usr\"" and
// "is_bind: true".
func splitFields(s string) []string {
	f := strings.Fields(s)
	var out []string
	for i := 0; i+1 < len(f); i += 2 {
		out = append(out, f[i]+" "+f[i+1])
	}
	return out
}

func TestPbQuote(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:         `"plain"`,
		`a "q" \ b`:     `"a \"q\" \\ b"`,
		"nl\ntab\tcr\r": `"nl\ntab\tcr\r"`,
		"bell\a\x7f":    `"bell\007\177"`,
		"utf8 é":        `"utf8 é"`,
	} {
		if got := pbQuote(in); got != want {
			t.Errorf("pbQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestNsjailIntegration runs real jobs through nsjail where it is installed.
func TestNsjailIntegration(t *testing.T) {
	if _, err := exec.LookPath("nsjail"); err != nil {
		t.Skip("SKIPPING NSJAIL INTEGRATION TEST: nsjail is not on the PATH; the nsjail jail is NOT being run (only its configuration is tested)")
	}
	n, err := NewNsjail(Config{})
	if err != nil {
		t.Fatalf("NewNsjail: %v", err)
	}
	t.Log(n.Describe())
	uid, _ := n.Owner()
	cases := []struct {
		name   string
		script string
		limits Limits
		limit  string
	}{
		{name: "identity", script: `[ "$(id -u)" = ` + strconv.Itoa(uid) + ` ] && grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/self/status && grep -q '^CapEff:[[:space:]]*0*$' /proc/self/status`},
		{name: "seccomp", script: `grep -q '^Seccomp:[[:space:]]*2$' /proc/self/status && unshare -U true 2>&1 | grep -q 'Operation not permitted'`},
		{name: "file system", script: `[ "$PWD" = /job ] && echo ok > /job/x && ! touch /usr/x 2>/dev/null && [ ! -e /etc/shadow ] && echo t > /tmp/t`},
		{name: "proc", script: `pids=(/proc/[0-9]*); [ ${#pids[@]} -le 2 ]`},
		{name: "fds", script: `[ "$(ls /proc/$$/fd | tr '\n' ' ')" = "0 1 2 " ]; r=$?; exit $r`},
		{name: "memory", script: `exec python3 -c 's = b"x" * (512 << 20)'`, limits: Limits{Memory: 64 << 20}, limit: LimitMemory},
		{name: "cpu", script: `while :; do :; done`, limits: Limits{CPUTime: time.Second}, limit: LimitCPU},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.limits.Memory > 0 && n.Cgroups().Version() == CgroupNone {
				t.Skip("SKIPPING: no cgroups")
			}
			res, stdout, stderr := run(t, n, &Spec{Argv: bash(tc.script), WorkDir: testDir(t, n, true), Limits: tc.limits, Timeout: guard})
			if tc.limit == "" {
				expectOK(t, res, stdout, stderr)
			} else if res.Limit != tc.limit {
				t.Errorf("result %+v, want Limit %q\nstderr:\n%s", *res, tc.limit, stderr)
			}
		})
	}
}

// fakeNsjail is an nsjail stand-in that checks how it was called, then
// runs exec_bin with the configuration's environment, unjailed: it drives
// Run's plumbing (configuration through a memfd, the run's cgroup, exit
// statuses) on hosts without nsjail. It proves nothing about isolation.
const fakeNsjail = `#!/usr/bin/python3
import ast, os, sys
assert sys.argv[1:] == ["--config", "/proc/self/fd/3"], sys.argv
# (Python itself sets LC_CTYPE: PEP 538.)
assert set(os.environ) <= {"LC_CTYPE"}, "nsjail got an environment: %r" % dict(os.environ)
env, argv, parents = {}, [], []
for line in open(sys.argv[2]):
    key, _, value = line.strip().partition(": ")
    if key == "envar":
        k, _, v = ast.literal_eval(value).partition("=")
        env[k] = v
    elif key in ("path", "arg"):
        argv.append(ast.literal_eval(value))
    elif key in ("cgroup_pids_parent", "cgroupv2_mount"):
        parents.append(ast.literal_eval(value))
for p in parents:
    d = p if p.startswith("/") else os.path.join("/sys/fs/cgroup/pids", p)
    assert os.path.isdir(d), "no run cgroup " + d
os.execve(argv[0], argv, env)
`

func TestNsjailRunFake(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/python3"); err != nil {
		t.Skip("no python3 for the fake nsjail")
	}
	fake := filepath.Join(t.TempDir(), "nsjail")
	writeFile(t, fake, fakeNsjail, 0o755)
	n, err := NewNsjail(Config{Path: fake})
	if err != nil {
		t.Fatalf("NewNsjail with a fake nsjail: %v", err)
	}
	t.Log(n.Describe())
	res, stdout, stderr := run(t, n, &Spec{
		Argv:    bash(`echo "$SECRET_TOKEN"; exit 3`),
		WorkDir: testDir(t, n, true),
		Env:     []string{"SECRET_TOKEN=s3cr3t \"quoted\"\nline"},
		Timeout: guard,
	})
	if res.ExitCode != 3 || stdout != "s3cr3t \"quoted\"\nline\n" {
		t.Errorf("result %+v, stdout %q, stderr %q", *res, stdout, stderr)
	}
	if c := n.Cgroups(); c.Version() != CgroupNone {
		if left := runGroups(t, c); len(left) > 0 {
			t.Errorf("run groups left: %v", left)
		}
	}
	// Exit statuses map to limits as bwrap's do.
	res, _, _ = run(t, n, &Spec{Argv: bash(`exit 152`), WorkDir: testDir(t, n, true), Limits: Limits{CPUTime: time.Second}})
	if res.Limit != LimitCPU {
		t.Errorf("exit 152 with a CPU limit: %+v", *res)
	}
}
