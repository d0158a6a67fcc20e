package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNewBwrapMissing(t *testing.T) {
	cases := []struct {
		name string
		path string // PATH for the lookup
		cfg  Config
	}{
		{name: "explicit path", path: os.Getenv("PATH"), cfg: Config{Path: "/nonexistent/bwrap"}},
		{name: "not on PATH", path: t.TempDir()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PATH", tc.path)
			b, err := NewBwrap(tc.cfg)
			if !errors.Is(err, ErrNoJail) {
				t.Fatalf("NewBwrap = %v, %v; want ErrNoJail", b, err)
			}
			for _, want := range []string{"install bubblewrap (apt-get install bubblewrap)", "never runs unjailed"} {
				mustContain(t, err.Error(), want, "ErrNoJail message")
			}
		})
	}
}

// TestNewBwrapRefusesRootJail: both ids zero are the defaults, so root can
// only be asked for through one of them; that, or a negative id, is refused.
func TestNewBwrapRefusesRootJail(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("Config.UID and GID only matter when the host runs as root")
	}
	newTestBwrap(t) // skip when bwrap is missing
	for _, cfg := range []Config{{UID: 0, GID: 23456}, {UID: 12345, GID: 0}, {UID: -1, GID: -1}} {
		_, err := NewBwrap(cfg)
		if err == nil {
			t.Fatalf("NewBwrap(%+v) succeeded; a root host must not run jails as root", cfg)
		}
		mustContain(t, err.Error(), "refusing to run jails as uid", "refusal")
	}
}

// TestNewBwrapCgroupsConflict: a Config cannot ask for given cgroups and for
// none at once; which one it meant is not guessed.
func TestNewBwrapCgroupsConflict(t *testing.T) {
	_, err := NewBwrap(Config{Cgroups: &Cgroups{}, NoCgroups: true})
	if err == nil {
		t.Fatal("NewBwrap with both Cgroups and NoCgroups succeeded")
	}
	mustContain(t, err.Error(), "both Cgroups and NoCgroups", "conflict")
}

func TestBwrapOwner(t *testing.T) {
	b := newTestBwrap(t)
	uid, gid := b.Owner()
	if os.Geteuid() == 0 {
		if uid != DefaultUID || gid != DefaultGID {
			t.Errorf("Owner() = %d, %d; want %d, %d", uid, gid, DefaultUID, DefaultGID)
		}
		b2, err := NewBwrap(Config{UID: 12345, GID: 23456})
		if err != nil {
			t.Fatal(err)
		}
		if uid, gid := b2.Owner(); uid != 12345 || gid != 23456 {
			t.Errorf("Config{UID, GID}: Owner() = %d, %d", uid, gid)
		}
	} else if uid != os.Geteuid() || gid != os.Getegid() {
		t.Errorf("Owner() = %d, %d; want the host user %d, %d", uid, gid, os.Geteuid(), os.Getegid())
	}
}

