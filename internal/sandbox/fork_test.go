package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/testkit/testwait"
)

// probeScript is the function the fork tests serve: it runs the bash script or the Python
// code it is given, and returns what came of it.
const probeScript = `import subprocess

def main(sh=None, py=None):
    if sh is not None:
        p = subprocess.run(["bash", "-c", "set -u; " + sh], capture_output=True, text=True)
        return {"code": p.returncode, "out": p.stdout, "err": p.stderr}
    ns = {}
    exec(py, ns)
    return ns.get("result")
`

// forkHarness is a template of the probe function, as the runner lays one out.
type forkHarness struct {
	b        *Bwrap
	tmpl     *Template
	jobArgv  []string
	mounts   []Mount
	codeDir  string
	tmplOut  *markerWriter
	tmplErrs *bytes.Buffer
}

const forkIODir = "/io"

// groupsWanted is how many run groups runGroups lists for the template and its spares: a
// group each (two directories, memory and pids, as runGroups lists them on v1 and v2 alike).
func (h *forkHarness) groupsWanted() int {
	h.tmpl.mu.Lock()
	defer h.tmpl.mu.Unlock()
	return 2 * (1 + len(h.tmpl.spares) + h.tmpl.making)
}

func newForkHarness(t *testing.T, b *Bwrap, network Network, script string) *forkHarness {
	t.Helper()
	return newForkHarnessAt(t, b, network, script, netip.AddrPort{})
}

