package egress

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// InitArg, as os.Args[1], makes MaybeRunInit run the in-jail init.
const InitArg = "__egress-init"

// DefaultListen is where the in-jail forwarder listens; Env points the
// proxy variables at it. 3128 is the customary proxy port, so the odd tool
// that guesses finds it.
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

// InitArgv returns the argv that runs argv under the init: binary is the
// host binary's path inside the jail (its main must call MaybeRunInit),
// socket the job's proxy socket inside the jail, listen the forwarder's
// address (DefaultListen when empty).
func InitArgv(binary, socket, listen string, argv []string) []string {
	if listen == "" {
		listen = DefaultListen
	}
	out := []string{binary, InitArg, "--socket", socket, "--listen", listen, "--"}
	return append(out, argv...)
}

// MaybeRunInit is called first thing in main(). When os.Args[1] is InitArg
// it becomes the jail's init and never returns:
//
//	<binary> __egress-init --socket /host/egress/egress.sock --listen 127.0.0.1:3128 -- <argv...>
//
// It listens first (so the job never races the listener), starts argv with
// the same environment, directory and stdio, forwards every connection to
// the socket, passes SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and
// SIGWINCH on to the job, reaps every process that becomes its child (it is
// a child subreaper, and may be pid 1 of a pid namespace), and exits with
// the job's status: its exit code, or 128+signal when it was killed. Its own
// failures exit 125 (126, 127 when the command cannot be run or found).
func MaybeRunInit() {
	if len(os.Args) < 2 || os.Args[1] != InitArg {
		return
	}
	os.Exit(runInit(os.Args[2:], os.Stderr))
}

func runInit(args []string, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "egress-init: "+format+"\n", a...)
		return ExitInitFailed
	}
	fs := flag.NewFlagSet(InitArg, flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "the egress proxy's Unix socket")
	listen := fs.String("listen", DefaultListen, "TCP address to forward from")
	if err := fs.Parse(args); err != nil {
		return ExitInitFailed
	}
	argv := fs.Args()
	if *socket == "" || len(argv) == 0 {
		return fail("usage: %s --socket PATH [--listen ADDR] -- COMMAND [ARG...]", InitArg)
	}
	// A missing socket is a broken host, better reported now than as every
	// request failing later.
	if fi, err := os.Stat(*socket); err != nil {
		return fail("proxy socket: %v", err)
	} else if fi.Mode().Type() != os.ModeSocket {
		return fail("proxy socket %s is not a socket", *socket)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fail("%v", err)
	}
	defer ln.Close()

	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(stderr, "egress-init: %v\n", err)
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
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, forwardedSignals...)...)
	defer signal.Stop(sigs)
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
		fmt.Fprintf(stderr, "egress-init: %s: %v\n", argv[0], err)
		if errors.Is(err, syscall.ENOENT) {
			return ExitNotFound
		}
		return ExitCannotExec
	}

	go acceptLoop(ln, *socket, stderr)

	for sig := range sigs {
		if s, ok := sig.(syscall.Signal); ok && s != syscall.SIGCHLD {
			_ = syscall.Kill(pid, s)
		}
		// Reap on every signal, not only SIGCHLD: signals of one kind
		// coalesce, and a full channel drops them.
		if status, done := reap(pid); done {
			return status
		}
	}
	return ExitInitFailed // unreachable: sigs is never closed
}

// reap collects every exited child and reports the job's status once the
// job itself (pid) is among them.
func reap(pid int) (status int, done bool) {
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || wpid <= 0 {
			return status, done
		}
		if wpid == pid {
			done = true
			switch {
			case ws.Exited():
				status = ws.ExitStatus()
			case ws.Signaled():
				status = 128 + int(ws.Signal())
			default:
				status = ExitInitFailed
			}
		}
	}
}

func acceptLoop(ln net.Listener, socket string, stderr io.Writer) {
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, most likely: the job's own doing;
			// wait rather than spin.
			fmt.Fprintf(stderr, "egress-init: accept: %v\n", err)
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		go forwardConn(c, socket)
	}
}

// forwardConn carries one job connection to the proxy. Idle and size limits
// are the proxy's: it closes its side, and the close travels back here.
func forwardConn(c net.Conn, socket string) {
	up, err := net.DialTimeout("unix", socket, forwardDialWait)
	if err != nil {
		msg := fmt.Sprintf("egress: the host's egress proxy is unreachable: %v\n", err)
		fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(msg), msg)
		c.Close()
		return
	}
	join(c, up, nil)
}

// Env returns the environment that sends a job's HTTP clients to the
// forwarder at listen (DefaultListen when empty). Clients disagree on
// names: curl reads https_proxy, HTTPS_PROXY and only lower-case http_proxy;
// Python's urllib and requests prefer lower case; Bun, Go, undici's
// EnvHttpProxyAgent (Claude Code) and Rust's reqwest (Codex) read either;
// curl, requests, httpx and git also fall back to ALL_PROXY. Node's own
// fetch and http modules ignore all of them unless NODE_USE_ENV_PROXY=1
// (Node 22.21+, 24.5+). NO_PROXY keeps the job's own loopback services
// direct; it names destinations only, so it does not bypass the proxy on
// the way to the proxy.
func Env(listen string) []string {
	if listen == "" {
		listen = DefaultListen
	}
	u := "http://" + listen
	const noProxy = "localhost,127.0.0.1,::1"
	return []string{
		"HTTPS_PROXY=" + u, "https_proxy=" + u,
		"HTTP_PROXY=" + u, "http_proxy=" + u,
		"ALL_PROXY=" + u, "all_proxy=" + u,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
		"NODE_USE_ENV_PROXY=1",
	}
}