func TestBwrapArgs(t *testing.T) {
	b := newTestBwrap(t)
	uid, gid := b.Owner()
	spec := &Spec{
		Argv:    []string{"python3", "main.py"},
		WorkDir: "/srv/jobs/42",
		Mounts: []Mount{
			{Source: "/srv/pkgs", Target: "/job/.pkgs"},
			{Source: "/srv/vol", Target: "/data", Writable: true},
		},
		Env: []string{"API_TOKEN=s3cr3t", "LD_BIND_NOW=1"},
	}
	args := argsOf(b, spec)
	joined := " " + strings.Join(args, " ") + " "

	for _, want := range []string{
		" --unshare-user ", " --unshare-pid ", " --unshare-ipc ", " --unshare-uts ", " --unshare-net ",
		" --disable-userns ", " --die-with-parent ", " --new-session ", " --cap-drop ALL ",
		" --uid " + strconv.Itoa(uid) + " --gid " + strconv.Itoa(gid) + " ",
		" --hostname " + Hostname + " ",
		" --ro-bind /usr /usr ", " --proc /proc ", " --dev /dev ",
		" --file " + strconv.Itoa(b.etcFirstFD()) + " /etc/passwd ",
		" --size 268435456 --tmpfs /tmp ", " --size 268435456 --tmpfs /dev/shm ",
		" --bind /srv/jobs/42 /job --ro-bind /srv/pkgs /job/.pkgs --bind /srv/vol /data --remount-ro /dev --remount-ro / --chdir /job ",
		" -- python3 main.py ",
	} {
		mustContain(t, joined, want, "Args")
	}
	if strings.Contains(joined, "s3cr3t") || strings.Contains(joined, "LD_BIND_NOW") || strings.Contains(joined, "--setenv") {
		t.Errorf("the environment is on the bwrap command line: %s", joined)
	}
	// It goes through --args instead, NUL-separated, with the jail's defaults.
	if got, want := string(envArgs(spec.Env)), "--setenv\x00API_TOKEN\x00s3cr3t\x00--setenv\x00LD_BIND_NOW\x001\x00"+
		"--setenv\x00HOME\x00/job\x00--setenv\x00PATH\x00"+JailPath+"\x00"; got != want {
		t.Errorf("envArgs = %q, want %q", got, want)
	}
	for _, bad := range []string{"shadow", "/etc/ssl/private", "/root", "/home"} {
		if strings.Contains(joined, bad) {
			t.Errorf("Args mention %q: %s", bad, joined)
		}
	}
	if !strings.HasSuffix(joined, " -- python3 main.py ") {
		t.Errorf("Args must end with -- and the command: %s", joined)
	}

	spec.Network = NetworkHost
	if args := argsOf(b, spec); slices.Contains(args, "--unshare-net") {
		t.Errorf("NetworkHost still unshares the network: %q", args)
	}

	spec.Limits.TmpSize = 1 << 20
	mustContain(t, " "+strings.Join(argsOf(b, spec), " ")+" ", " --size 1048576 --tmpfs /tmp ", "Args with TmpSize")

	// Without hardening the jail is what it was before limits existed.
	plain, err := NewBwrapUnhardened(Config{})
	if err != nil {
		t.Fatal(err)
	}
	spec.Limits = Limits{}
	joined = " " + strings.Join(argsOf(plain, spec), " ") + " "
	for _, want := range []string{" --tmpfs /tmp ", " --remount-ro / --chdir /job "} {
		mustContain(t, joined, want, "plain Args")
	}
	for _, notWant := range []string{"--size", "/dev/shm", "--remount-ro /dev", "--seccomp"} {
		if strings.Contains(joined, notWant) {
			t.Errorf("plain Args have %q: %s", notWant, joined)
		}
	}
}

