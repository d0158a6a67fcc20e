package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// guard bounds the limit tests' runs: a limit that fails to end a run
// shows up as TimedOut, not as a hung test.
const guard = 2 * time.Minute

// TestBwrapLimits breaches each limit for real and checks the run ends
// with the limit named, and that the host is fine afterwards: the next
// run works and the run's cgroup is gone.
func TestBwrapLimits(t *testing.T) {
	b := newTestBwrap(t)
	py := func(src string) []string { return []string{"/usr/bin/python3", "-c", src} }
	cases := []struct {
		name     string
		argv     []string
		limits   Limits
		timeout  time.Duration
		cgroups  bool   // needs cgroups
		limit    string // want Result.Limit
		code     int    // want ExitCode, when checkCode
		check    bool
		stderr   string
		fileSize int64 // want /job/big this size afterwards, when > 0
	}{
		{
			name: "memory", cgroups: true,
			// Bytes multiplication touches every page, unlike bytearray(n).
			argv:   py(`s = b"x" * (512 << 20); print(len(s))`),
			limits: Limits{Memory: 64 << 20}, limit: LimitMemory,
		},
		{
			// The shell waits, so the bomb alone would run until the timeout.
			name: "fork bomb", cgroups: true,
			argv:   bash(`:(){ :|:& };: ; sleep 1000`),
			limits: Limits{Pids: 64}, limit: LimitPids,
		},
		{
			name: "fork loop", cgroups: true,
			argv: py(`
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(1000)`),
			limits: Limits{Pids: 32}, limit: LimitPids,
		},
		{
			name:   "cpu",
			argv:   bash(`while :; do :; done`),
			limits: Limits{CPUTime: time.Second}, limit: LimitCPU,
			check: true, code: signalExit(unix.SIGXCPU),
		},
		{
			name:   "file size",
			argv:   bash(`dd if=/dev/zero of=/job/big bs=1M count=4 status=none`),
			limits: Limits{FileSize: 1 << 20}, limit: LimitFileSize,
			check: true, code: signalExit(unix.SIGXFSZ), fileSize: 1 << 20,
		},
		{
			// A full /tmp is the job's error to handle, not a limit that ends it.
			name:   "tmp full",
			argv:   bash(`dd if=/dev/zero of=/tmp/big bs=1M count=4 status=none`),
			limits: Limits{TmpSize: 1 << 20},
			check:  true, code: 1, stderr: "No space left on device",
		},
		{
			name:   "shm full",
			argv:   bash(`dd if=/dev/zero of=/dev/shm/big bs=1M count=4 status=none`),
			limits: Limits{TmpSize: 1 << 20},
			check:  true, code: 1, stderr: "No space left on device",
		},
		{
			name:   "open files",
			argv:   py(`fs = [open("/dev/null") for _ in range(100)]`),
			limits: Limits{OpenFiles: 64},
			check:  true, code: 1, stderr: "Too many open files",
		},
		{
			name:    "timeout",
			argv:    bash(`sleep 1000`),
			timeout: 200 * time.Millisecond, limit: LimitTimeout,
			check: true, code: -1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cgroups {
				requireCgroups(t, b)
			}
			timeout := tc.timeout
			if timeout == 0 {
				timeout = guard
			}
			workDir := testDir(t, b, true)
			res, stdout, stderr := run(t, b, &Spec{Argv: tc.argv, WorkDir: workDir, Limits: tc.limits, Timeout: timeout})
			if res.Limit != tc.limit || (res.TimedOut && tc.limit != LimitTimeout) {
				t.Errorf("result %+v, want Limit %q\nstdout:\n%.2000s\nstderr:\n%.2000s", *res, tc.limit, stdout, stderr)
			}
			if tc.check && res.ExitCode != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%.2000s", res.ExitCode, tc.code, stderr)
			}
			if tc.stderr != "" {
				mustContain(t, stderr, tc.stderr, "stderr")
			}
			if tc.limit != "" {
				msg := res.LimitMessage(tc.limits, timeout)
				if !strings.HasPrefix(msg, tc.limit+": ") {
					t.Errorf("LimitMessage = %q, want it to start with %q", msg, tc.limit+": ")
				}
				t.Log(msg)
			}
			if tc.fileSize > 0 {
				if fi, err := os.Stat(filepath.Join(workDir, "big")); err != nil || fi.Size() != tc.fileSize {
					t.Errorf("/job/big: %v, %v; want %d bytes", fi, err, tc.fileSize)
				}
			}
			if c := b.Cgroups(); c.Version() != CgroupNone {
				if left := runGroups(t, c); len(left) > 0 {
					t.Errorf("run cgroups left behind: %v", left)
				}
			}
			// The host is fine: the next run works.
			res, stdout, stderr = run(t, b, &Spec{Argv: bash("echo ok"), WorkDir: testDir(t, b, true), Timeout: guard})
			expectOK(t, res, stdout, stderr)
		})
	}
}

