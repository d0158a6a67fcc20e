package sandbox

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// waitDelay bounds how long a run keeps copying output after the process
	// tree is gone, in case something outside the tree (a Direct job's setsid
	// escapee) still holds the pipes.
	waitDelay = 2 * time.Second
	// treeWait bounds the wait for a killed jail's remaining processes to be
	// reaped by the kernel; SIGKILLed processes normally go in microseconds,
	// but one stuck in uninterruptible I/O must not hang a teardown forever.
	treeWait = 10 * time.Second
)

// tree is what a jail adds to the leader's process group: the processes of a job that are
// not in it (a jail's init runs in its own session), and what the run holds besides them (a
// cgroup, descriptors). A process owns its tree from startProcess on: it releases it however
// the run ends.
type tree interface {
	// start starts the leader (cmd.Start, or a variant of it).
	start(cmd *exec.Cmd) error
	// started is called once the leader runs, to finish setting the job
	// up. An error fails the start: the whole tree is killed and Start
	// returns the error.
	started(ctx context.Context) error
	// breached, if not nil, delivers once a limit was breached in a way
	// that must end the run now; the tree is then killed.
	breached() <-chan struct{}
	// kill SIGKILLs them; it must not block.
	kill()
	// wait blocks until they are gone or the bound expires.
	wait(bound time.Duration)
	// account adds to res what the jail knows of the run: its marks, and the limit that
	// ended it. It is called once the run has its exit code, before release.
	account(res *Result)
	// release frees what the run held, once the leader has been waited for.
	release()
}

// process is the Handle of a started command: a goroutine (monitor) owns it from the start
// to its teardown.
type process struct {
	cmd    *exec.Cmd
	t      tree
	pid    int
	t0     time.Time
	exited chan struct{} // closed once the leader exited, which is not reaped until the teardown

	ended    chan int      // End's code; nil when the jail ignores End
	killed   chan struct{} // closed by Kill
	killOnce sync.Once

	mu      sync.Mutex
	res     *Result          // set once, by deliver
	waiters []chan<- *Result // Wait's channels without a context to watch, fed by deliver
	done    chan struct{}    // closed once res is set
	gone    chan struct{}    // closed once every process of the run is gone and t released
}

// startProcess starts cmd in its own process group with the tree t, and watches it: the whole
// group (and t) is killed at the timeout, when ctx is done, on Kill, and once the leader exits.
// t0 is when Start was called. It releases t when it fails.
func startProcess(ctx context.Context, cmd *exec.Cmd, timeout time.Duration, t0 time.Time, t tree, endsEarly bool) (Handle, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// A process group of its own lets us kill background children together
	// with the leader, and keeps terminal signals meant for the host away.
	cmd.SysProcAttr.Setpgid = true
	cmd.WaitDelay = waitDelay
	markInheritedCloexec()

	if err := t.start(cmd); err != nil {
		t.release()
		return nil, fmt.Errorf("sandbox: start %s: %w", cmd.Path, err)
	}
	forked := time.Now()
	p := &process{cmd: cmd, t: t, pid: cmd.Process.Pid, t0: t0, exited: make(chan struct{}),
		killed: make(chan struct{}), done: make(chan struct{}), gone: make(chan struct{})}
	if endsEarly {
		p.ended = make(chan int, 1)
	}

	// Learn that the leader exited without reaping it: while it is a zombie
	// its pid, and so the process group id, cannot be reused, which makes
	// signalling the group afterwards safe.
	go func() {
		defer close(p.exited)
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				return
			}
		}
	}()

	if err := t.started(ctx); err != nil {
		p.killAll()
		<-p.exited
		t.wait(treeWait)
		_ = cmd.Wait()
		t.release()
		return nil, err
	}
	res := &Result{StartDelay: time.Since(t0)}
	res.Marks.Entered, res.Marks.Forked, res.Marks.Released = t0, forked, t0.Add(res.StartDelay)
	go p.monitor(ctx, timeout, t.breached(), res)
	return p, nil
}

func (p *process) killAll() {
	_ = unix.Kill(-p.pid, unix.SIGKILL)
	p.t.kill()
}