// newForkHarnessAt is newForkHarness with the template's TemplateSpec.ListenAt.
func newForkHarnessAt(t *testing.T, b *Bwrap, network Network, script string, listenAt netip.AddrPort) *forkHarness {
	t.Helper()
	shimDir := testDir(t, b, false)
	if err := runtimes.WriteShims(shimDir); err != nil {
		t.Fatal(err)
	}
	codeDir := testDir(t, b, false)
	writeFile(t, filepath.Join(codeDir, "probe.py"), script, 0o644)
	paths := runtimes.Paths{Script: "/fn/probe.py", ShimDir: "/shim", IODir: forkIODir}
	tcmd, err := runtimes.BuildTemplate(runtimes.Python, paths)
	if err != nil {
		t.Fatal(err)
	}
	jcmd, err := runtimes.Build(runtimes.Python, paths, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &forkHarness{b: b, jobArgv: jcmd.Argv, codeDir: codeDir, tmplOut: &markerWriter{marker: "host-ready", fn: func() {}}, tmplErrs: &bytes.Buffer{},
		mounts: []Mount{{Source: codeDir, Target: "/fn"}, {Source: shimDir, Target: "/shim"}}}
	ts := &TemplateSpec{
		Spec: Spec{Argv: tcmd.Argv, Env: append([]string{"LANG=C.UTF-8"}, tcmd.Env...), Mounts: h.mounts, Network: network,
			Stdout: h.tmplOut, Stderr: &lockedBuffer{b: h.tmplErrs}},
		JobArgv: jcmd.Argv, Slots: []string{forkIODir}, ListenAt: listenAt,
	}
	h.tmpl, err = b.StartTemplate(context.Background(), ts)
	if err != nil {
		t.Fatalf("StartTemplate: %v", err)
	}
	t.Cleanup(h.tmpl.Close)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(h.tmplOut.String(), "host-ready") {
		select {
		case <-h.tmpl.Gone():
			t.Fatalf("the template ended before it was ready: %+v\nstderr:\n%s", h.tmpl.Result(), h.tmplErrs.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the template did not say it is ready\nstderr:\n%s", h.tmplErrs.String())
		}
	}
	return h
}

type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// forkJob is one job laid out for the harness's template: its /job and io directories.
type forkJob struct {
	workDir, ioDir string
	spec           *Spec
	stdout, stderr bytes.Buffer
}

func (h *forkHarness) job(t *testing.T, args map[string]any, env ...string) *forkJob {
	t.Helper()
	j := &forkJob{workDir: testDir(t, h.b, true), ioDir: testDir(t, h.b, true)}
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(j.ioDir, runtimes.ArgsFile), string(raw), 0o644)
	j.spec = &Spec{Argv: h.jobArgv, WorkDir: j.workDir, Network: h.tmpl.spec.Network,
		Env:    append([]string{"LANG=C.UTF-8", "PYTHONUTF8=1", "PYTHONIOENCODING=utf-8"}, env...),
		Mounts: append(append([]Mount{}, h.mounts...), Mount{Source: j.ioDir, Target: forkIODir, Writable: true})}
	j.spec.Stdout, j.spec.Stderr = &j.stdout, &j.stderr
	return j
}

// run forks j and returns how it ended and its result.json (nil without one).
func (h *forkHarness) run(t *testing.T, j *forkJob) (*Result, json.RawMessage) {
	t.Helper()
	res, err := Run(context.Background(), h.tmpl, j.spec)
	if err != nil {
		t.Fatalf("fork: %v\ntemplate stderr:\n%s", err, h.tmplErrs.String())
	}
	data, err := os.ReadFile(filepath.Join(j.ioDir, runtimes.ResultFile))
	if err != nil {
		return res, nil
	}
	return res, data
}

// sh runs a bash script in a fork and fails the test unless it exits 0.
func (h *forkHarness) sh(t *testing.T, script string, env ...string) string {
	t.Helper()
	j := h.job(t, map[string]any{"sh": script}, env...)
	res, raw := h.run(t, j)
	var out struct {
		Code     int
		Out, Err string
	}
	if res.ExitCode != 0 || json.Unmarshal(raw, &out) != nil {
		t.Fatalf("the fork ended with %+v, result %s\nstdout:\n%s\nstderr:\n%s\ntemplate stderr:\n%s", res, raw, j.stdout.String(), j.stderr.String(), h.tmplErrs.String())
	}
	if out.Code != 0 {
		t.Errorf("script exited %d\n%s\nstdout:\n%s\nstderr:\n%s", out.Code, script, out.Out, out.Err)
	}
	return out.Out
}

func TestForkServesJobs(t *testing.T) {
	b := newTestBwrap(t)
	h := newForkHarness(t, b, NetworkNone, probeScript)
	for i := range 3 {
		j := h.job(t, map[string]any{"py": fmt.Sprintf("result = %d * 7", i)})
		res, raw := h.run(t, j)
		if res.ExitCode != 0 || string(raw) != strconv.Itoa(i*7) {
			t.Fatalf("job %d: %+v, result %s\nstderr:\n%s", i, res, raw, j.stderr.String())
		}
	}
	// A fork ends without the interpreter's teardown: what a job wrote to a file it left open
	// reaches its /job all the same.
	j0 := h.job(t, map[string]any{"py": "f = open('/job/left-open', 'w'); f.write('written'); result = 'ok'"})
	if res, raw := h.run(t, j0); res.ExitCode != 0 || string(raw) != `"ok"` {
		t.Fatalf("%+v, result %s", res, raw)
	}
	if data, err := os.ReadFile(filepath.Join(j0.workDir, "left-open")); err != nil || string(data) != "written" {
		t.Errorf("a file the job left open holds %q, %v; want what it wrote", data, err)
	}
	// Its working directory is its own /job, as in a bwrap jail: a relative path lands there
	// (the spare it was handed to waited in the template's empty /job beneath it).
	jw := h.job(t, map[string]any{"py": "import os; open('relative', 'w').write('here'); result = os.getcwd()"})
	if res, raw := h.run(t, jw); res.ExitCode != 0 || string(raw) != `"/job"` {
		t.Fatalf("%+v, result %s\nstderr:\n%s", res, raw, jw.stderr.String())
	}
	if data, err := os.ReadFile(filepath.Join(jw.workDir, "relative")); err != nil || string(data) != "here" {
		t.Errorf("a relative write holds %q in the job's /job, %v; want what it wrote", data, err)
	}
	// The spare's rehearsal (shim.py) leaves the job nothing: no file, no module, no setting.
	jr := h.job(t, map[string]any{"py": "import os, sys; result = [sorted(os.listdir('/tmp')), '__rehearsal__' in sys.modules, sys.dont_write_bytecode != bool(sys.flags.dont_write_bytecode)]"})
	if res, raw := h.run(t, jr); res.ExitCode != 0 || string(raw) != `[[],false,false]` {
		t.Fatalf("after the rehearsal: %+v, result %s\nstderr:\n%s", res, raw, jr.stderr.String())
	}
	// Each job's stdout is its own, and its environment is what its spec says.
	j := h.job(t, map[string]any{"py": "import os; print('from the job'); result = os.environ.get('JOB_ONLY')"}, "JOB_ONLY=x1")
	res, raw := h.run(t, j)
	if res.ExitCode != 0 || string(raw) != `"x1"` || !strings.Contains(j.stdout.String(), "from the job") {
		t.Fatalf("%+v, result %s, stdout %q", res, raw, j.stdout.String())
	}
}

// TestForkBadSpec: a job that asks for what its template was not built for is refused before
// anything of it reaches a process, with ErrForkUnfit.
func TestForkBadSpec(t *testing.T) {
	b := newTestBwrap(t)
	h := newForkHarness(t, b, NetworkNone, probeScript)
	cases := map[string]func(s *Spec){
		"other command":        func(s *Spec) { s.Argv = []string{"bash", "-c", "true"} },
		"other network":        func(s *Spec) { s.Network = NetworkHost },
		"missing read-only":    func(s *Spec) { s.Mounts = s.Mounts[1:] },
		"writable at no slot":  func(s *Spec) { s.Mounts[len(s.Mounts)-1].Target = "/elsewhere" },
		"extra read-only bind": func(s *Spec) { s.Mounts = append(s.Mounts, Mount{Source: "/usr", Target: "/more"}) },
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			j := h.job(t, map[string]any{"py": "result = 1"})
			change(j.spec)
			_, err := h.tmpl.Start(context.Background(), j.spec)
			if !errors.Is(err, ErrForkUnfit) {
				t.Fatalf("Start = %v, want ErrForkUnfit", err)
			}
		})
	}
	if _, err := b.StartTemplate(context.Background(), &TemplateSpec{Spec: Spec{Argv: []string{"true"}}}); err == nil {
		t.Error("a template without JobArgv started")
	}
	if _, err := b.StartTemplate(context.Background(), &TemplateSpec{Spec: Spec{Argv: []string{"true"},
		Mounts: []Mount{{Source: "/tmp", Target: "/w", Writable: true}}}, JobArgv: []string{"true"}}); err == nil {
		t.Error("a template with a writable mount started")
	}
}

