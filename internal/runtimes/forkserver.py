"""Fork server of a Python template jail (shim.py --template).

The design, and why a job served so is as isolated as one in a fresh bwrap,
is written down in internal/sandbox/fork.go; this is its in-jail half.

The template is started by the host in a jail like a job's, with three
capabilities in the jail's user namespace (SYS_ADMIN, NET_ADMIN, SETPCAP) and a
seccomp filter that lets mount, unshare and move_mount through: what a fork
needs to build the namespaces of its job. Because it holds them, the template
runs no code but the interpreter's, the standard library's and this file's:
not the function's module, not its packages (their directory is not on
sys.path until a job's fork has dropped every privilege).

Per job the host sends one message on the control socket (fd 0): a JSON
header and, as SCM_RIGHTS, the job's channel, its stdin, stdout and stderr,
a detached mount (open_tree) for each directory it gets of its own (/job, its
io directory) and the job cgroup's tasks files. The template forks:

  C1 (in the template's pid namespace): new mount, pid, net, ipc and uts
     namespaces; every mount private; a fresh /tmp and /dev/shm; the job's
     directories moved onto their mount points; loopback up. It forks C2,
     waits for it and reports its wait status on the channel.
  C2 (pid 1 of the new pid namespace): moves itself into the job's cgroup,
     mounts a /proc of its own pid namespace, enters a new cgroup namespace,
     starts a session, takes the job's stdio and closes every other
     descriptor, sets the job's rlimits, drops every capability (bounding,
     ambient, effective, permitted, inheritable) and installs the job's
     seccomp filter. Only then does it say hello; the host learns its pid
     from the kernel (SCM_CREDENTIALS), serves its egress socket in its
     network namespace, and sends the go with the job's environment. C2
     returns to the shim, which runs the job as a cold start does.
"""

import base64
import ctypes
import fcntl
import gc
import json
import os
import resource
import signal
import socket
import struct
import sys

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_REC, MS_PRIVATE = 0x4000, 1 << 18

PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_SECCOMP = 22
PR_GET_NO_NEW_PRIVS = 39
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SECCOMP_MODE_FILTER = 2
LINUX_CAPABILITY_VERSION_3 = 0x20080522

SYS_MOVE_MOUNT = {"x86_64": 429, "aarch64": 429}.get(os.uname().machine, 429)
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}.get(os.uname().machine, 126)
AT_FDCWD = -100
MOVE_MOUNT_F_EMPTY_PATH = 0x4

SIOCSIFFLAGS = 0x8914
IFF_UP, IFF_RUNNING = 0x1, 0x40

# A fork that cannot build its job's jail exits with this before the job exists.
EXIT_SETUP = 125

MAX_REQUEST = 1 << 16
MAX_FDS = 32


def _check(ret, what):
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _mount(source, target, fstype, flags, data=None):
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _recv(sock, size):
    msg, anc, _flags, _addr = sock.recvmsg(size, socket.CMSG_SPACE(MAX_FDS * 4))
    fds = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(struct.unpack(f"{len(data) // 4}i", data[: len(data) - len(data) % 4]))
    return msg, fds


# Standard library modules the shim or most jobs import, loaded once here rather than in every
# fork: only the interpreter's own files, never the function's (see the module's doc).
PRELOAD = ("inspect", "traceback", "atexit", "typing", "dataclasses", "subprocess", "re", "datetime", "asyncio")