// TestBwrapIsolation checks the jail's contract from inside it: each case
// is a script that exits 0 when the property holds.
func TestBwrapIsolation(t *testing.T) {
	b := newTestBwrap(t)
	uid, gid := b.Owner()

	hostTmp := filepath.Join(os.TempDir(), "sandbox-host-visible-"+sleepToken())
	writeFile(t, hostTmp, "host", 0o644)
	t.Cleanup(func() { os.Remove(hostTmp) })

	roDir := testDir(t, b, false)
	writeFile(t, filepath.Join(roDir, "f"), "read-only content", 0o644)
	rwDir := testDir(t, b, true)

	hostNS := map[string]string{}
	for _, ns := range []string{"user", "pid", "ipc", "uts", "net", "mnt"} {
		link, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		hostNS[ns] = link
	}

	privateTmp := "private-" + sleepToken()
	cases := []struct {
		name    string
		script  string
		network Network
		mounts  []Mount
		after   func(t *testing.T, workDir string)
	}{
		{name: "non-root uid", script: `[ "$(id -u)" != 0 ] && [ "$(id -u)" = ` + strconv.Itoa(uid) + ` ]`},
		{name: "gid without supplementary groups", script: `[ "$(id -g)" = ` + strconv.Itoa(gid) + ` ] && [ "$(id -G)" = ` + strconv.Itoa(gid) + ` ]`},
		{name: "no secrets in etc", script: `[ ! -e /etc/shadow ] && ! cat /etc/shadow 2>/dev/null && [ ! -e /etc/gshadow ] && [ ! -e /etc/ssl/private ] && [ -r /etc/passwd ]`},
		// The readable /etc files are copies (see jailArgs): of the host's current content,
		// and as read-only as a bind, mode included.
		{name: "etc files are the host's", script: `[ "$(sha256sum /etc/passwd /etc/group /etc/ld.so.cache)" = "` + hostSums(t, "/etc/passwd", "/etc/group", "/etc/ld.so.cache") + `" ] && ! chmod 666 /etc/passwd 2>/dev/null && ! rm /etc/passwd 2>/dev/null`},
		{name: "system read-only", script: `! touch /usr/x 2>/dev/null && ! touch /x 2>/dev/null && ! mkdir /etc/x 2>/dev/null && ! touch /etc/passwd 2>/dev/null && ! touch /bin/x 2>/dev/null`},
		{name: "no host home or root", script: `[ ! -e /root ] && [ ! -e /home ] && [ ! -e /var ] && [ ! -e /opt ] && [ ! -e /sys ]`},
		{
			name:   "private tmp",
			script: `[ ! -e ` + hostTmp + ` ] && echo x > /tmp/` + privateTmp + ` && [ -s /tmp/` + privateTmp + ` ] && touch /dev/shm/x`,
			after: func(t *testing.T, _ string) {
				if _, err := os.Stat(filepath.Join(os.TempDir(), privateTmp)); err == nil {
					t.Error("a file written to the jail's /tmp appeared in the host's")
				}
			},
		},
		{
			name:   "job is cwd and HOME, writable",
			script: `[ "$PWD" = /job ] && [ "$(pwd -P)" = /job ] && [ "$HOME" = /job ] && echo ok > /job/written && mkdir /job/sub`,
			after: func(t *testing.T, workDir string) {
				if data, err := os.ReadFile(filepath.Join(workDir, "written")); err != nil || string(data) != "ok\n" {
					t.Errorf("/job/written on the host: %q, %v", data, err)
				}
			},
		},
		{
			name:   "mounts",
			script: `[ "$(cat /data/ro/f)" = "read-only content" ] && ! touch /data/ro/g 2>/dev/null && echo w > /job/out/g`,
			mounts: []Mount{{Source: roDir, Target: "/data/ro"}, {Source: rwDir, Target: "/job/out", Writable: true}},
			after: func(t *testing.T, _ string) {
				if _, err := os.Stat(filepath.Join(rwDir, "g")); err != nil {
					t.Errorf("write through a Writable mount: %v", err)
				}
				if _, err := os.Stat(filepath.Join(roDir, "g")); err == nil {
					t.Error("wrote through a read-only mount")
				}
			},
		},
		{
			name: "network none",
			script: `[ "$(awk -F: 'NR>2 {gsub(/ /, "", $1); print $1}' /proc/net/dev)" = lo ] && python3 -c '
import socket, sys
s = socket.socket()
s.settimeout(30)
try:
    s.connect(("1.1.1.1", 53))
except OSError:
    sys.exit(0)
sys.exit(1)'`,
		},
		{name: "own pid namespace", script: `[ "$(cat /proc/1/comm)" = bwrap ] && [ "$(readlink /proc/self/ns/pid)" != "` + hostNS["pid"] + `" ]`},
		{name: "own ipc namespace", script: `[ "$(readlink /proc/self/ns/ipc)" != "` + hostNS["ipc"] + `" ]`},
		{name: "own uts namespace and fixed hostname", script: `[ "$(readlink /proc/self/ns/uts)" != "` + hostNS["uts"] + `" ] && [ "$(cat /proc/sys/kernel/hostname)" = ` + Hostname + ` ]`},
		{name: "own user and mount namespaces", script: `[ "$(readlink /proc/self/ns/user)" != "` + hostNS["user"] + `" ] && [ "$(readlink /proc/self/ns/mnt)" != "` + hostNS["mnt"] + `" ]`},
		{name: "no new privileges, no capabilities", script: `grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/self/status && grep -q '^CapEff:[[:space:]]*0*$' /proc/self/status && grep -q '^CapPrm:[[:space:]]*0*$' /proc/self/status`},
		{name: "no nested user namespaces", script: `! unshare -U true 2>/dev/null`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			workDir := testDir(t, b, true)
			res, stdout, stderr := run(t, b, &Spec{
				Argv:    bash("set -u; " + tc.script),
				WorkDir: workDir,
				Mounts:  tc.mounts,
				Network: tc.network,
			})
			expectOK(t, res, stdout, stderr)
			if tc.after != nil {
				tc.after(t, workDir)
			}
		})
	}
}