// TestForkIsolation runs, in forks, the checks a bwrap job passes (TestBwrapIsolation,
// TestBwrapHardenedContract): a fork's view must be a fresh jail's.
func TestForkIsolation(t *testing.T) {
	b := newTestBwrap(t)
	uid, gid := b.Owner()
	h := newForkHarness(t, b, NetworkNone, probeScript)
	tmplPids := h.tmpl.Pids()
	if len(tmplPids) != 2 {
		t.Fatalf("template pids %v, want bwrap's init and the runtime", tmplPids)
	}
	tmplNS := map[string]string{}
	for _, ns := range []string{"user", "pid", "ipc", "uts", "net", "mnt", "cgroup"} {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", tmplPids[1], ns))
		if err != nil {
			t.Fatal(err)
		}
		tmplNS[ns] = link
	}
	hostTmp := filepath.Join(os.TempDir(), "fork-host-visible-"+sleepToken())
	writeFile(t, hostTmp, "host", 0o644)
	t.Cleanup(func() { os.Remove(hostTmp) })
	cases := []struct{ name, script string }{
		{"no capabilities at all", `grep -q '^CapEff:[[:space:]]*0*$' /proc/self/status && grep -q '^CapPrm:[[:space:]]*0*$' /proc/self/status && grep -q '^CapBnd:[[:space:]]*0*$' /proc/self/status && grep -q '^CapAmb:[[:space:]]*0*$' /proc/self/status && grep -q '^CapInh:[[:space:]]*0*$' /proc/self/status`},
		{"pid 1 has no capabilities either", `grep -q '^CapEff:[[:space:]]*0*$' /proc/1/status && grep -q '^CapBnd:[[:space:]]*0*$' /proc/1/status`},
		{"no new privileges", `grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/self/status`},
		// 2 is filter mode; two filters are stacked (the template's and the job's).
		{"seccomp filter on", `grep -q '^Seccomp:[[:space:]]*2$' /proc/self/status && grep -q '^Seccomp_filters:[[:space:]]*2$' /proc/self/status`},
		{"proc shows only the job", `pids=(/proc/[0-9]*); [ "${pids[*]}" = "/proc/1 /proc/$$" ] && [ "$(cat /proc/1/comm)" = python3 ] && [ "$(awk '/^PPid/ {print $2}' /proc/1/status)" = 0 ]`},
		{"read-only dev, device nodes usable", `! touch /dev/x 2>/dev/null && echo x > /dev/null && head -c 1 /dev/urandom >/dev/null`},
		{"sized tmp and shm, empty", `[ "$(df --output=size -B1 /tmp | tail -1 | tr -d ' ')" = ` + strconv.Itoa(DefaultTmpSize) + ` ] && [ "$(df --output=size -B1 /dev/shm | tail -1 | tr -d ' ')" = ` + strconv.Itoa(DefaultTmpSize) + ` ] && [ -z "$(ls -A /tmp)" ] && [ -z "$(ls -A /dev/shm)" ]`},
		{"rlimits", `[ "$(ulimit -n)" = ` + strconv.Itoa(DefaultOpenFiles) + ` ] && [ "$(ulimit -Hn)" = ` + strconv.Itoa(DefaultOpenFiles) + ` ] && [ "$(ulimit -c)" = 0 ] && [ "$(ulimit -t)" = unlimited ] && [ "$(ulimit -f)" = unlimited ]`},
		{"no nested user namespace", `unshare -U true 2>&1 | grep -q 'Operation not permitted' && unshare -r true 2>&1 | grep -q 'Operation not permitted'`},
		{"no new namespaces of any kind", `for f in -m -p -n -i -u -C; do ! unshare $f true 2>/dev/null || exit 1; done`},
		{"no mount", `! mount -t tmpfs none /tmp 2>/dev/null && ! umount /job 2>/dev/null && ! umount /tmp 2>/dev/null`},
		{"cgroup paths hidden", `! grep -v ':/$' /proc/self/cgroup`},
		{"non-root uid", `[ "$(id -u)" = ` + strconv.Itoa(uid) + ` ] && [ "$(id -g)" = ` + strconv.Itoa(gid) + ` ] && [ "$(id -G)" = ` + strconv.Itoa(gid) + ` ]`},
		{"no secrets in etc", `[ ! -e /etc/shadow ] && [ ! -e /etc/gshadow ] && [ ! -e /etc/ssl/private ] && [ -r /etc/passwd ]`},
		{"system read-only", `! touch /usr/x 2>/dev/null && ! touch /x 2>/dev/null && ! mkdir /etc/x 2>/dev/null && ! touch /etc/passwd 2>/dev/null && ! touch /fn/x 2>/dev/null && ! touch /shim/x 2>/dev/null`},
		{"no host home or root", `[ ! -e /root ] && [ ! -e /home ] && [ ! -e /var ] && [ ! -e /opt ] && [ ! -e /sys ]`},
		{"private tmp", `[ ! -e ` + hostTmp + ` ] && echo x > /tmp/p && touch /dev/shm/x`},
		{"job is cwd and HOME, writable", `[ "$PWD" = /job ] && [ "$HOME" = /job ] && echo ok > /job/written && mkdir /job/sub`},
		{"job and io mounts nosuid nodev", `grep -E ' /job | /io ' /proc/self/mountinfo | grep -q nosuid && ! grep -E ' /job | /io ' /proc/self/mountinfo | grep -v nodev | grep -v '^$' | grep -q .`},
		{"no other job directory in view", `[ "$(grep -c -E ' /job | /io ' /proc/self/mountinfo)" = 2 ]`},
		{"network none, loopback up", `[ "$(awk -F: 'NR>2 {gsub(/ /, "", $1); print $1}' /proc/net/dev)" = lo ] && python3 -c '
import socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
s = socket.socket(); s.settimeout(5)
try:
    s.connect(("1.1.1.1", 53))
except OSError:
    sys.exit(0)
sys.exit(1)'`},
		{"ptys of its own", `[ "$(readlink /dev/ptmx)" = pts/ptmx ] && [ "$(ls /dev/pts)" = ptmx ] && python3 -c 'import os; os.openpty()'`},
		{"fixed hostname", `[ "$(cat /proc/sys/kernel/hostname)" = ` + Hostname + ` ]`},
	}
	for _, ns := range []string{"pid", "ipc", "uts", "net", "mnt", "cgroup"} {
		cases = append(cases, struct{ name, script string }{"own " + ns + " namespace, not the template's",
			`[ "$(readlink /proc/1/ns/` + ns + `)" != "` + tmplNS[ns] + `" ]`})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h.sh(t, tc.script)
		})
	}
	t.Run("only stdio descriptors", func(t *testing.T) {
		// The one past stderr is listdir's own.
		j := h.job(t, map[string]any{"py": "import os; result = sorted(os.listdir('/proc/self/fd'), key=int)"})
		if res, raw := h.run(t, j); res.ExitCode != 0 || string(raw) != `["0","1","2","3"]` {
			t.Errorf("the job's descriptors: %s (%+v)", raw, res)
		}
	})
}