// monitor waits for the run to end, then tears it down: res goes to Wait once the tree is
// gone, or at once when End comes first.
func (p *process) monitor(ctx context.Context, timeout time.Duration, breached <-chan struct{}, res *Result) {
	defer close(p.gone)
	var expired <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		expired = timer.C
	}

	select {
	case <-p.exited:
	case <-expired:
		res.TimedOut = true
		p.killAll()
		<-p.exited
	case <-ctx.Done():
		res.Canceled = true
		p.killAll()
		<-p.exited
	case <-p.killed:
		res.Canceled = true
		p.killAll()
		<-p.exited
	case <-breached:
		// The jail reads which limit from its accounting.
		p.killAll()
		<-p.exited
	case code := <-p.ended:
		// The command has said it is done: what is left (its runtime's own
		// exit, leftovers, the namespaces) is the host's to clean up, and
		// the caller need not wait for it.
		res.Marks.Exited = time.Now()
		res.ExitCode = code
		p.t.account(res)
		p.deliver(res)
		// The waiter, woken by deliver, reads its outcome before the teardown's kills take
		// this thread: the answer is what the caller is waiting for, the teardown is not.
		runtime.Gosched()
		p.killAll()
		<-p.exited
		p.t.wait(treeWait)
		_ = p.cmd.Wait()
		p.t.release()
		return
	}

	res.Marks.Exited = time.Now()
	// Sweep what is left in the group (background children of a Direct job)
	// while the leader is still an unreaped zombie, then wait for the jail's
	// namespace to be torn down, so that nothing of the job outlives the run.
	p.killAll()
	p.t.wait(treeWait)
	res.Marks.Gone = time.Now()

	// Wait reports a non-zero status as an error, but the status is read
	// from ProcessState below. Its other errors come from copying output to
	// the caller's writers (or ErrWaitDelay): the command still ran, so they
	// are the writers' concern, not a failure to start.
	_ = p.cmd.Wait()
	res.Duration = time.Since(p.t0)
	p.status(res)
	if res.Err == nil {
		p.t.account(res)
	}
	p.t.release()
	p.deliver(res)
}

// status reads how the leader ended into res.
func (p *process) status(res *Result) {
	if p.cmd.ProcessState == nil {
		res.ExitCode = -1
		res.Err = fmt.Errorf("sandbox: lost track of process %d", p.pid)
		return
	}
	ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		res.ExitCode = -1
		res.Signal = unix.SignalName(ws.Signal())
	default:
		res.ExitCode = ws.ExitStatus()
		// The command finished on its own just before our kill landed:
		// report what it did, not what we tried.
		res.TimedOut, res.Canceled = false, false
	}
	if res.TimedOut {
		res.Limit = LimitTimeout
	}
}

func (p *process) deliver(res *Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.res = res
	for _, c := range p.waiters {
		c <- res
		close(c)
	}
	p.waiters = nil
	close(p.done)
}

// Wait implements Handle. A wait that no context can end (the usual one: the run's own
// context bounds it) is handed the result by deliver, with no goroutine in between.
func (p *process) Wait(ctx context.Context) <-chan *Result {
	c := make(chan *Result, 1)
	p.mu.Lock()
	switch {
	case p.res != nil:
		c <- p.res
		close(c)
		p.mu.Unlock()
		return c
	case ctx.Done() == nil:
		p.waiters = append(p.waiters, c)
		p.mu.Unlock()
		return c
	}
	p.mu.Unlock()
	go func() {
		defer close(c)
		select {
		case <-p.done:
			c <- p.res
		case <-ctx.Done():
		}
	}()
	return c
}

// End implements Handle.
func (p *process) End(code int) {
	select {
	case p.ended <- code:
	default: // ended before, or a jail that ignores End (nil channel)
	}
}

// Kill implements Handle.
func (p *process) Kill() { p.killOnce.Do(func() { close(p.killed) }) }

// Destroy implements Handle.
func (p *process) Destroy() {
	p.Kill()
	<-p.gone
}

// noTree is the tree of a command that has nothing outside its process group (Direct).
type noTree struct{}

func (noTree) start(cmd *exec.Cmd) error     { return cmd.Start() }
func (noTree) started(context.Context) error { return nil }
func (noTree) breached() <-chan struct{}     { return nil }
func (noTree) kill()                         {}
func (noTree) wait(time.Duration)            {}
func (noTree) account(*Result)               {}
func (noTree) release()                      {}

// markInheritedCloexec sets close-on-exec on every descriptor above
// stderr. Go opens its own with it, but not the ones the host inherited
// from whoever started it (a supervisor's pipe, a terminal's fd): os/exec
// passes those on to every child, and so into a jail. Setting the flag only
// keeps them from children; the host can still use them. Done before each
// start, as a library may create such descriptors at any time.
func markInheritedCloexec() {
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return
	}
	// Before Linux 5.11: one by one.
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// checkDir reports a clear error unless path is an existing directory.
func checkDir(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", path)
	}
	return nil
}