// TestBwrapLimitsUnenforceable: a limit the jail cannot enforce fails the
// run; it is never dropped silently.
func TestBwrapLimitsUnenforceable(t *testing.T) {
	newTestBwrap(t)
	noCgroups, err := NewBwrap(Config{NoCgroups: true})
	if err != nil {
		t.Fatal(err)
	}
	plain := newPlainBwrap(t)
	dir := testDir(t, noCgroups, true)
	cases := []struct {
		name string
		j    *Bwrap
		l    Limits
		ok   bool
	}{
		{"memory without cgroups", noCgroups, Limits{Memory: 64 << 20}, false},
		{"pids without cgroups", noCgroups, Limits{Pids: 10}, false},
		{"default pids without cgroups", noCgroups, Limits{}, true},
		{"rlimits without cgroups", noCgroups, Limits{CPUTime: time.Minute, FileSize: 1 << 30, OpenFiles: 100, TmpSize: 1 << 20}, true},
		{"any limit without hardening", plain, Limits{TmpSize: 1 << 20}, false},
		{"negative", noCgroups, Limits{Memory: -1}, false},
		{"memory in MiB by mistake", noCgroups, Limits{Memory: 64}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(context.Background(), tc.j, &Spec{Argv: []string{"true"}, WorkDir: dir, Limits: tc.l})
			if tc.ok {
				if err != nil || res.ExitCode != 0 {
					t.Errorf("Run = %+v, %v; want success", res, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Run succeeded (%+v); want an error", res)
			}
			t.Log(err)
		})
	}
	mustContain(t, noCgroups.Describe(), "no cgroups", "Describe without cgroups")
}

func TestAttributeLimit(t *testing.T) {
	l := Limits{CPUTime: time.Second, FileSize: 1 << 20}
	cases := []struct {
		name      string
		res       Result
		l         Limits
		oom, pids uint64
		want      string
	}{
		{"clean exit", Result{}, l, 0, 0, ""},
		{"timeout wins", Result{TimedOut: true, ExitCode: -1}, l, 1, 1, LimitTimeout},
		{"oom kill", Result{ExitCode: 137}, l, 1, 0, LimitMemory},
		{"oom kill, job carried on", Result{ExitCode: 0}, l, 1, 0, LimitMemory},
		{"refused fork", Result{ExitCode: -1, Signal: "SIGKILL"}, l, 0, 3, LimitPids},
		{"SIGXCPU", Result{ExitCode: 152}, l, 0, 0, LimitCPU},
		{"SIGXCPU without a CPU limit is someone else's", Result{ExitCode: 152}, Limits{}, 0, 0, ""},
		{"SIGXFSZ", Result{ExitCode: 153}, l, 0, 0, LimitFileSize},
		{"unrelated failure", Result{ExitCode: 1}, l, 0, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.res
			attributeLimit(&res, tc.l, tc.oom, tc.pids)
			if res.Limit != tc.want {
				t.Errorf("Limit = %q, want %q", res.Limit, tc.want)
			}
		})
	}
}

func TestLimitMessage(t *testing.T) {
	l := Limits{Memory: 64 << 20, Pids: 100, CPUTime: 1500 * time.Millisecond, FileSize: 10 << 20}
	for limit, want := range map[string]string{
		LimitMemory:   "memory: the run exceeded its memory limit of 64Mi and was killed",
		LimitPids:     "pids: the run reached its limit of 100 processes and threads (a fork was refused) and was killed",
		LimitCPU:      "cpu: a process of the run used its 2s of CPU time and was killed",
		LimitFileSize: "file size: a process of the run wrote past the file size limit of 10Mi and was killed",
		LimitTimeout:  "timeout: the run did not finish within 30s and was killed",
		"":            "",
	} {
		res := &Result{Limit: limit}
		if got := res.LimitMessage(l, 30*time.Second); got != want {
			t.Errorf("LimitMessage(%q) = %q, want %q", limit, got, want)
		}
	}
	if got := (&Result{Limit: LimitPids}).LimitMessage(Limits{}, 0); !strings.Contains(got, "512") {
		t.Errorf("the default pids limit is not in %q", got)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 100: "100", 1024: "1Ki", 1536: "1536", 64 << 20: "64Mi", 3 << 30: "3Gi", 1536 << 10: "1536Ki"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestLimitsRlimits(t *testing.T) {
	rl := Limits{CPUTime: 1500 * time.Millisecond, FileSize: 4096}.withDefaults().rlimits()
	got := map[int]unix.Rlimit{}
	for _, r := range rl {
		got[r.resource] = r.lim
	}
	want := map[int]unix.Rlimit{
		unix.RLIMIT_NOFILE: {Cur: DefaultOpenFiles, Max: DefaultOpenFiles},
		unix.RLIMIT_CORE:   {},
		unix.RLIMIT_CPU:    {Cur: 2, Max: 3}, // rounded up; SIGKILL a second after SIGXCPU
		unix.RLIMIT_FSIZE:  {Cur: 4096, Max: 4096},
	}
	if len(got) != len(want) {
		t.Errorf("rlimits %v, want %v", got, want)
	}
	for r, w := range want {
		if got[r] != w {
			t.Errorf("%s = %+v, want %+v", rlimitName(r), got[r], w)
		}
	}
}