// holdScript is a job that leaves what a fork could leak (memory, a file in /tmp and
// /dev/shm, SysV objects, an abstract socket, its environment, a change to its runtime) and
// waits to be killed once it wrote /job/ready.
const holdScript = `
import json, os, socket, subprocess, sys, time
token = os.environ["LEAK_TOKEN"]
big = bytearray(token.encode() * 100000)
json.LEAKED = token
os.environ["LEAKED"] = token
for d in ("/tmp", "/dev/shm"):
    with open(d + "/leak", "w") as f:
        f.write(token)
subprocess.run(["ipcmk", "-M", "4096"], check=True, capture_output=True)
subprocess.run(["ipcmk", "-Q"], check=True, capture_output=True)
pty = os.openpty()
s = socket.socket(socket.AF_UNIX)
s.bind("\0fork-leak")
s.listen()
with open("/job/ready", "w") as f:
    f.write("1")
time.sleep(120)
`

// startHeld forks a job that runs holdScript (or code) and waits until it wrote /job/ready.
func (h *forkHarness) startHeld(t *testing.T, code string, env ...string) (*forkJob, *forkRun) {
	t.Helper()
	j := h.job(t, map[string]any{"py": code}, env...)
	hd, err := h.tmpl.Start(context.Background(), j.spec)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	f := hd.(*forkRun)
	t.Cleanup(f.Destroy)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(j.workDir, "ready")); err == nil {
			return j, f
		}
		select {
		case <-f.done:
			t.Fatalf("the held job ended: %+v\nstderr:\n%s", f.res, j.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the held job did not get ready\nstderr:\n%s", j.stderr.String())
		}
	}
}