func TestBwrapNetworkHost(t *testing.T) {
	b := newTestBwrap(t)
	hostNet, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	res, stdout, stderr := run(t, b, &Spec{
		Argv:    bash("readlink /proc/self/ns/net; cat /proc/net/dev"),
		WorkDir: testDir(t, b, true),
		Network: NetworkHost,
	})
	expectOK(t, res, stdout, stderr)
	first, rest, _ := strings.Cut(stdout, "\n")
	if first != hostNet {
		t.Errorf("NetworkHost: jail net namespace %s, host %s", first, hostNet)
	}
	if got, want := parseInterfaces(rest), hostInterfaces(t); !slices.Equal(got, want) {
		t.Errorf("NetworkHost: jail sees interfaces %q, host has %q", got, want)
	}
}

// TestBwrapRootOwnedFilesUnreadable is why bwrap must not be started as
// root: that maps the jail's uid to host root, and "nobody" inside could
// then read root's private files through any bind.
func TestBwrapRootOwnedFilesUnreadable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only meaningful when the host runs as root")
	}
	b := newTestBwrap(t)
	workDir := testDir(t, b, true)
	writeFile(t, filepath.Join(workDir, "rootonly"), "secret", 0o600)
	writeFile(t, filepath.Join(workDir, "rootgroup"), "secret", 0o640)
	res, stdout, stderr := run(t, b, &Spec{
		Argv:    bash(`! cat /job/rootonly 2>/dev/null && ! cat /job/rootgroup 2>/dev/null && ! grep -q . /proc/1/root/etc/shadow 2>/dev/null`),
		WorkDir: workDir,
	})
	expectOK(t, res, stdout, stderr)
}

func TestBwrapEnv(t *testing.T) {
	b := newTestBwrap(t)
	t.Setenv("HOST_SECRET", "host-secret-value")
	const secret = "declared-secret-value"

	cases := []struct {
		name    string
		env     []string
		want    []string // lines of `env` that must be there
		notWant []string // substrings that must not be anywhere in `env`
	}{
		{
			name:    "declared only, with defaults",
			env:     []string{"API_TOKEN=" + secret, "LANG=C.UTF-8", "LD_BIND_NOW=1"},
			want:    []string{"API_TOKEN=" + secret, "LANG=C.UTF-8", "LD_BIND_NOW=1", "HOME=/job", "PATH=" + JailPath},
			notWant: []string{"HOST_SECRET", "host-secret-value", "GOPATH", "USER="},
		},
		{
			name: "declared HOME and PATH win",
			env:  []string{"HOME=/job/home", "PATH=/usr/bin"},
			want: []string{"HOME=/job/home", "PATH=/usr/bin"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, stdout, stderr := run(t, b, &Spec{
				// The jail's init (pid 1) is bwrap, with the host command line.
				Argv:    bash(`env; echo ---; tr '\0' ' ' < /proc/1/cmdline`),
				WorkDir: testDir(t, b, true),
				Env:     tc.env,
			})
			expectOK(t, res, stdout, stderr)
			env, cmdline, _ := strings.Cut(stdout, "---\n")
			lines := strings.Split(env, "\n")
			for _, w := range tc.want {
				if !slices.Contains(lines, w) {
					t.Errorf("%q missing from the jail's environment:\n%s", w, env)
				}
			}
			for _, nw := range tc.notWant {
				if strings.Contains(env, nw) {
					t.Errorf("%q leaked into the jail's environment:\n%s", nw, env)
				}
			}
			if strings.Contains(cmdline, secret) {
				t.Errorf("a declared value is visible on bwrap's command line: %s", cmdline)
			}
		})
	}
}

