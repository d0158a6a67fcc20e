package sandbox

// forkRun, the Handle of a job forked from a template (see doc.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

func envObject(m *envMap) map[string]string { return m.vals }

// cloneTree returns a detached copy of the mount tree at dir (its submounts, the job's
// volumes, included), nosuid and nodev as bwrap binds are, for a fork to move into place.
func cloneTree(dir string) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return -1, fmt.Errorf("sandbox: clone %s for the fork: %w", dir, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sandbox: make %s nosuid and nodev for the fork: %w", dir, err)
	}
	return fd, nil
}

// forkRun is the Handle of a job forked from a template.
type forkRun struct {
	t0     time.Time
	limits Limits
	listen *Listen
	group  *runGroup
	pids   *pidsWatch
	c1     *net.UnixConn // the spare's first process: the job's fds went there, its exit status comes back
	ch     *net.UnixConn // its pid 1's channel, until the environment is sent
	pid    int           // the job's pid 1, in the host's pid namespace
	pidfd  int
	marks  Marks

	copies  sync.WaitGroup // stdin, stdout and stderr copies
	readers []*os.File     // the host's ends of stdout and stderr

	ended    chan int
	killed   chan struct{}
	killOnce sync.Once
	mu       sync.Mutex
	res      *Result
	done     chan struct{} // res is set
	gone     chan struct{} // every process is gone, all released
}

// jobFds are the descriptors the job's spare gets: its stdin, stdout and stderr, then a clone
// of each of its directories. They are returned, to be closed once sent, even with an error.
func (f *forkRun) jobFds(s *Spec, dirs []string) ([]int, error) {
	var child []int
	stdin, err := f.stdin(s.Stdin)
	if err != nil {
		return child, err
	}
	child = append(child, stdin)
	for _, w := range []io.Writer{s.Stdout, s.Stderr} {
		fd, err := f.output(w)
		if err != nil {
			return child, err
		}
		child = append(child, fd)
	}
	for _, d := range dirs {
		fd, err := cloneTree(d)
		if err != nil {
			return child, err
		}
		child = append(child, fd)
	}
	return child, nil
}

// sendEnv writes the job's environment straight to its pid 1, sealed since before the job
// existed; it reads it once its directories and stdio are in place. Neither the template nor
// the spare's first process ever holds it.
func (f *forkRun) sendEnv(env []string) error {
	msg, err := json.Marshal(envObject(jailEnv(env)))
	if err != nil {
		return fmt.Errorf("sandbox: the fork's environment: %w", err)
	}
	if _, err := f.ch.Write(append(msg, '\n')); err != nil {
		// Its pid 1 is gone: it read nothing of the job (its arguments wait unread).
		return fmt.Errorf("%w: hand the job its environment: %v", ErrTemplateGone, err)
	}
	f.ch.Close()
	f.ch = nil
	f.marks.Released = time.Now()
	return nil
}

// stdin returns the child's stdin: a pipe fed from r, or the null device.
func (f *forkRun) stdin(r io.Reader) (int, error) {
	if r == nil {
		fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("sandbox: fork stdin: %w", err)
		}
		return fd, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return -1, fmt.Errorf("sandbox: fork stdin: %w", err)
	}
	go func() {
		_, _ = io.Copy(pw, r)
		pw.Close()
	}()
	fd, err := unix.Dup(int(pr.Fd()))
	pr.Close()
	if err != nil {
		return -1, fmt.Errorf("sandbox: fork stdin: %w", err)
	}
	unix.CloseOnExec(fd)
	return fd, nil
}

// output returns the write end of a pipe whose reads go to w.
func (f *forkRun) output(w io.Writer) (int, error) {
	if w == nil {
		w = io.Discard
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return -1, fmt.Errorf("sandbox: fork output: %w", err)
	}
	f.readers = append(f.readers, pr)
	f.copies.Add(1)
	go func() {
		defer f.copies.Done()
		_, _ = io.Copy(w, pr)
	}()
	fd, err := unix.Dup(int(pw.Fd()))
	pw.Close()
	if err != nil {
		return -1, fmt.Errorf("sandbox: fork output: %w", err)
	}
	unix.CloseOnExec(fd)
	return fd, nil
}