// memHolds reports whether the writable memory of process pid holds needle, read as root
// through /proc/<pid>/mem.
func memHolds(t *testing.T, pid int, needle string) bool {
	t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatalf("maps of %d: %v", pid, err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatalf("mem of %d: %v", pid, err)
	}
	defer mem.Close()
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(f[1], "rw") {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, _ := strconv.ParseUint(lo, 16, 64)
		end, _ := strconv.ParseUint(hi, 16, 64)
		buf := make([]byte, end-start)
		n, _ := mem.ReadAt(buf, int64(start))
		if bytes.Contains(buf[:n], []byte(needle)) {
			return true
		}
	}
	return false
}

// TestForkLeaks: what one fork leaves is not visible to a sibling running beside it, nor to the
// next job, nor does it reach the template; a job's secrets never do.
func TestForkLeaks(t *testing.T) {
	b := newTestBwrap(t)
	h := newForkHarness(t, b, NetworkNone, probeScript)
	token, secret := "leak-"+sleepToken()+"-token", "secret-"+sleepToken()+"-value"
	_, a := h.startHeld(t, holdScript, "LEAK_TOKEN="+token, "SECRET_TOKEN="+secret)
	if !memHolds(t, a.pid, token) || !memHolds(t, a.pid, secret) {
		t.Fatal("the memory scan does not find the held job's own token and secret: it would prove nothing")
	}
	apid := strconv.Itoa(a.pid)
	tmpl := h.tmpl.Pids()
	checks := `[ ! -e /tmp/leak ] && [ ! -e /dev/shm/leak ] && [ "$(ls /dev/pts)" = ptmx ] &&
[ "$(ipcs -m | grep -c '^0x')" = 0 ] && [ "$(ipcs -q | grep -c '^0x')" = 0 ] &&
! python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect("\0fork-leak")' 2>/dev/null &&
[ -z "${SECRET_TOKEN:-}" ] && [ -z "${LEAKED:-}" ] && [ -z "${LEAK_TOKEN:-}" ] &&
for p in ` + apid + ` ` + strconv.Itoa(tmpl[0]) + ` ` + strconv.Itoa(tmpl[1]) + `; do ! kill -0 $p 2>/dev/null && [ ! -e /proc/$p ] || exit 1; done`
	pyChecks := `import json, os; result = [hasattr(json, "LEAKED"), "LEAKED" in os.environ]`

	t.Run("sibling", func(t *testing.T) {
		h.sh(t, checks)
		j := h.job(t, map[string]any{"py": pyChecks})
		if res, raw := h.run(t, j); res.ExitCode != 0 || string(raw) != "[false,false]" {
			t.Errorf("a sibling sees the held job's runtime changes: %s (%+v)", raw, res)
		}
		// A sibling that signals everything it can see, and the pids it should not see.
		h.sh(t, `kill -9 -1 2>/dev/null; kill -9 `+apid+` 2>/dev/null; true`)
		select {
		case <-a.done:
			t.Fatalf("the held job ended when its sibling signalled: %+v", a.res)
		default:
		}
	})
	t.Run("sibling memory", func(t *testing.T) {
		_, s := h.startHeld(t, `open("/job/ready", "w").write("1"); import time; time.sleep(120)`)
		if memHolds(t, s.pid, token) || memHolds(t, s.pid, secret) {
			t.Error("a sibling's memory holds what the held job wrote")
		}
	})
	t.Run("template", func(t *testing.T) {
		for _, pid := range tmpl {
			// Memory shared writable with its forks would be a channel between them.
			maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(maps), "\n") {
				if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], "rw") && strings.HasSuffix(f[1], "s") {
					t.Errorf("the template's process %d maps memory shared and writable: %s", pid, line)
				}
			}
			if memHolds(t, pid, token) || memHolds(t, pid, secret) {
				t.Errorf("the template's process %d holds what a job wrote or was given", pid)
			}
			env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if bytes.Contains(env, []byte(secret)) {
				t.Errorf("the template's process %d has the job's secret in its environment", pid)
			}
		}
	})
	a.Destroy()
	t.Run("next job", func(t *testing.T) {
		h.sh(t, checks)
		j := h.job(t, map[string]any{"py": pyChecks})
		if res, raw := h.run(t, j); res.ExitCode != 0 || string(raw) != "[false,false]" {
			t.Errorf("the next job sees the held job's runtime changes: %s (%+v)", raw, res)
		}
	})
}