func TestBwrapExitCodes(t *testing.T) {
	b := newTestBwrap(t)
	cases := []struct {
		name       string
		argv       []string
		code       int
		stderrHas  string
		stdinInput string
		stdoutWant string
	}{
		{name: "success", argv: bash("exit 0"), code: 0},
		{name: "failure", argv: bash("exit 3"), code: 3},
		// bwrap reports a signalled command like a shell does.
		{name: "killed inside", argv: bash("kill -9 $$"), code: 128 + 9},
		{name: "not found", argv: []string{"no-such-command-xyz"}, code: 1, stderrHas: "no-such-command-xyz"},
		{name: "argv[0] with a dash is not an option", argv: []string{"--version"}, code: 1, stderrHas: "--version"},
		{name: "stdin", argv: []string{"cat"}, stdinInput: "hello", stdoutWant: "hello"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := &Spec{Argv: tc.argv, WorkDir: testDir(t, b, true)}
			if tc.stdinInput != "" {
				spec.Stdin = strings.NewReader(tc.stdinInput)
			}
			res, stdout, stderr := run(t, b, spec)
			if res.ExitCode != tc.code || res.TimedOut || res.Canceled {
				t.Errorf("result %+v, want exit code %d; stderr: %s", *res, tc.code, stderr)
			}
			if tc.stderrHas != "" {
				mustContain(t, stderr, tc.stderrHas, "stderr")
			}
			if tc.stdoutWant != "" && stdout != tc.stdoutWant {
				t.Errorf("stdout %q, want %q", stdout, tc.stdoutWant)
			}
			if res.StartDelay <= 0 || res.Duration < res.StartDelay {
				t.Errorf("timings: %+v", *res)
			}
		})
	}
}

func TestBwrapBadSpec(t *testing.T) {
	b := newTestBwrap(t)
	dir := testDir(t, b, true)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name string
		ctx  context.Context
		spec *Spec
	}{
		{"nil spec", nil, nil},
		{"no argv", nil, &Spec{WorkDir: dir}},
		{"no workdir", nil, &Spec{Argv: []string{"true"}}},
		{"missing workdir", nil, &Spec{Argv: []string{"true"}, WorkDir: filepath.Join(dir, "missing")}},
		{"workdir is a file", nil, &Spec{Argv: []string{"true"}, WorkDir: "/etc/passwd"}},
		{"relative mount", nil, &Spec{Argv: []string{"true"}, WorkDir: dir, Mounts: []Mount{{Source: "rel", Target: "/x"}}}},
		{"mount over root", nil, &Spec{Argv: []string{"true"}, WorkDir: dir, Mounts: []Mount{{Source: dir, Target: "/"}}}},
		{"missing mount source", nil, &Spec{Argv: []string{"true"}, WorkDir: dir, Mounts: []Mount{{Source: dir + "/missing", Target: "/x"}}}},
		{"bad env", nil, &Spec{Argv: []string{"true"}, WorkDir: dir, Env: []string{"NOEQUALS"}}},
		{"unknown network", nil, &Spec{Argv: []string{"true"}, WorkDir: dir, Network: Network(99)}},
		{"canceled before start", canceled, &Spec{Argv: []string{"true"}, WorkDir: dir}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			if res, err := Run(ctx, b, tc.spec); err == nil {
				t.Errorf("Run succeeded with %+v", res)
			}
		})
	}
}

// TestBwrapKillsTree checks that nothing started in the jail survives Run,
// whether the job ends by itself, by its timeout or by cancellation, even
// processes that detached with setsid or nohup.
func TestBwrapKillsTree(t *testing.T) {
	b := newTestBwrap(t)
	cases := []struct {
		name     string
		tail     string // after the escapees were started and "started" printed
		timeout  time.Duration
		cancel   bool
		timedOut bool
		canceled bool
		exitCode int
	}{
		{name: "normal exit", tail: "exit 0", exitCode: 0},
		{name: "timeout", tail: "exec sleep 1000", timeout: 500 * time.Millisecond, timedOut: true, exitCode: -1},
		{name: "cancel", tail: "exec sleep 1000", cancel: true, canceled: true, exitCode: -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tok := sleepToken()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := &markerWriter{marker: "started", fn: func() {
				if tc.cancel {
					cancel()
				}
			}}
			spec := &Spec{
				Argv: bash(`setsid sleep ` + tok + ` >/dev/null 2>&1 &
nohup sleep ` + tok + ` >/dev/null 2>&1 &
(trap '' HUP TERM; sleep ` + tok + `) &
echo started
exec >/dev/null 2>&1 # let go of Run's pipe, so only Run's own wait holds it back
` + tc.tail),
				WorkDir: testDir(t, b, true),
				Stdout:  out,
				Timeout: tc.timeout,
			}
			res, err := Run(ctx, b, spec)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "started") {
				t.Fatalf("the script never started its background processes (machine too slow for the %v timeout?); result %+v", tc.timeout, *res)
			}
			if res.TimedOut != tc.timedOut || res.Canceled != tc.canceled || res.ExitCode != tc.exitCode {
				t.Errorf("result %+v, want TimedOut=%v Canceled=%v ExitCode=%d", *res, tc.timedOut, tc.canceled, tc.exitCode)
			}
			if tc.exitCode == -1 && res.Signal != "SIGKILL" {
				t.Errorf("Signal = %q, want SIGKILL", res.Signal)
			}
			// Run waits for the pid namespace to be torn down: no polling.
			if pids := liveProcs(t, "sleep", tok); len(pids) > 0 {
				t.Errorf("jailed processes survived Run: pids %v", pids)
				waitGone(t, "sleep", tok)
			}
		})
	}
}

