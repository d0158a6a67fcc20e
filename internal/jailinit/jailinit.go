// Package jailinit is the init of a jail whose job reaches the network only
// through the host's egress proxy. It runs as the jail's first process,
// listens on a loopback TCP port inside the jail, carries every connection
// to the job's proxy Unix socket, and otherwise behaves like a minimal init:
// it starts the job, passes signals on, reaps orphans, and exits with the
// job's status.
//
// It is built into a program of its own (cmd/jailinit) that the host embeds
// (package initbin) and writes to its data directory at start. The program
// imports only the standard library and golang.org/x/sys, so that it starts
// in about a millisecond: the host binary, which used to be the init, spent
// ~38 ms in the package initialisers of everything it links before the job
// could start. Keep it that way: every import here is paid by every
// default-network job.
//
// The job's environment does not pass through the init's command line (or
// bwrap's environment): the jail builder hands it to bwrap over a pipe
// (--args with --setenv, see internal/sandbox), bwrap sets it for its init,
// and this init hands its own environment on to the job unchanged.
package jailinit

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultListen is where the in-jail forwarder listens. 3128 is the
// customary proxy port, so the odd tool that guesses finds it.
const DefaultListen = "127.0.0.1:3128"

// Exit statuses of the init itself, in the shell's convention, so that a
// job's exit status keeps its meaning.
const (
	ExitInitFailed = 125 // bad arguments, or the forwarder could not start
	ExitCannotExec = 126 // the command exists but could not be run
	ExitNotFound   = 127 // the command is not on PATH
)

// forwardDialWait bounds a connect to the proxy socket, which only waits
// when the proxy's accept backlog is full.
const forwardDialWait = 10 * time.Second

// forwardedSignals are passed on to the job. SIGKILL and SIGSTOP cannot be
// caught; SIGCHLD is the init's own business.
var forwardedSignals = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
}

// Argv returns the argv that runs argv under the init: binary is the init's
// path inside the jail, socket the job's proxy socket inside the jail,
// listen the forwarder's address (DefaultListen when empty).
func Argv(binary, socket, listen string, argv []string) []string {
	if listen == "" {
		listen = DefaultListen
	}
	out := make([]string, 0, 6+len(argv))
	out = append(out, binary, "--socket", socket, "--listen", listen, "--")
	return append(out, argv...)
}

// Main runs the init with args (os.Args[1:]) and returns its exit status:
//
//	jailinit --socket /host/egress/egress.sock --listen 127.0.0.1:3128 -- <argv...>
//
// It listens first (so the job never races the listener), starts argv with
// the same environment, directory and stdio, forwards every connection to
// the socket, passes SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and
// SIGWINCH on to the job, reaps every process that becomes its child (it is
// a child subreaper, and may be pid 1 of a pid namespace), and returns the
// job's status: its exit code, or 128+signal when it was killed. Its own
// failures return ExitInitFailed (ExitCannotExec, ExitNotFound when the
// command cannot be run or found).
//
// Main reaps every child of the process: call it only from the init's own
// main, never in a process that runs other children.
func Main(args []string, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "jailinit: "+format+"\n", a...)
		return ExitInitFailed
	}
	fs := flag.NewFlagSet("jailinit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "the egress proxy's Unix socket")
	listen := fs.String("listen", DefaultListen, "TCP address to forward from")
	if err := fs.Parse(args); err != nil {
		return ExitInitFailed
	}
	argv := fs.Args()
	if *socket == "" || len(argv) == 0 {
		return fail("usage: jailinit --socket PATH [--listen ADDR] -- COMMAND [ARG...]")
	}
	// A missing socket is a broken host, better reported now than as every
	// request failing later.
	if fi, err := os.Stat(*socket); err != nil {
		return fail("proxy socket: %v", err)
	} else if fi.Mode().Type() != os.ModeSocket {
		return fail("proxy socket %s is not a socket", *socket)
	}
	lfd, err := listenTCP(*listen)
	if err != nil {
		return fail("%v", err)
	}

	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(stderr, "jailinit: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return ExitNotFound
		}
		return ExitCannotExec
	}

	// Before the child exists, so that no SIGCHLD or forwarded signal is
	// missed. Catching the forwarded signals is also what lets them reach
	// a pid 1, which the kernel otherwise shields from signals it does not
	// handle.
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, forwardedSignals...)
	// Orphans of the job are re-parented to us rather than to whatever is
	// above, so we reap them even when we are not pid 1.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

	// Pdeathsig fires when the forking thread exits, not the process; pin
	// this goroutine to its thread for good so that the two are the same.
	runtime.LockOSThread()
	// ForkExec rather than os/exec: the init reaps with wait4(-1), which
	// would steal the status from exec.Cmd.Wait.
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		// Should the init die (OOM killer), the job must not run on
		// without its network path.
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		fmt.Fprintf(stderr, "jailinit: %s: %v\n", argv[0], err)
		if errors.Is(err, syscall.ENOENT) {
			return ExitNotFound
		}
		return ExitCannotExec
	}

	go acceptLoop(lfd, *socket, stderr)
	go forward(sigs, pid)
	return reap(pid)
}

// forward passes the signals on to the job. Through a pidfd when the kernel
// has them: the job's pid is free for reuse once reap has collected it, and
// a signal that arrives just then must not reach whoever gets it next.
func forward(sigs <-chan os.Signal, pid int) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	for sig := range sigs {
		s, ok := sig.(syscall.Signal)
		switch {
		case !ok:
		case err == nil:
			_ = unix.PidfdSendSignal(pidfd, s, nil, 0)
		default:
			_ = syscall.Kill(pid, s)
		}
	}
}

// reap waits for children, collecting every one that exits (orphans of the
// job included), until the job itself (pid) has exited, and returns its
// status. It blocks in wait4 rather than waiting for SIGCHLD: the job's exit
// then wakes this very thread, with no signal to pass between threads first.
func reap(pid int) int {
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
		case err != nil:
			return ExitInitFailed // no child left, which cannot be while the job lives
		case wpid == pid:
			return exitStatus(ws)
		}
	}
}

// exitStatus is the shell's rendering of how a process ended.
func exitStatus(ws syscall.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return ExitInitFailed
}

// listenTCP listens on addr, an IPv4 address and port, with a blocking
// socket for acceptLoop. net.Listen would probe for IPv6 and MPTCP and set
// the network poller up first, which costs the init's start more than the
// rest of its work.
func listenTCP(addr string) (int, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return -1, fmt.Errorf("listen %q: want an IPv4 address and port, such as %s", addr, DefaultListen)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("listen %s: %w", addr, err)
	}
	// As net.Listen does: a port in TIME_WAIT from an earlier listener is
	// free to take.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("listen %s: %w", addr, err)
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("listen %s: %w", addr, err)
	}
	return fd, nil
}
