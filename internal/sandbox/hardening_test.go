package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/sys/unix"
)

func TestBwrapDescribe(t *testing.T) {
	b := newTestBwrap(t)
	d := b.Describe()
	t.Log(d)
	mustContain(t, d, "hardened", "Describe")
	mustContain(t, d, "seccomp on", "Describe")
	mustContain(t, d, b.Cgroups().Describe(), "Describe")
	if plain := newPlainBwrap(t); !strings.Contains(plain.Describe(), "NOT hardened") {
		t.Errorf("plain Describe = %q", plain.Describe())
	}
}

// TestBwrapNoHostFDs: a descriptor the host holds without close-on-exec
// (inherited from whoever started it) must not reach the job, nor may the
// fds Run hands bwrap (info, block, seccomp).
func TestBwrapNoHostFDs(t *testing.T) {
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := unix.FcntlInt(f.Fd(), unix.F_SETFD, 0); err != nil { // clear FD_CLOEXEC
		t.Fatal(err)
	}
	for name, b := range map[string]*Bwrap{"hardened": newTestBwrap(t), "plain": newPlainBwrap(t)} {
		t.Run(name, func(t *testing.T) {
			// ls runs as a child (the exit keeps bash from exec'ing it), so
			// it lists the shell's fds, not its own.
			res, stdout, stderr := run(t, b, &Spec{Argv: bash(`ls /proc/$$/fd; exit 0`), WorkDir: testDir(t, b, true)})
			expectOK(t, res, stdout, stderr)
			if got := strings.Fields(stdout); !slices.Equal(got, []string{"0", "1", "2"}) {
				t.Errorf("the job has fds %q, want only 0 1 2 (the host's fd %d is not CLOEXEC)", got, f.Fd())
			}
		})
	}
}

// TestBwrapHardenedContract checks, from inside a hardened jail, what the
// hardening adds. Each script exits 0 when the property holds.
func TestBwrapHardenedContract(t *testing.T) {
	b := newTestBwrap(t)
	cases := []struct{ name, script string }{
		{"no capabilities at all", `grep -q '^CapEff:[[:space:]]*0*$' /proc/self/status && grep -q '^CapPrm:[[:space:]]*0*$' /proc/self/status && grep -q '^CapBnd:[[:space:]]*0*$' /proc/self/status && grep -q '^CapAmb:[[:space:]]*0*$' /proc/self/status`},
		{"no new privileges", `grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/self/status`},
		{"seccomp filter on", `grep -q '^Seccomp:[[:space:]]*2$' /proc/self/status`},
		// Globbing in the shell itself: no child to show up in the listing.
		{"proc shows only the job", `pids=(/proc/[0-9]*); [ "${pids[*]}" = "/proc/1 /proc/$$" ] && [ "$(cat /proc/1/comm)" = bwrap ]`},
		{"read-only dev, device nodes usable", `! touch /dev/x 2>/dev/null && echo x > /dev/null && head -c 1 /dev/urandom >/dev/null`},
		{"sized tmp and shm", `[ "$(df --output=size -B1 /tmp | tail -1 | tr -d ' ')" = ` + strconv.Itoa(DefaultTmpSize) + ` ] && [ "$(df --output=size -B1 /dev/shm | tail -1 | tr -d ' ')" = ` + strconv.Itoa(DefaultTmpSize) + ` ]`},
		{"rlimits", `[ "$(ulimit -n)" = ` + strconv.Itoa(DefaultOpenFiles) + ` ] && [ "$(ulimit -Hn)" = ` + strconv.Itoa(DefaultOpenFiles) + ` ] && [ "$(ulimit -c)" = 0 ] && [ "$(ulimit -t)" = unlimited ] && [ "$(ulimit -f)" = unlimited ]`},
		{"no nested user namespace", `unshare -U true 2>&1 | grep -q 'Operation not permitted' && unshare -r true 2>&1 | grep -q 'Operation not permitted'`},
		{"no mount", `! mount -t tmpfs none /tmp 2>/dev/null`},
	}
	if b.Cgroups().Version() != CgroupNone {
		// The cgroup namespace is made once bwrap is in the run's group:
		// its root is that group, and the host's paths do not show.
		cases = append(cases, struct{ name, script string }{"cgroup paths hidden", `! grep -v ':/$' /proc/self/cgroup`})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, stdout, stderr := run(t, b, &Spec{Argv: bash("set -u; " + tc.script), WorkDir: testDir(t, b, true)})
			expectOK(t, res, stdout, stderr)
		})
	}
}

