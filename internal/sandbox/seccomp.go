package sandbox

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM inside a hardened jail: the answer a
// missing privilege gets, which programs handle (a kill would not be). The
// filter is a deny list on top of what the jail already prevents (no
// capabilities, no new privileges, no nested user namespaces through
// --disable-userns): these are the calls that reach kernel attack surface a
// job has no use for, or that would act on something outside the job if a
// capability ever leaked in. Names missing from the running architecture's
// table (iopl on arm64...) are skipped.
var deniedSyscalls = []string{
	// Mounting and namespaces: the jail's file system view is fixed.
	"mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	// Other processes' memory, and process tracing.
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
	"process_madvise", "migrate_pages", "move_pages",
	// Kernel replacement and modules.
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"create_module", "get_kernel_syms", "query_module",
	// Kernel subsystems with a long record of privilege escalations.
	// (python, node and bun do without io_uring: TestBwrapRuntimes.)
	"bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// File handles bypass the mount view (the "shocker" escape).
	"open_by_handle_at", "name_to_handle_at",
	// Host-wide state.
	"swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"syslog", "sethostname", "setdomainname", "vhangup", "lookup_dcookie",
	"nfsservctl", "_sysctl", "uselib", "fanotify_init",
	// Raw hardware access. (vm86 exists only for i386, whose ABI the
	// filter refuses as a whole.)
	"iopl", "ioperm",
}

// enosysSyscalls fail with ENOSYS, the answer that makes a caller fall back
// to an older call. clone3 passes its flags in memory, where a seccomp
// filter cannot see them (so it cannot refuse CLONE_NEWUSER there);
// glibc's pthread_create retries with clone when clone3 is "missing".
var enosysSyscalls = []string{"clone3"}

// cloneNamespaceFlags are the clone flags that create namespaces. clone
// with any of them is refused; plain fork and thread creation pass.
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// seccompFilter is the syscall filter of hardened jails, built once per
// process.
type seccompFilter struct {
	prog []byte // struct sock_filter[], as bwrap --seccomp reads it
	// templateProg is a template jail's filter (see Template): prog's, but for the calls a
	// fork needs to build its job's namespaces (templateAllowed). Each fork stacks prog on it
	// before its job exists.
	templateProg []byte
	denied       []string // names actually in the filter, for Describe and nsjail
	enosys       []string
	arch         *arch.Info
}

var (
	seccompOnce sync.Once
	seccompProg *seccompFilter
	seccompErr  error
)

// jailSeccomp returns the filter for the running architecture.
func jailSeccomp() (*seccompFilter, error) {
	seccompOnce.Do(func() { seccompProg, seccompErr = buildSeccomp() })
	return seccompProg, seccompErr
}

// templateAllowed are the denied calls a template jail keeps for its forks: new namespaces
// (unshare), a private /tmp, /dev/shm and /proc (mount), and the job's directories put in place
// (move_mount). Nothing but the host's own code runs with them (see Template).
var templateAllowed = []string{"mount", "unshare", "move_mount"}

func buildSeccomp() (*seccompFilter, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("sandbox: seccomp: %w (a hardened jail needs a filter for this architecture; only NewBwrapUnhardened, a measurement floor, goes without)", err)
	}
	known := func(names []string) []string {
		var out []string
		for _, n := range names {
			if _, ok := info.SyscallNames[n]; ok {
				out = append(out, n)
			}
		}
		return out
	}
	f := &seccompFilter{denied: known(deniedSyscalls), enosys: known(enosysSyscalls), arch: info}

	if f.prog, err = assembleSeccomp(info, f.denied, f.enosys); err != nil {
		return nil, err
	}
	tdenied := slices.DeleteFunc(slices.Clone(f.denied), func(n string) bool { return slices.Contains(templateAllowed, n) })
	if f.templateProg, err = assembleSeccomp(info, tdenied, f.enosys); err != nil {
		return nil, err
	}
	return f, nil
}

// assembleSeccomp encodes a filter that denies denied (EPERM) and enosys (ENOSYS), clone with
// namespace flags, and kills a process calling through another ABI.
func assembleSeccomp(info *arch.Info, denied, enosys []string) ([]byte, error) {
	eperm := seccomp.SyscallGroup{Names: denied, Action: seccomp.ActionErrno | seccomp.Action(unix.EPERM)}
	if _, ok := info.SyscallNames["clone"]; ok {
		eperm.NamesWithCondtions = []seccomp.NameWithConditions{{
			Name: "clone",
			// On every architecture go-seccomp-bpf knows, clone's flags are
			// its first argument (s390's swapped stack/flags is not among them).
			Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNamespaceFlags}},
		}}
	}
	policy := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			eperm,
			{Names: enosys, Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)},
		},
	}
	insts, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("sandbox: seccomp: assemble the filter: %w", err)
	}
	// go-seccomp-bpf lets a syscall made through another ABI (int 0x80 on
	// amd64) through to its default action, allow: the deny list would not
	// apply there. Kill such a process first thing instead. (The library
	// already answers ENOSYS to the x32 ABI.)
	insts = append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)},
	}, insts...)
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("sandbox: seccomp: encode the filter: %w", err)
	}
	var buf bytes.Buffer
	for _, in := range raw {
		// struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; }
		_ = binary.Write(&buf, binary.NativeEndian, in)
	}
	return buf.Bytes(), nil
}

// describe names the filter for the host's start log.
func (f *seccompFilter) describe() string {
	return fmt.Sprintf("seccomp on (%s: %d syscalls denied, clone with namespace flags denied, clone3 ENOSYS, other ABIs killed)",
		f.arch.Name, len(f.denied))
}

// kafelPolicy renders the same filter as a Kafel policy for nsjail, one
// line per entry. Syscalls are given by number (SYSCALL[n]) so that an older
// Kafel syscall table cannot reject a newer name; the name follows as a
// comment. x32 numbers are listed too: a deny list compiled for x86_64
// would otherwise not match them.
func (f *seccompFilter) kafelPolicy() []string {
	var eperm, enosys []string
	add := func(dst *[]string, names []string) {
		for _, n := range names {
			*dst = append(*dst, fmt.Sprintf("SYSCALL[%d] /* %s */", f.arch.SyscallNames[n], n))
			if f.arch.ID == arch.X86_64.ID {
				if nr, ok := arch.X32.SyscallNames[n]; ok {
					*dst = append(*dst, fmt.Sprintf("SYSCALL[%d] /* x32 %s */", nr|arch.X32.SeccompMask, n))
				}
			}
		}
	}
	add(&eperm, f.denied)
	add(&enosys, f.enosys)
	eperm = append(eperm, fmt.Sprintf("clone { (clone_flags & %#x) != 0 }", cloneNamespaceFlags))

	lines := []string{fmt.Sprintf("ERRNO(%d) {", unix.EPERM)}
	lines = append(lines, indentJoin(eperm)...)
	lines = append(lines, "}", fmt.Sprintf("ERRNO(%d) {", unix.ENOSYS))
	lines = append(lines, indentJoin(enosys)...)
	return append(lines, "}", "DEFAULT ALLOW")
}

// indentJoin turns entries into Kafel list lines: comma-separated, indented.
func indentJoin(entries []string) []string {
	out := slices.Clone(entries)
	for i := range out {
		// Kafel separates list items with commas; the comment stays after it.
		item, comment, hasComment := strings.Cut(out[i], " /*")
		if i < len(out)-1 {
			item += ","
		}
		if hasComment {
			item += " /*" + comment
		}
		out[i] = "  " + item
	}
	return out
}
