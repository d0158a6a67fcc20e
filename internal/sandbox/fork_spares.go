package sandbox

// A template's spares: forks made and sealed ahead of their jobs (see doc.go).

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// spareRequest is what the fork server reads per spare (forkserver.py), with the spare's
// sockets and its cgroup's tasks files.
type spareRequest struct {
	Slots   []string    `json:"slots"`
	WorkDir string      `json:"workdir"`
	Tmp     int64       `json:"tmp"`
	Rlimits [][3]uint64 `json:"rlimits"`
	Seccomp string      `json:"seccomp"`
	Cgroups int         `json:"cgroups"`
}

// fit checks that spec asks for nothing but what t gives: its command, its read-only mounts,
// a directory per slot, its network. It returns the host directory for each of t's slots, /job

// forkSpares is how many spares a template keeps sealed ahead of its jobs once one of its
// jobs found none ready: two, so that two jobs arriving together (or a job arriving while the
// last one's replacement is still being built) both find one. Until then it keeps one: a spare
// costs memory (about 8 MiB PSS for Python), and a function called now and then needs no more.
const forkSpares = 2

// spare is a fork of the template made ahead of its job (forkserver.py): in namespaces and a
// cgroup of its own, its pid 1 sealed (no capabilities, the jobs' filter and rlimits),
// waiting for a job's directories, stdio and environment.
type spare struct {
	group  *runGroup
	limits Limits // its jobs' (with defaults): its cgroup, rlimits and tmpfs are made for them
	// The host's ends of the spare's sockets, on Go's poller (a goroutine blocked in a raw read
	// holds a P, and two of them left no P for the job's output: a millisecond per job).
	c1     *net.UnixConn // to its first process: the job's fds, then the job's exit status
	ch     *net.UnixConn // to its pid 1: its ready, then the job's environment
	ready  chan struct{}
	pid    int // pid 1 of the spare's pid namespace, in the host's, once ready
	pidfd  int
	listen net.Listener // at the template's ListenAt, in its network namespace; nil without
	err    error
}

// refill asks the template for spares until it has t.want, made or on their way.
func (t *Template) refill() {
	for {
		t.mu.Lock()
		if t.closed || len(t.spares)+t.making >= max(t.want, 1) {
			t.mu.Unlock()
			return
		}
		t.making++
		t.mu.Unlock()
		sp, err := t.newSpare(t.limits)
		t.mu.Lock()
		t.making--
		if err == nil && !t.closed {
			t.spares = append(t.spares, sp)
			sp = nil
		}
		t.mu.Unlock()
		if sp != nil {
			sp.release()
		}
		if err != nil {
			return // the next Start tries again, and says why
		}
	}
}

// take returns the oldest spare, once it is ready, and has a new one made in its place. A job
// whose limits are not those the template was started with (its spares' cgroups, rlimits and
// tmpfs are made for those) gets a spare made for it.
func (t *Template) take(ctx context.Context, limits Limits) (*spare, error) {
	if limits != t.limits {
		sp, err := t.newSpare(limits)
		if err != nil {
			return nil, err
		}
		return t.readySpare(ctx, sp)
	}
	t.mu.Lock()
	var sp *spare
	if len(t.spares) > 0 {
		sp = t.spares[0]
		t.spares = t.spares[1:]
	}
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: it was closed", ErrTemplateGone)
	}
	if sp == nil {
		var err error
		if sp, err = t.newSpare(t.limits); err != nil {
			return nil, err
		}
	}
	select {
	case <-sp.ready:
	default:
		// This job waits for its spare: from now on the template keeps more of them.
		t.mu.Lock()
		t.want = forkSpares
		t.mu.Unlock()
	}
	go t.refill()
	return t.readySpare(ctx, sp)
}

// readySpare waits for sp to be sealed.
func (t *Template) readySpare(ctx context.Context, sp *spare) (*spare, error) {
	timer := time.NewTimer(forkHelloTimeout)
	defer timer.Stop()
	select {
	case <-sp.ready:
	case <-ctx.Done():
		sp.release()
		return nil, fmt.Errorf("sandbox: not started: %w", ctx.Err())
	case <-timer.C:
		sp.release()
		return nil, fmt.Errorf("%w: its spare did not seal itself within %v", ErrTemplateGone, forkHelloTimeout)
	}
	if sp.err != nil {
		sp.release()
		return nil, fmt.Errorf("%w: its spare did not seal itself: %v", ErrTemplateGone, sp.err)
	}
	// A spare killed while it waited (its pidfd turns readable) takes no job: the job would
	// only fail with it.
	if n, _ := unix.Poll([]unix.PollFd{{Fd: int32(sp.pidfd), Events: unix.POLLIN}}, 0); n > 0 {
		sp.release()
		return nil, fmt.Errorf("%w: its spare %d died waiting for a job", ErrTemplateGone, sp.pid)
	}
	return sp, nil
}