// TestBwrapInRunCgroup checks from the host, while the job runs, that every
// process of the jail is in the run's group.
func TestBwrapInRunCgroup(t *testing.T) {
	b := newTestBwrap(t)
	requireCgroups(t, b)
	checkInRunGroup(t, b)
}

// checkInRunGroup runs a job that waits on its stdin and, meanwhile, finds
// the job's processes in the run's group(s) only.
func checkInRunGroup(t *testing.T, b *Bwrap) {
	t.Helper()
	tok := sleepToken()
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinR.Close()
	out := &markerWriter{marker: "started", fn: func() {
		defer stdinW.Close()
		groups := runGroups(t, b.Cgroups())
		if len(groups) == 0 {
			t.Error("no run group while the job runs")
		}
		for _, g := range groups {
			pids := readPids(filepath.Join(g, "cgroup.procs"))
			// bwrap, the jail's init, the shell and its sleep at least.
			var sleeps int
			for _, p := range pids {
				if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); string(cmdline) == "sleep\x00"+tok+"\x00" {
					sleeps++
				}
			}
			if len(pids) < 4 || sleeps != 1 {
				t.Errorf("group %s has pids %v (%d the job's sleep), want bwrap, init, shell and sleep", g, pids, sleeps)
			}
		}
	}}
	res, err := Run(t.Context(), b, &Spec{
		// Announce only once the sleep has exec'd; then wait for stdin to close.
		Argv: bash(`setsid sleep ` + tok + ` &
until [ "$(tr '\0' ' ' < /proc/$!/cmdline 2>/dev/null)" = "sleep ` + tok + ` " ]; do :; done
echo started; read x; exit 0`),
		WorkDir: testDir(t, b, true),
		Stdin:   stdinR,
		Stdout:  out,
		Timeout: guard,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || !strings.Contains(out.String(), "started") {
		t.Errorf("result %+v, output %q", *res, out.String())
	}
	if left := runGroups(t, b.Cgroups()); len(left) > 0 {
		t.Errorf("run groups left: %v", left)
	}
}

// seccompProbe calls each syscall through libc's syscall(2) with arguments
// that make it fail, or succeed, in a way other than EPERM when nothing
// filters it, and prints "name errno" (or "name ok"). With "int80" it first
// calls getpid through the i386 ABI (amd64 only) in a forked child and
// prints how the child ended: "int80 ok", "int80 signal N" or "int80 exit N".
// The child takes the blow so that the probe itself always exits 0: a kernel
// without IA32 emulation faults on int 0x80 (SIGSEGV) whether or not a
// filter is there, and only the child's fate tells the two apart.
const seccompProbe = `
import ctypes, errno, mmap, os, resource, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
# The i386 probe comes first: once ptrace(PTRACE_TRACEME) below succeeds (no
# filter), the child's SIGCHLD would stop this process for a tracer that
# does not know it is one.
if len(sys.argv) > 2:
    pid = os.fork()
    if pid == 0:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a fault must not leave a core file behind
        buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        buf.write(bytes([0xb8, 0x14, 0, 0, 0, 0xcd, 0x80, 0xc3]))  # mov eax, 20 (getpid); int 0x80; ret
        ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        print("int80 signal", os.WTERMSIG(status), flush=True)
    elif os.WEXITSTATUS(status) == 0:
        print("int80 ok", flush=True)
    else:
        print("int80 exit", os.WEXITSTATUS(status), flush=True)
for line in filter(None, sys.argv[1].split(";")):
    name, nr, *args = line.split()
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(int(nr)), *[ctypes.c_long(int(a, 0)) for a in args])
    e = ctypes.get_errno() if r == -1 else 0
    print(name, errno.errorcode.get(e, str(e)) if e else "ok", flush=True)
`

// sysctlInt reads a numeric sysctl under /proc/sys, -1 when this kernel has none.
func sysctlInt(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc/sys", name))
	if err != nil {
		return -1
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("/proc/sys/%s: %q is not a number", name, b)
	}
	return v
}

// int80Host runs the i386 probe outside any jail and returns how it ended
// ("ok" when the kernel has the i386 ABI, "signal 11" when it has no IA32
// emulation), so that TestBwrapSeccomp checks the filter against what this
// kernel supports instead of assuming the ABI exists.
func int80Host(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("/usr/bin/python3", "-c", seccompProbe, "", "int80").Output()
	if err != nil {
		t.Fatalf("the i386 probe outside the jail failed (%v); it must exit 0 whatever the kernel: %s", err, out)
	}
	k, v, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if k != "int80" || v == "" {
		t.Fatalf("the i386 probe outside the jail printed %q, want \"int80 <how the child ended>\"", out)
	}
	return v
}

// TestBwrapSeccomp checks that the filter, not the lack of privileges,
// refuses the dangerous calls: the same calls without hardening get other
// answers. Ordinary programs are TestBwrapRuntimes' business.
func TestBwrapSeccomp(t *testing.T) {
	info, err := arch.GetInfo("")
	if err != nil {
		t.Skipf("go-seccomp-bpf has no syscall table for %s", runtime.GOARCH)
	}
	calls := []struct {
		name, args string
		filtered   string // errno with the filter
		unfiltered string // without it, on this kernel; "" when hosts differ (EPERM on some)
	}{
		{"ptrace", "0 0 0 0", "EPERM", "ok"}, // PTRACE_TRACEME
		{"keyctl", "0 -3 0", "EPERM", "ok"},  // KEYCTL_GET_KEYRING_ID of the session keyring
		{"bpf", "0xffff 0 0", "EPERM", ""},
		{"perf_event_open", "0 0 -1 -1 0", "EPERM", "EFAULT"},
		{"userfaultfd", "1", "EPERM", ""},   // UFFD_USER_MODE_ONLY
		{"unshare", "0x200", "EPERM", "ok"}, // CLONE_FS
		{"setns", "-1 0", "EPERM", "EBADF"},
		{"mount", "0 0 1 0 0", "EPERM", "EFAULT"}, // a bad type pointer is read before permissions are checked
		{"umount2", "1 0", "EPERM", "EFAULT"},
		{"io_uring_setup", "1 0", "EPERM", "EFAULT"},
		{"open_by_handle_at", "-1 0 0", "EPERM", ""},
		{"kexec_load", "0 0 0 0", "EPERM", ""},
		{"clone", fmt.Sprintf("%#x 0 0 0 0", unix.CLONE_NEWUSER|int(unix.SIGCHLD)), "EPERM", "ENOSPC"}, // --disable-userns answers ENOSPC
		{"clone3", "0 0", "ENOSYS", "EINVAL"},
	}
	// Two sysctls change what the kernel itself answers, without any filter.
	for i, c := range calls {
		switch c.name {
		case "perf_event_open":
			// Debian's and Ubuntu's own kernels default kernel.perf_event_paranoid to 3 or 4, which refuse the
			// call to anyone without CAP_SYS_ADMIN before its arguments are read.
			if v := sysctlInt(t, "kernel/perf_event_paranoid"); v >= 3 {
				calls[i].unfiltered = "EACCES"
				t.Logf("kernel.perf_event_paranoid = %d: without the filter, perf_event_open answers EACCES", v)
			}
		case "io_uring_setup":
			// kernel.io_uring_disabled 1 or 2 (Linux 6.6+) answers EPERM itself: the plain jail
			// cannot then show that the filter is what refuses it.
			if v := sysctlInt(t, "kernel/io_uring_disabled"); v > 0 {
				calls[i].unfiltered = "EPERM"
				t.Logf("KERNEL REFUSES io_uring ITSELF (kernel.io_uring_disabled = %d): the filter's EPERM for io_uring_setup cannot be told apart from the kernel's here", v)
			}
		}
	}
	var lines []string
	for _, c := range calls {
		nr, ok := info.SyscallNames[c.name]
		if !ok {
			t.Fatalf("no %s on %s", c.name, info.Name)
		}
		lines = append(lines, fmt.Sprintf("%s %d %s", c.name, nr, c.args))
	}
	argv := []string{"/usr/bin/python3", "-c", seccompProbe, strings.Join(lines, ";")}
	// What the i386 probe must show in each jail, given what the kernel
	// itself does with int 0x80. Where the ABI exists the filter must kill
	// the caller (SIGSYS) before its call runs; where it does not, there is
	// no i386 call for the filter to stop, so both jails must see exactly
	// what the unjailed probe saw.
	var int80Plain, int80Hardened string
	if runtime.GOARCH == "amd64" {
		argv = append(argv, "int80")
		int80Plain = int80Host(t)
		int80Hardened = int80Plain
		if int80Plain == "ok" {
			int80Hardened = fmt.Sprintf("signal %d", unix.SIGSYS)
			t.Logf("this kernel has the i386 ABI (int 0x80 answers outside the jail): the filter must kill it with SIGSYS")
		} else {
			t.Logf("THIS KERNEL HAS NO i386 ABI (no IA32 emulation: int 0x80 ends in %q outside the jail): the filter's kill of other ABIs cannot be exercised here; checking only that int 0x80 ends the same way in both jails", int80Plain)
		}
	} else {
		t.Logf("no i386 probe on %s: int 0x80 exists only on amd64", runtime.GOARCH)
	}

	for _, hardened := range []bool{true, false} {
		t.Run(map[bool]string{true: "hardened", false: "plain"}[hardened], func(t *testing.T) {
			b := newTestBwrap(t)
			if !hardened {
				b = newPlainBwrap(t)
			}
			res, stdout, stderr := run(t, b, &Spec{Argv: argv, WorkDir: testDir(t, b, true)})
			// The probe forks for the i386 call, so it exits 0 in every case.
			if res.ExitCode != 0 {
				t.Errorf("exit code %d, want 0\nstdout:\n%s\nstderr:\n%s", res.ExitCode, stdout, stderr)
			}
			got := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
				if k, v, ok := strings.Cut(line, " "); ok {
					got[k] = v
				}
			}
			for _, c := range calls {
				switch {
				case hardened && got[c.name] != c.filtered:
					t.Errorf("%s: %q, want %s", c.name, got[c.name], c.filtered)
				case !hardened && c.unfiltered != "" && got[c.name] != c.unfiltered:
					t.Errorf("%s without the filter: %q, want %s", c.name, got[c.name], c.unfiltered)
				}
			}
			want := int80Plain
			if hardened {
				want = int80Hardened
			}
			if want != "" && got["int80"] != want {
				t.Errorf("int 0x80 (i386 getpid) in the jail: %q, want %q (outside the jail: %q)\nstdout:\n%s\nstderr:\n%s", got["int80"], want, int80Plain, stdout, stderr)
			}
		})
	}
}

