package sandbox

// Template jails: a fork per job.
//
// A bwrap jail costs a whole bwrap and a runtime start per job. A Template is one jail per
// function version whose runtime has started and then forks a child per job, which is in a jail
// of its own before any byte of the job reaches it (the SOCK / zygote design). Its in-jail half
// is internal/runtimes/forkserver.py.
//
// The forks are made ahead: a template keeps a spare (two once a job found none ready), each
// sealed before its job exists, and a job is handed to one. So what is left on a job's path is handing it over (its
// stdio, its directories, its environment), not building its jail. What a spare gets, in
// order, before it says it is ready:
//
//   - new mount, pid, net, ipc and uts namespaces (unshare; the pid namespace needs the second
//     fork, so the job is pid 1 of its own), every mount made private;
//   - a /proc of its pid namespace (its own processes only), ptys of its own, loopback up in its
//     network namespace;
//   - its own cgroup (memory, pids limits), made by the host for this spare: the host passes its
//     tasks files, the spare moves itself in (a single-threaded process that moves itself takes
//     no global lock, which a host-side move does: milliseconds per job); then a new cgroup
//     namespace;
//   - a fresh size-limited tmpfs on /tmp and /dev/shm;
//   - a session of its own, every descriptor closed but its two sockets to the host and the
//     template's stdout and stderr (for what goes wrong before its job; the job's replace them);
//     the job's rlimits;
//   - every capability dropped (bounding set, ambient, effective, permitted, inheritable), and
//     the jobs' seccomp filter stacked on the template's;
//   - only then a ready to the host, which learns its pid from the kernel (SCM_CREDENTIALS).
//
// A job handed to a spare gets, in order: the egress listener in its network namespace
// (Spec.Listen, as for a bwrap jail, through /proc/<pid>/ns/net); its own /job and io
// directory: the host clones each (open_tree(OPEN_TREE_CLONE), volumes included, nosuid and
// nodev set on the clone) and passes the detached mounts to the spare's first process, which
// moves them onto their mount points in the mount namespace it shares with the job's pid 1
// (sealed, that one could not), so a job directory the host made after the template started (or
// a disk tree mounted on the host) reaches it, and no other job's directory is ever in the
// template's namespace; then its stdin, stdout and stderr, handed on by the first process once
// the directories are in place; and its environment (its secrets), written by the host straight
// to the job's pid 1, which reads it only once its stdio and directories are there. The
// arguments wait in the io directory, as for a cold start. Neither the template nor a spare's
// first process ever holds the environment.
//
// Why that is as isolated as a fresh bwrap. The child's view is a bwrap job's: the same
// read-only system and /etc (the template's mounts, built by bwrap exactly as a job's), its own
// writable places, no capabilities, no new privileges, the same seccomp filter, rlimits and
// cgroup limits, its own namespaces of every kind bwrap gives (the user namespace is the
// template's, a bwrap one with the same single uid mapped; nested ones stay refused:
// --disable-userns and the filter). It cannot reach the template: the template is in a parent
// pid namespace (no pid of it is visible, getppid is 0, kill and ptrace have nothing to name,
// and ptrace is refused anyway), in other mount, net, ipc and uts namespaces (no abstract
// socket, SysV object or /dev/shm file is shared), and holds nothing of the job. Memory is
// copy-on-write: what a job writes is its own, and the template, which never runs a job, holds
// nothing a job wrote; every job is a fresh copy of the same clean state. Its siblings are
// likewise in other namespaces of every kind. Its descriptors are only its stdio.
// The spare's first process, which keeps the template's capabilities to move the job's
// directories in, is as out of reach as the template: in the parent pid namespace, and
// holding only the job's directories (already the job's) and, briefly, its stdio.
// That the jail is built before the job exists changes none of it: a spare runs nothing but the
// fork server's code until its job comes, and nothing of the job reaches it before it is sealed
// but bytes queued in the kernel (its environment on its channel, as its arguments wait in a
// file), read only by the sealed process.
//
// What a template must give up for that. To build namespaces the template keeps
// CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_SETPCAP in its user namespace, and a filter that lets
// mount, unshare and move_mount through: kernel surface a job's jail denies. So nothing of the
// function runs in a template: not its module's top-level code, not its packages (not on
// sys.path; the template starts with none of the function's environment that could change what
// the interpreter loads). Only the interpreter, its standard library and our shim do; the
// function's code is imported by each job's child, after it has dropped every privilege. That
// is the one difference from a warm jail's speed-up: a Python function's imports are paid per
// job (a few hundred microseconds for a small module), its interpreter start is not.
//
// Where it is not the same as a fresh bwrap, and why it is accepted: every child of a template
// shares its address-space layout (ASLR) and its hash seed (PYTHONHASHSEED), as Android's
// zygote children do. A job that learns them learns its siblings', but it has no way to reach
// a sibling to make use of them. Bun is not forked at all (runtimes.CanFork).
//
// A job the template cannot serve (a network it was not built for, a mount it does not have,
// a template or spare that died) is refused by Start with ErrForkUnfit or ErrTemplateGone
// before anything of the job reached it: the caller runs it warm or cold and says why. A job
// whose limits are not the template's gets a spare made for it, on its path. A spare whose
// first process cannot move the job's directories into place kills its pid 1 before the job
// runs and reports exit 125, as a bwrap that cannot build a jail does.