// TestForkHostileJobs: a job that wrecks its copy of the runtime, kills what it can of its
// parent chain, or leaves a timer set, leaves the template serving and the next job unharmed.
func TestForkHostileJobs(t *testing.T) {
	b := newTestBwrap(t)
	h := newForkHarness(t, b, NetworkNone, probeScript)
	hostile := map[string]string{
		"corrupts its runtime": `import ctypes, json, os, sys
json.dumps = None
os.environ.clear()
ctypes.memset(id(sys.modules), 0, 64)
ctypes.memset(id(json), 0, 64)`,
		"kills its parent chain": `import os, signal
for p in (0, 1, os.getppid(), -1):
    try:
        os.kill(p, signal.SIGKILL)
    except OSError:
        pass
os.killpg(0, signal.SIGKILL)`,
		"writes over its own memory": `import ctypes
libc = ctypes.CDLL(None)
base = ctypes.cast(ctypes.pythonapi.Py_Initialize, ctypes.c_void_p).value & ~0xfff
libc.mprotect(ctypes.c_void_p(base), 4096, 7)
ctypes.memset(base, 0xcc, 4096)`,
		"sets a timer and leaves": `import signal; signal.setitimer(signal.ITIMER_REAL, 0.2); result = "left"`,
	}
	for name, code := range hostile {
		t.Run(name, func(t *testing.T) {
			j := h.job(t, map[string]any{"py": code})
			res, _ := h.run(t, j)
			t.Logf("the hostile job ended with exit code %d", res.ExitCode)
			select {
			case <-h.tmpl.Gone():
				t.Fatalf("the template ended: %+v", h.tmpl.Result())
			default:
			}
			next := h.job(t, map[string]any{"py": "import json, time; time.sleep(0.4); result = json.dumps({'ok': 1})"})
			if res, raw := h.run(t, next); res.ExitCode != 0 || string(raw) != `"{\"ok\": 1}"` {
				t.Errorf("the next job: %s (%+v)\nstderr:\n%s", raw, res, next.stderr.String())
			}
		})
	}
}

// TestForkSeccomp: a fork's job has the jobs' filter, whatever the template's lets through
// for building namespaces (mount, unshare, move_mount).
func TestForkSeccomp(t *testing.T) {
	b := newTestBwrap(t)
	h := newForkHarness(t, b, NetworkNone, probeScript)
	info := b.seccomp.arch
	calls := []struct{ name, args, want string }{
		{"mount", "0 0 1 0 0", "EPERM"},
		{"unshare", "0x200", "EPERM"},
		{"move_mount", "-1 0 -1 0 0", "EPERM"},
		{"umount2", "1 0", "EPERM"},
		{"setns", "-1 0", "EPERM"},
		{"ptrace", "0 0 0 0", "EPERM"},
		{"open_tree", "-1 0 0", "EPERM"},
		{"bpf", "0xffff 0 0", "EPERM"},
		{"clone", fmt.Sprintf("%#x 0 0 0 0", 0x20000000|17), "EPERM"}, // CLONE_NEWPID|SIGCHLD
		{"clone3", "0 0", "ENOSYS"},
	}
	var lines []string
	for _, c := range calls {
		lines = append(lines, fmt.Sprintf("%s %d %s", c.name, info.SyscallNames[c.name], c.args))
	}
	j := h.job(t, map[string]any{"py": "import subprocess, sys; p = subprocess.run([sys.executable, '-c', " + strconv.Quote(seccompProbe) + ", " + strconv.Quote(strings.Join(lines, ";")) + "], capture_output=True, text=True); result = p.stdout + p.stderr"})
	res, raw := h.run(t, j)
	var out string
	if res.ExitCode != 0 || json.Unmarshal(raw, &out) != nil {
		t.Fatalf("%+v %s", res, raw)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			got[k] = v
		}
	}
	for _, c := range calls {
		if got[c.name] != c.want {
			t.Errorf("%s in a fork: %q, want %s\n%s", c.name, got[c.name], c.want, out)
		}
	}
}