func TestSeccompFilter(t *testing.T) {
	f, err := jailSeccomp()
	if err != nil {
		t.Skip(err)
	}
	if info, _ := arch.GetInfo(""); info != nil && info.ID == arch.X86_64.ID {
		// Every name is meant for x86_64: a typo would silently drop it.
		if len(f.denied) != len(deniedSyscalls) {
			t.Errorf("the filter denies %d of %d listed syscalls: %v", len(f.denied), len(deniedSyscalls), slices.DeleteFunc(slices.Clone(deniedSyscalls), func(n string) bool { return slices.Contains(f.denied, n) }))
		}
	}
	if len(f.prog) == 0 || len(f.prog)%8 != 0 {
		t.Errorf("filter is %d bytes, want a non-empty multiple of 8 (struct sock_filter)", len(f.prog))
	}
	if len(f.prog) > 64<<10 {
		t.Errorf("filter is %d bytes: more than a pipe buffer, seccompPipe would block", len(f.prog))
	}
	for _, want := range []string{"mount", "ptrace", "bpf", "keyctl", "perf_event_open", "userfaultfd", "unshare", "setns", "kexec_load", "open_by_handle_at", "init_module"} {
		if !slices.Contains(f.denied, want) {
			t.Errorf("%s is not denied", want)
		}
	}
}