// TestBwrapRuntimes checks that the interpreters jobs use start in the
// jail with only /usr and the curated /etc: shared libraries, TLS roots and
// time zone data must all be found; and that the hardening (seccomp, limits,
// read-only /dev) leaves them their threads, subprocesses and workers.
func TestBwrapRuntimes(t *testing.T) {
	b := newTestBwrap(t)
	cases := []struct {
		bin  string // the distribution's, not a shim under the host's home
		argv []string
		want string
	}{
		{"/usr/bin/python3", []string{"-c", `import ssl, json, ctypes, time; ssl.create_default_context(); print("ok", time.tzname[0])`}, "ok"},
		// Threads, subprocesses, a process pool (its semaphores live in
		// /dev/shm), asyncio, tempfiles: what agents' tools do.
		{"/usr/bin/python3", []string{"-c", `
import asyncio, multiprocessing as mp, subprocess, tempfile, threading
def sq(x): return x * x
ts = [threading.Thread(target=lambda: None) for _ in range(16)]
[t.start() for t in ts]; [t.join() for t in ts]
assert subprocess.run(["echo", "sub"], capture_output=True, text=True).stdout == "sub\n"
with mp.Pool(2) as p: assert p.map(sq, [1, 2, 3]) == [1, 4, 9]
assert asyncio.run(asyncio.sleep(0, result=7)) == 7
with tempfile.NamedTemporaryFile() as f: f.write(b"x")
print("python ok")`}, "python ok"},
		{"/usr/bin/bun", []string{"-e", `console.log("ok", 1 + 1)`}, "ok 2"},
		{"/usr/bin/bun", []string{"-e", `
const { spawnSync } = require("child_process");
const fs = require("fs");
fs.writeFileSync("/tmp/x", "hi");
if (fs.readFileSync("/tmp/x", "utf8") !== "hi") throw new Error("fs");
if (spawnSync("echo", ["sub"]).stdout.toString() !== "sub\n") throw new Error("spawn");
const w = new Worker(URL.createObjectURL(new Blob(["postMessage(42)"])));
w.onmessage = (e) => { console.log("bun ok", e.data); w.terminate(); };`}, "bun ok 42"},
		{"/usr/bin/node", []string{"-e", `
const { Worker } = require("worker_threads");
const { execFileSync } = require("child_process");
if (execFileSync("echo", ["sub"]).toString() !== "sub\n") throw new Error("spawn");
require("fs").promises.writeFile("/tmp/y", "z").then(() =>
  new Worker("require('worker_threads').parentPort.postMessage(7)", { eval: true })
    .on("message", (m) => { console.log("node ok", m); process.exit(0); }));`}, "node ok 7"},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%s#%d", filepath.Base(tc.bin), i), func(t *testing.T) {
			p, err := filepath.EvalSymlinks(tc.bin)
			if err != nil || !strings.HasPrefix(p, "/usr/") {
				t.Skipf("no %s (resolving into /usr) on this host: %q, %v", tc.bin, p, err)
			}
			tc.argv = append([]string{tc.bin}, tc.argv...)
			res, stdout, stderr := run(t, b, &Spec{Argv: tc.argv, WorkDir: testDir(t, b, true)})
			expectOK(t, res, stdout, stderr)
			mustContain(t, stdout, tc.want, tc.bin+" output")
		})
	}
}

// hostSums is what sha256sum prints for paths on the host.
func hostSums(t *testing.T, paths ...string) string {
	t.Helper()
	out, err := exec.Command("sha256sum", paths...).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(string(out), "\n")
}

// argsOf is the bwrap command line that jails spec, without the descriptors Run adds.
func argsOf(b *Bwrap, spec *Spec) []string {
	a, _ := b.args(spec)
	return a
}