// BenchmarkFork hands a job that returns at once to a template's spare, and reports where its
// time goes (medians, from the run's marks): waiting for a sealed spare, handing the job over
// (stdio, its directories cloned, its environment), the job up to its pid 1's exit.
func BenchmarkFork(b *testing.B) {
	bw := newTestBwrap(b)
	t := &testing.T{}
	h := newForkHarness(t, bw, NetworkNone, probeScript)
	defer h.tmpl.Close()
	var spare, hand, job, total []time.Duration
	b.ResetTimer()
	for range b.N {
		j := h.job(t, map[string]any{"py": "result = 1"})
		t0 := time.Now()
		res, err := Run(context.Background(), h.tmpl, j.spec)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%v %+v %s", err, res, j.stderr.String())
		}
		total = append(total, time.Since(t0))
		m := res.Marks
		spare = append(spare, m.Cgroup.Sub(m.Entered))
		hand = append(hand, m.Released.Sub(m.Cgroup))
		job = append(job, m.Exited.Sub(m.Released))
	}
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds())
	}
	b.ReportMetric(med(spare), "µs-spare")
	b.ReportMetric(med(hand), "µs-hand")
	b.ReportMetric(med(job), "µs-job")
	b.ReportMetric(med(total), "µs-total")
}

// TestForkListen: a fork's Spec.Listen socket is made in the fork's own network namespace, as
// a bwrap jail's is: the job reaches the host through it, and a sibling does not.
func TestForkListen(t *testing.T) {
	b := newTestBwrap(t)
	if !b.ListensIn() {
		t.Skip("SKIPPED LOUDLY: this host cannot enter a jail's network namespace; Spec.Listen is not tested")
	}
	addr := netip.MustParseAddrPort("127.0.0.1:3128")
	// Made on the job's path, or with its spare (TemplateSpec.ListenAt): the same to the job.
	for name, at := range map[string]netip.AddrPort{"per job": {}, "with the spare": addr} {
		t.Run(name, func(t *testing.T) {
			h := newForkHarnessAt(t, b, NetworkNone, probeScript, at)
			got := make(chan string, 1)
			j := h.job(t, map[string]any{"py": `import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
s.sendall(b"from the fork")
s.close()
result = "sent"`})
			j.spec.Listen = &Listen{Addr: addr, Ready: func(l net.Listener) {
				go func() {
					defer l.Close()
					c, err := l.Accept()
					if err != nil {
						got <- err.Error()
						return
					}
					defer c.Close()
					data, _ := io.ReadAll(c)
					got <- string(data)
				}()
			}}
			res, raw := h.run(t, j)
			if res.ExitCode != 0 || string(raw) != `"sent"` {
				t.Fatalf("%+v %s\n%s", res, raw, j.stderr.String())
			}
			if s := <-got; s != "from the fork" {
				t.Fatalf("the host's listener got %q", s)
			}
			// A fork without a Listen has nothing at that address: the socket was the other
			// fork's, and its spare's own was closed.
			h.sh(t, `! python3 -c 'import socket; socket.create_connection(("127.0.0.1", 3128), timeout=2)' 2>/dev/null`)
		})
	}
}

// TestForkLimits: a fork's own cgroup and rlimits bound its job, and the template serves on.
func TestForkLimits(t *testing.T) {
	b := newTestBwrap(t)
	requireCgroups(t, b)
	h := newForkHarness(t, b, NetworkNone, probeScript)
	cases := []struct {
		name, code string
		limits     Limits
		timeout    time.Duration
		want       string
	}{
		{"memory", "b = bytearray(200 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1", Limits{Memory: 64 << 20}, 0, LimitMemory},
		{"pids", "import os, time\nfor _ in range(64):\n    if os.fork() == 0:\n        time.sleep(5); os._exit(0)", Limits{Pids: 16}, 0, LimitPids},
		// Python ignores SIGXFSZ, so the write fails (EFBIG, exit code 1) rather than the run:
		// as in a bwrap jail.
		{"file size", "open('/job/big', 'wb').write(b'x' * (2 << 20))", Limits{FileSize: 1 << 20}, 0, ""},
		{"timeout", "import time; time.sleep(30)", Limits{}, 500 * time.Millisecond, LimitTimeout},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := h.job(t, map[string]any{"py": c.code})
			j.spec.Limits, j.spec.Timeout = c.limits, c.timeout
			res, _ := h.run(t, j)
			if res.Limit != c.want {
				t.Errorf("limit %q, want %q (%+v)\nstderr:\n%s", res.Limit, c.want, res, j.stderr.String())
			}
			if c.want == "" && (res.ExitCode != 1 || !strings.Contains(j.stderr.String(), "File too large")) {
				t.Errorf("exit code %d, stderr %s; want the write refused", res.ExitCode, j.stderr.String())
			}
			// The job's group is gone: what is left is the template's and its spares', which
			// it makes again (one, or two once a job waited) as its jobs take them.
			var left []string
			if testwait.Poll(10*time.Second, testwait.Cond(func() bool {
				left = runGroups(t, b.Cgroups())
				return len(left) == h.groupsWanted()
			})) != nil {
				t.Errorf("run groups: %v, want the template's and its spares' (%d)", left, h.groupsWanted())
			}
			h.sh(t, "true") // the template still serves
		})
	}
}