func TestKafelPolicy(t *testing.T) {
	f, err := jailSeccomp()
	if err != nil {
		t.Skip(err)
	}
	lines := f.kafelPolicy()
	policy := strings.Join(lines, "\n")
	t.Log("\n" + policy)
	for _, want := range []string{
		"ERRNO(1) {", "ERRNO(38) {", "DEFAULT ALLOW",
		fmt.Sprintf("SYSCALL[%d], /* mount */", f.arch.SyscallNames["mount"]),
		"clone { (clone_flags & 0x7e020000) != 0 }",
	} {
		mustContain(t, policy, want, "Kafel policy")
	}
	eperm, enosys, _ := strings.Cut(policy, "ERRNO(38)")
	clone3 := fmt.Sprintf("SYSCALL[%d]", f.arch.SyscallNames["clone3"])
	if !strings.Contains(enosys, clone3) || strings.Contains(eperm, clone3) {
		t.Errorf("clone3 (%s) must be in the ERRNO(38) block only: glibc falls back to clone on ENOSYS alone", clone3)
	}
	if f.arch.ID == arch.X86_64.ID {
		mustContain(t, policy, fmt.Sprintf("SYSCALL[%d], /* x32 ptrace */", arch.X32.SyscallNames["ptrace"]|arch.X32.SeccompMask), "Kafel policy")
	}
	// Kafel lists: items separated by commas, none before the closing brace.
	for i, l := range lines {
		if l == "}" && strings.Contains(lines[i-1], "],") {
			t.Errorf("trailing comma before line %d: %q", i, lines[i-1])
		}
	}
	if strings.Count(policy, "{") != strings.Count(policy, "}") {
		t.Error("unbalanced braces")
	}
}