// dropSpares releases every spare: the template is closed or gone.
func (t *Template) dropSpares() {
	t.mu.Lock()
	t.closed = true
	spares := t.spares
	t.spares = nil
	t.mu.Unlock()
	for _, sp := range spares {
		sp.release()
	}
}

// newSpare makes a spare's cgroup and sockets, for jobs of limits, and asks the template to
// fork it.
func (t *Template) newSpare(limits Limits) (*spare, error) {
	sp := &spare{pidfd: -1, ready: make(chan struct{}), limits: limits}
	var child []int // the spare's ends, closed once sent
	defer func() {
		for _, fd := range child {
			unix.Close(fd)
		}
	}()
	fail := func(err error) (*spare, error) {
		close(sp.ready)
		sp.release()
		return nil, err
	}
	var err error
	if sp.group, err = t.b.newRunGroup(limits); err != nil {
		return fail(err)
	}
	var tasks []int
	if sp.group != nil {
		name := "tasks"
		if sp.group.version == CgroupV2 {
			name = "cgroup.procs"
		}
		for _, d := range sp.group.dirs {
			fd, err := unix.Open(filepath.Join(d, name), unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return fail(fmt.Errorf("sandbox: open the fork's cgroup %s: %w", d, err))
			}
			child = append(child, fd)
			tasks = append(tasks, fd)
		}
	}
	c1, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("sandbox: spare socket: %w", err))
	}
	child = append(child, c1[1])
	if sp.c1, err = hostConn(c1[0]); err != nil {
		return fail(err)
	}
	ch, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("sandbox: spare channel: %w", err))
	}
	child = append(child, ch[1])
	if err := unix.SetsockoptInt(ch[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		unix.Close(ch[0])
		return fail(fmt.Errorf("sandbox: spare channel: %w", err))
	}
	if sp.ch, err = hostConn(ch[0]); err != nil {
		return fail(err)
	}
	req := spareRequest{Slots: append([]string{JobDir}, t.spec.Slots...), WorkDir: JobDir, Tmp: limits.TmpSize,
		Seccomp: base64.StdEncoding.EncodeToString(t.b.seccomp.prog), Cgroups: len(tasks)}
	for _, r := range limits.rlimits() {
		req.Rlimits = append(req.Rlimits, [3]uint64{uint64(r.resource), r.lim.Cur, r.lim.Max})
	}
	msg, err := json.Marshal(req)
	if err != nil {
		return fail(fmt.Errorf("sandbox: spare request: %w", err))
	}
	fds := append([]int{c1[1], ch[1]}, tasks...)
	if err := unix.Sendmsg(int(t.ctl.Fd()), msg, unix.UnixRights(fds...), nil, 0); err != nil {
		return fail(fmt.Errorf("%w: send the spare request: %v", ErrTemplateGone, err))
	}
	go sp.await(t.spec.ListenAt)
	return sp, nil
}

// hostConn puts the host's end fd of a spare's socket on Go's poller; it takes fd.
func hostConn(fd int) (*net.UnixConn, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sandbox: spare socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "spare socket")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("sandbox: spare socket: %w", err)
	}
	return c.(*net.UnixConn), nil
}

// await waits for the spare's pid 1 to say it is sealed, and learns its pid from the kernel.
func (sp *spare) await(listenAt netip.AddrPort) {
	defer close(sp.ready)
	buf := make([]byte, 5)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	n, oobn, _, _, err := sp.ch.ReadMsgUnix(buf, oob)
	switch {
	case err != nil:
		sp.err = err
		return
	case n == 0 || string(buf[:n]) != "ready":
		sp.err = fmt.Errorf("it said %q", buf[:n])
		return
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) == 0 {
		sp.err = fmt.Errorf("no credentials with its ready: %v", err)
		return
	}
	cred, err := unix.ParseUnixCredentials(&msgs[0])
	if err != nil {
		sp.err = err
		return
	}
	sp.pid = int(cred.Pid)
	if sp.pidfd, err = unix.PidfdOpen(sp.pid, 0); err != nil {
		sp.err = fmt.Errorf("the spare %d: %w", sp.pid, err)
		return
	}
	if listenAt.IsValid() {
		sp.listen, sp.err = listenIn(sp.pid, listenAt)
	}
}

// release ends a spare that serves no job: its first process ends on the closed socket, and
// its pid 1 with it.
func (sp *spare) release() {
	if sp.ch != nil {
		sp.ch.Close() // ends a wait in await
	}
	<-sp.ready
	if sp.pidfd >= 0 {
		_ = unix.PidfdSendSignal(sp.pidfd, unix.SIGKILL, nil, 0)
		unix.Close(sp.pidfd)
	}
	if sp.c1 != nil {
		sp.c1.Close()
	}
	if sp.listen != nil {
		sp.listen.Close()
	}
	if sp.group != nil {
		sp.group.kill()
		_ = sp.group.remove()
	}
}