// TestForkBadModules: the template never imports the function, so a module whose top-level
// code never returns, exits or runs out of memory fails its own jobs, as a cold start would,
// and leaves the template serving.
func TestForkBadModules(t *testing.T) {
	b := newTestBwrap(t)
	requireCgroups(t, b)
	cases := []struct {
		name, top string
		limits    Limits
		check     func(res *Result) bool
	}{
		{"never returns", "while True:\n    pass\n", Limits{}, func(res *Result) bool { return res.Limit == LimitTimeout }},
		{"exits", "import sys\nsys.exit(7)\n", Limits{}, func(res *Result) bool { return res.ExitCode != 0 }},
		{"exceeds memory", "b = bytearray(300 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n", Limits{Memory: 64 << 20}, func(res *Result) bool { return res.Limit == LimitMemory }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newForkHarness(t, b, NetworkNone, c.top+probeScript)
			for range 2 {
				j := h.job(t, map[string]any{"py": "result = 1"})
				j.spec.Limits, j.spec.Timeout = c.limits, time.Second
				res, _ := h.run(t, j)
				if !c.check(res) {
					t.Errorf("the job ended with %+v", res)
				}
				select {
				case <-h.tmpl.Gone():
					t.Fatalf("the template ended: %+v\n%s", h.tmpl.Result(), h.tmplErrs.String())
				default:
				}
			}
		})
	}
}

// readySpare waits for the template's oldest spare to be sealed and returns it.
func (h *forkHarness) readySpare(t *testing.T) *spare {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		h.tmpl.mu.Lock()
		var sp *spare
		if len(h.tmpl.spares) > 0 {
			sp = h.tmpl.spares[0]
		}
		h.tmpl.mu.Unlock()
		if sp != nil {
			select {
			case <-sp.ready:
				if sp.err != nil {
					t.Fatalf("the spare did not seal itself: %v\ntemplate stderr:\n%s", sp.err, h.tmplErrs.String())
				}
				return sp
			case <-time.After(10 * time.Millisecond):
			}
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Fatalf("no spare sealed itself\ntemplate stderr:\n%s", h.tmplErrs.String())
	return nil
}

// TestForkSpares: a spare is sealed before any job exists (no capabilities, no new privileges,
// the jobs' filter, a cgroup of its own, no descriptor but its sockets and the template's
// output, which the job's replace), and a spare that died waiting takes no job: the job is
// refused with ErrTemplateGone, nothing of it having reached a process, and the next is served.
func TestForkSpares(t *testing.T) {
	b := newTestBwrap(t)
	h := newForkHarness(t, b, NetworkNone, probeScript)
	sp := h.readySpare(t)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", sp.pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
		"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "Seccomp_filters:\t2"} {
		if !strings.Contains(string(status), want+"\n") {
			t.Errorf("the spare's status lacks %q:\n%s", want, status)
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", sp.pid))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, fd := range fds {
		names = append(names, fd.Name())
	}
	if len(names) != 4 || slices.Contains(names, "0") {
		t.Errorf("the spare holds descriptors %v; want its two sockets and the template's stdout and stderr", names)
	}
	if b.Cgroups().Version() != CgroupNone {
		own, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", sp.pid))
		tmpl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", h.tmpl.Pids()[1]))
		if bytes.Equal(own, tmpl) {
			t.Errorf("the spare is in its template's cgroups:\n%s", own)
		}
	}

	if err := unix.PidfdSendSignal(sp.pidfd, unix.SIGKILL, nil, 0); err != nil {
		t.Fatal(err)
	}
	for {
		if n, _ := unix.Poll([]unix.PollFd{{Fd: int32(sp.pidfd), Events: unix.POLLIN}}, 1000); n > 0 {
			break
		}
	}
	j := h.job(t, map[string]any{"py": "result = 1"})
	if _, err := h.tmpl.Start(context.Background(), j.spec); !errors.Is(err, ErrTemplateGone) {
		t.Fatalf("a job handed to a dead spare: %v, want ErrTemplateGone", err)
	}
	if res, raw := h.run(t, h.job(t, map[string]any{"py": "result = 2"})); res.ExitCode != 0 || string(raw) != "2" {
		t.Fatalf("the next job: %+v, result %s", res, raw)
	}
}
