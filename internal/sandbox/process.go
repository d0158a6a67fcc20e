package sandbox

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// waitDelay bounds how long Run keeps copying output after the process
	// tree is gone, in case something outside the tree (a Direct job's setsid
	// escapee) still holds the pipes.
	waitDelay = 2 * time.Second
	// treeWait bounds the wait for a killed jail's remaining processes to be
	// reaped by the kernel; SIGKILLed processes normally go in microseconds,
	// but one stuck in uninterruptible I/O must not hang Run forever.
	treeWait = 10 * time.Second
)

// tree reaches the processes of a job that are not in the leader's process
// group (a jail's init runs in its own session).
type tree interface {
	// start starts the leader (cmd.Start, or a variant of it).
	start(cmd *exec.Cmd) error
	// started is called once the leader runs, to finish setting the job
	// up. An error fails the run: the whole tree is killed and Run
	// returns the error.
	started(ctx context.Context) error
	// breached, if not nil, delivers once a limit was breached in a way
	// that must end the run now; the tree is then killed.
	breached() <-chan struct{}
	// kill SIGKILLs them; it must not block.
	kill()
	// wait blocks until they are gone or the bound expires.
	wait(bound time.Duration)
}

// supervise starts cmd in its own process group and waits for it, killing the
// whole group (and t, if not nil) at the timeout or when ctx is done.
// t0 is Run's entry time. A code on finished ends the wait early: the
// Result is returned at once and the tree is killed and waited for in the
// background (Result.Teardown).
func supervise(ctx context.Context, cmd *exec.Cmd, timeout time.Duration, t0 time.Time, t tree, finished <-chan int) (*Result, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// A process group of its own lets us kill background children together
	// with the leader, and keeps terminal signals meant for the host away.
	cmd.SysProcAttr.Setpgid = true
	cmd.WaitDelay = waitDelay
	markInheritedCloexec()

	start := cmd.Start
	if t != nil {
		start = func() error { return t.start(cmd) }
	}
	if err := start(); err != nil {
		return nil, fmt.Errorf("sandbox: start %s: %w", cmd.Path, err)
	}
	forked := time.Now()
	pid := cmd.Process.Pid

	// Learn that the leader exited without reaping it: while it is a zombie
	// its pid, and so the process group id, cannot be reused, which makes
	// signalling the group afterwards safe.
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				return
			}
		}
	}()

	killAll := func() {
		_ = unix.Kill(-pid, unix.SIGKILL)
		if t != nil {
			t.kill()
		}
	}

	var breached <-chan struct{}
	if t != nil {
		if err := t.started(ctx); err != nil {
			killAll()
			<-exited
			t.wait(treeWait)
			_ = cmd.Wait()
			return nil, err
		}
		breached = t.breached()
	}
	res := &Result{StartDelay: time.Since(t0)}
	res.Marks.Entered, res.Marks.Forked, res.Marks.Released = t0, forked, t0.Add(res.StartDelay)

	var expired <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		expired = timer.C
	}

	select {
	case <-exited:
	case <-expired:
		res.TimedOut = true
		killAll()
		<-exited
	case <-ctx.Done():
		res.Canceled = true
		killAll()
		<-exited
	case <-breached:
		// The caller reads which limit from its accounting.
		killAll()
		<-exited
	case code := <-finished:
		// The command has said it is done: what is left (its runtime's own
		// exit, leftovers, the namespaces) is the host's to clean up, and
		// the caller need not wait for it.
		res.Marks.Exited = time.Now()
		res.ExitCode = code
		teardown := make(chan struct{})
		res.Teardown = teardown
		go func() {
			defer close(teardown)
			killAll()
			<-exited
			if t != nil {
				t.wait(treeWait)
			}
			_ = cmd.Wait()
		}()
		return res, nil
	}

	res.Marks.Exited = time.Now()
	res.Teardown = closed

	// Sweep what is left in the group (background children of a Direct job)
	// while the leader is still an unreaped zombie, then wait for the jail's
	// namespace to be torn down, so that nothing of the job outlives Run.
	killAll()
	if t != nil {
		t.wait(treeWait)
	}
	res.Marks.Gone = time.Now()

	// Wait reports a non-zero status as an error, but the status is read
	// from ProcessState below. Its other errors come from copying output to
	// the caller's writers (or ErrWaitDelay): the command still ran, so they
	// are the writers' concern, not a failure to start.
	_ = cmd.Wait()
	res.Duration = time.Since(t0)

	if cmd.ProcessState == nil {
		return nil, fmt.Errorf("sandbox: lost track of process %d", pid)
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
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
	return res, nil
}

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