// exitStatus reads the wait status the fork's first process (C1) reports once the job's pid 1
// is gone; ok is false when it never did (it was killed).
func (f *forkRun) exitStatus() (unix.WaitStatus, bool) {
	var all []byte
	buf := make([]byte, 64)
	for {
		n, err := f.c1.Read(buf)
		if n > 0 {
			all = append(all, buf[:n]...)
		}
		if err == unix.EINTR {
			continue
		}
		if n <= 0 || err != nil {
			break
		}
	}
	rest, found := bytes.CutPrefix(all, []byte("exit "))
	if !found {
		return 0, false
	}
	st, err := strconv.Atoi(string(rest))
	if err != nil {
		return 0, false
	}
	return unix.WaitStatus(st), true
}

func (f *forkRun) killAll() {
	if f.pidfd >= 0 {
		_ = unix.PidfdSendSignal(f.pidfd, unix.SIGKILL, nil, 0)
	}
	if f.group != nil {
		f.group.kill()
	}
}

// monitor waits for the run's end and tears it down, as process.monitor does for a bwrap.
func (f *forkRun) monitor(ctx context.Context, timeout time.Duration) {
	defer close(f.gone)
	res := &Result{StartDelay: f.marks.Released.Sub(f.t0), Marks: f.marks}
	type status struct {
		ws unix.WaitStatus
		ok bool
	}
	exited := make(chan status, 1)
	go func() {
		ws, ok := f.exitStatus()
		exited <- status{ws, ok}
	}()
	var expired <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		expired = timer.C
	}
	var st status
	select {
	case st = <-exited:
	case <-expired:
		res.TimedOut = true
		f.killAll()
		st = <-exited
	case <-ctx.Done():
		res.Canceled = true
		f.killAll()
		st = <-exited
	case <-f.killed:
		res.Canceled = true
		f.killAll()
		st = <-exited
	case <-f.pids.breached():
		f.killAll()
		st = <-exited
	case code := <-f.ended:
		res.Marks.Exited = time.Now()
		res.ExitCode = code
		f.account(res)
		f.deliver(res)
		f.killAll()
		<-exited
		f.release()
		return
	}
	res.Marks.Exited = time.Now()
	f.killAll() // what the job's pid 1 left: its namespace went with it, its cgroup may not have
	f.waitOutput()
	res.Marks.Gone = time.Now()
	res.Duration = time.Since(f.t0)
	switch {
	case !st.ok:
		res.ExitCode, res.Signal = -1, "SIGKILL"
	case st.ws.Signaled() && (res.TimedOut || res.Canceled):
		res.ExitCode, res.Signal = -1, unix.SignalName(st.ws.Signal())
	case st.ws.Signaled():
		// As bwrap reports a command killed by a signal.
		res.ExitCode = signalExit(st.ws.Signal())
	default:
		res.ExitCode = st.ws.ExitStatus()
		res.TimedOut, res.Canceled = false, false
	}
	if res.TimedOut {
		res.Limit = LimitTimeout
	}
	f.account(res)
	f.release()
	f.deliver(res)
}

// waitOutput waits, bounded, for the copies of the job's output: its pipes close once every
// process of the job is gone.
func (f *forkRun) waitOutput() {
	done := make(chan struct{})
	go func() {
		f.copies.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(waitDelay):
		for _, r := range f.readers {
			r.Close()
		}
	}
}

func (f *forkRun) account(res *Result) {
	var oom, pids uint64
	if f.group != nil {
		oom, pids = f.group.oomKills(), f.group.pidsRefused()
	}
	attributeLimit(res, f.limits, oom, pids)
}

func (f *forkRun) release() {
	f.pids.stop()
	if f.group != nil {
		f.group.kill()
		_ = f.group.remove()
		f.group = nil
	}
	if f.pidfd >= 0 {
		unix.Close(f.pidfd)
		f.pidfd = -1
	}
	for _, c := range []*net.UnixConn{f.ch, f.c1} {
		if c != nil {
			c.Close()
		}
	}
	for _, r := range f.readers {
		r.Close()
	}
}

func (f *forkRun) deliver(res *Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.res = res
	close(f.done)
}

// Wait implements Handle.
func (f *forkRun) Wait(ctx context.Context) <-chan *Result {
	c := make(chan *Result, 1)
	go func() {
		defer close(c)
		select {
		case <-f.done:
			c <- f.res
		case <-ctx.Done():
		}
	}()
	return c
}

// End implements Handle.
func (f *forkRun) End(code int) {
	select {
	case f.ended <- code:
	default:
	}
}

// Kill implements Handle.
func (f *forkRun) Kill() { f.killOnce.Do(func() { close(f.killed) }) }

// Destroy implements Handle.
func (f *forkRun) Destroy() {
	f.Kill()
	<-f.gone
}
