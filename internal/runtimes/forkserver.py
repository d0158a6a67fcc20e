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

The template forks spares ahead of jobs, one per message the host sends on the
control socket (fd 0): a JSON header (the jobs' tmpfs size, rlimits and seccomp
filter, their directories' mount points) and, as SCM_RIGHTS, the spare's two
sockets to the host and its cgroup's tasks files. The template keeps none of
them, and never sees anything of a job.

  C1 (in the template's pid namespace): new mount, pid, net, ipc and uts
     namespaces; every mount private; loopback up. It forks C2, then waits for
     a job on its socket to the host: the job's stdin, stdout and stderr and a
     detached mount (open_tree) of each directory it gets of its own (/job, its
     io directory). It moves those onto their mount points (C2, in the same
     mount namespace, is sealed and could not), hands C2 the stdio, waits for
     it and reports its wait status to the host.
  C2 (pid 1 of the new pid namespace), before any job exists: mounts a /proc
     of its own pid namespace and its own ptys, starts a session, moves itself
     into its cgroup, mounts a fresh /tmp and /dev/shm, enters a new cgroup
     namespace, closes every descriptor but its two sockets (and the template's
     stdout and stderr, which the job's replace), sets the jobs'
     rlimits, drops every capability (bounding, ambient, effective, permitted,
     inheritable) and installs the jobs' seccomp filter. Only then does it say
     ready; the host learns its pid from the kernel (SCM_CREDENTIALS). When
     the job comes, the host serves its egress socket in C2's network
     namespace and writes the job's environment on C2's channel; C2 takes its
     stdio from C1 (its directories are in place by then), enters /job, reads
     the environment and returns to the shim, which runs the job as a cold
     start does.
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


def serve(announce_ready, rehearse=None):
    """Fork spares until the host closes the control socket; return only in a spare's C2,
    sealed, once its job's directories, stdio and environment are in place."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    ctl = socket.socket(fileno=0)
    template = os.getpid()
    # The forks' first processes (C1) are reaped by the kernel: the template waits for none.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    announce_ready()
    while True:
        try:
            msg, fds = _recv(ctl, MAX_REQUEST)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)  # the host closed the template: torn down
        if not _spare(ctl, template, msg, fds, rehearse):
            return  # in a spare's C2, sealed, with its job
        # The template keeps nothing of a spare: its sockets and cgroup files are the spare's.
        for fd in fds:
            os.close(fd)


def _spare(ctl, template, msg, fds, rehearse):
    """Fork a spare (see the module's doc). Returns True in the template; returns False in the
    spare's C2 once its job has reached it."""
    sys.stdout.flush()
    sys.stderr.flush()
    # The template's objects go to the collector's permanent generation: a fork's collections
    # (and the scan for its open files at its end) then leave them alone, and the pages that
    # hold them stay shared with the template instead of being copied into every fork.
    gc.freeze()
    if os.fork() != 0:
        return True
    try:
        _spare_c1(ctl, template, json.loads(msg), fds, rehearse)
        return False  # C2
    except BaseException as exc:  # noqa: BLE001 - no job exists yet
        try:
            os.write(2, f"fork server: cannot set up a job's jail: {exc}\n".encode())
        except OSError:
            pass
        os._exit(EXIT_SETUP)


def _spare_c1(ctl, template, req, fds, rehearse):
    # C1. Dies with the template; a template already gone leaves no orphan.
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    if os.getppid() != template:
        os._exit(EXIT_SETUP)
    ctl.close()  # the control channel is the template's alone
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    ncg = req["cgroups"]
    if len(fds) != 2 + ncg:
        raise ValueError(f"{len(fds)} descriptors for a spare with {ncg} cgroups")
    host, chan, cgroups = fds[0], fds[1], fds[2:]
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    # Nothing mounted here reaches the template or a sibling, nor the other way round.
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh14x", b"lo", IFF_UP | IFF_RUNNING))
    to_c2, c2_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        to_c2.close()
        os.close(host)
        _spare_c2(req, chan, cgroups, c2_end, rehearse)
        return
    c2_end.close()
    for fd in [chan, *cgroups]:
        os.close(fd)
    os.close(1)
    to_host = socket.socket(fileno=host)
    try:
        msg, job = _recv(to_host, 16)
    except OSError:
        msg, job = b"", []
    if msg != b"job":
        os._exit(0)  # torn down before a job came; C2 dies with this process
    status = EXIT_SETUP << 8
    try:
        slots = req["slots"]
        if len(job) != 3 + len(slots):
            raise ValueError(f"{len(job)} descriptors for a job with {len(slots)} directories")
        # The job's directories, moved into the mount namespace C2 shares with this process:
        # C2 is sealed already (it could not mount them itself), and nothing of the job runs
        # until the stdio sent below reaches it.
        for fd, target in zip(job[3:], slots):
            _check(
                _libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH),
                f"move_mount {target}",
            )
            os.close(fd)
        to_c2.sendmsg([b"job"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", *job[:3]))])
        for fd in job[:3]:
            os.close(fd)
        to_c2.close()
        os.close(2)
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
    except BaseException as exc:  # noqa: BLE001 - the job never started
        try:
            os.write(2, f"fork server: cannot hand a job its directories: {exc}\n".encode())
        except OSError:
            pass
        os.kill(pid, signal.SIGKILL)
    try:
        to_host.send(b"exit %d" % status)
    except OSError:
        pass
    os._exit(0)


def _spare_c2(req, chan, cgroups, c1, rehearse):
    # C2: pid 1 of the job's pid namespace. It seals itself in before its job exists, then
    # waits for it.
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    # Ptys of its own, as bwrap's --dev gives a jail: the template's devpts instance would be
    # every fork's, and a job could open a sibling's terminal. (/dev/ptmx links to pts/ptmx.)
    _mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    os.setsid()
    # A single-threaded process that moves itself ("0") takes no global lock (see
    # internal/sandbox/fork.go); the files were opened by the host, whose credentials count.
    for fd in cgroups:
        os.write(fd, b"0")
        os.close(fd)
    tmp = f"size={int(req['tmp'])},mode=755"
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp)
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, tmp)
    _check(_libc.unshare(CLONE_NEWCGROUP), "unshare(cgroup)")
    keep = sorted((chan, c1.fileno()))
    os.closerange(3, keep[0])
    os.closerange(keep[0] + 1, keep[1])
    os.closerange(keep[1] + 1, 1 << 20)
    for res, cur, hard in req["rlimits"]:
        resource.setrlimit(res, (cur, hard))
    _drop_capabilities()
    if _libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1:
        raise OSError("no_new_privs is not set: the template was not started by bwrap")
    _seccomp(base64.b64decode(req["seccomp"]))
    if rehearse is not None:
        try:
            rehearse()
        except Exception:  # noqa: BLE001 - it only saves time; the job runs all the same
            pass

    # Sealed: the host learns this process's pid from the kernel (SCM_CREDENTIALS) and may
    # serve its egress socket in its network namespace.
    os.write(chan, b"ready")
    msg, fds = _recv(c1, 16)
    if msg != b"job" or len(fds) != 3:
        os._exit(0)  # torn down before a job came
    c1.close()
    # Above stdio, which they are about to replace (the control socket's 0 is free here).
    fds = [fd if fd > 2 else _above_stdio(fd) for fd in fds]
    for fd, target in zip(fds, (0, 1, 2)):
        os.dup2(fd, target)
        os.close(fd)
    # Into the job's own directory, now on its mount point (the spare's cwd was the
    # template's empty one under it).
    os.chdir(req["workdir"])
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