def serve(announce_ready):
    """Serve forks until the host closes the control socket; return only in a job's fork,
    sealed, with the job's environment in place."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    ctl = socket.socket(fileno=0)
    template = os.getpid()
    # The forks' first processes (C1) are reaped by the kernel: the template waits for none.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    announce_ready()
    spare = None
    while True:
        if spare is None:
            spare = _spare(ctl, template)
            if spare is None:
                return  # in a spare's C2, sealed for the job it was handed
        try:
            msg, fds = _recv(ctl, MAX_REQUEST)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)  # the host closed the template: torn down
        for attempt in range(2):
            try:
                _hand(spare, msg, fds)
                break
            except OSError:
                # The spare died waiting (killed, or out of memory): a new one serves the job.
                _close_spare(spare)
                spare = _spare(ctl, template)
                if spare is None:
                    return
        for fd in fds:
            os.close(fd)
        # The next job's spare is built now, after this one's request went out and while the
        # host waits for it: off the next job's path.
        _close_spare(spare)
        spare = None


def _hand(spare, msg, fds):
    to_c1, to_c2 = spare
    to_c2.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))])
    # C1 reports the job's end on its channel, the first descriptor.
    to_c1.sendmsg([b"chan"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fds[0]))])


def _close_spare(spare):
    for sock in spare:
        sock.close()


def _spare(ctl, template):
    """Fork a spare: a child in namespaces of its own, built before its job exists, waiting
    for one. Returns the template's ends of its two sockets; returns None in the spare's C2
    once it has been handed its job and sealed it in."""
    c1_t, c1_s = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c2_t, c2_s = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sys.stdout.flush()
    sys.stderr.flush()
    # The template's objects go to the collector's permanent generation: a fork's collections
    # (and the scan for its open files at its end) then leave them alone, and the pages that
    # hold them stay shared with the template instead of being copied into every fork.
    gc.freeze()
    pid = os.fork()
    if pid == 0:
        try:
            c1_t.close()
            c2_t.close()
            _spare_c1(ctl, template, c1_s, c2_s)
            return None  # C2
        except BaseException as exc:  # noqa: BLE001 - no job exists yet
            try:
                os.write(2, f"fork server: cannot set up a job's jail: {exc}\n".encode())
            except OSError:
                pass
            os._exit(EXIT_SETUP)
    c1_s.close()
    c2_s.close()
    return c1_t, c2_t


def _spare_c1(ctl, template, c1_s, c2_s):
    # C1. Dies with the template; a template already gone leaves no orphan.
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    if os.getppid() != template:
        os._exit(EXIT_SETUP)
    ctl.close()  # the control channel is the template's alone
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    # Nothing mounted here reaches the template or a sibling, nor the other way round.
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh14x", b"lo", IFF_UP | IFF_RUNNING))
    pid = os.fork()
    if pid == 0:
        c1_s.close()
        _spare_c2(c2_s)
        return
    c2_s.close()
    for fd in (1, 2):
        try:
            os.close(fd)
        except OSError:
            pass
    chan = -1
    try:
        msg, fds = _recv(c1_s, 16)
        if msg == b"chan" and len(fds) == 1:
            chan = fds[0]
    except OSError:
        pass
    c1_s.close()
    if chan < 0:
        os._exit(0)  # torn down before a job came; C2 dies with this process
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    try:
        os.write(chan, b"exit %d" % status)
    except OSError:
        pass
    os._exit(0)


def _spare_c2(c2_s):
    # C2: pid 1 of the job's pid namespace, waiting for its job.
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    # Ptys of its own, as bwrap's --dev gives a jail: the template's devpts instance would be
    # every fork's, and a job could open a sibling's terminal. (/dev/ptmx links to pts/ptmx.)
    _mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    os.setsid()
    msg, fds = _recv(c2_s, MAX_REQUEST)
    c2_s.close()
    if not msg:
        os._exit(0)
    _seal(json.loads(msg), fds)


def _seal(req, fds):
    slots = req["slots"]
    ncg = req["cgroups"]
    if len(fds) != 4 + len(slots) + ncg:
        raise ValueError(f"{len(fds)} descriptors for {len(slots)} slots and {ncg} cgroups")
    # Above stdio, which they are about to replace (the control socket's 0 is free here).
    fds = [fd if fd > 2 else _above_stdio(fd) for fd in fds]
    chan, stdin, stdout, stderr = fds[:4]
    trees = fds[4 : 4 + len(slots)]
    cgroups = fds[4 + len(slots) :]
    # A single-threaded process that moves itself ("0") takes no global lock (see
    # internal/sandbox/fork.go); the files were opened by the host, whose credentials count.
    for fd in cgroups:
        os.write(fd, b"0")
        os.close(fd)
    tmp = f"size={int(req['tmp'])},mode=755"
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp)
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, tmp)
    for fd, target in zip(trees, slots):
        _check(
            _libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH),
            f"move_mount {target}",
        )
        os.close(fd)
    _check(_libc.unshare(CLONE_NEWCGROUP), "unshare(cgroup)")
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
    os.closerange(3, chan)
    os.closerange(max(chan, 2) + 1, 1 << 20)
    for res, cur, hard in req["rlimits"]:
        resource.setrlimit(res, (cur, hard))
    _drop_capabilities()
    if _libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1:
        raise OSError("no_new_privs is not set: the template was not started by bwrap")
    _seccomp(base64.b64decode(req["seccomp"]))

    os.write(chan, b"hello")
    go = b""
    while True:
        part = os.read(chan, MAX_REQUEST)
        if not part:
            break
        go += part
        if go.endswith(b"\n"):
            break
    os.close(chan)
    if not go.endswith(b"\n"):
        os._exit(EXIT_SETUP)  # the host gave up on the job before its go
    env = json.loads(go)
    os.environ.clear()
    os.environ.update(env)
    # What python's start-up would have made of the job's PYTHONPATH (its packages).
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[1:1] = extra


def _above_stdio(fd):
    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 3)
    os.close(fd)
    return high


def _bounding_set():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapBnd:"):
                bits = int(line.split()[1], 16)
                return [cap for cap in range(64) if bits >> cap & 1]
    return list(range(64))


# Read and built once in the template, which every fork inherits: what a fork drops, and the
# arguments of capset (a version 3 header for this process, two empty data sets).
_BOUNDING = _bounding_set()
_CAP_HEADER = ctypes.create_string_buffer(struct.pack("Ii", LINUX_CAPABILITY_VERSION_3, 0), 8)
_CAP_DATA = ctypes.create_string_buffer(bytes(24), 24)


def _drop_capabilities():
    for cap in _BOUNDING:
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap} from the bounding set")
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    _check(_libc.syscall(SYS_CAPSET, _CAP_HEADER, _CAP_DATA), "capset")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _seccomp(prog):
    if len(prog) % 8 or not prog:
        raise ValueError(f"a seccomp program of {len(prog)} bytes")
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = _SockFprog(len(prog) // 8, ctypes.addressof(buf))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0), "install the job's seccomp filter")
